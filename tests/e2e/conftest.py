"""Fixtures of the end-to-end tests: an isolated ROS 2 environment (inherited by the CLI subprocesses)."""

from __future__ import annotations

from sim2real.deploy.ros_env import isolate_ros_environment

DOMAIN_ID = isolate_ros_environment()  # before any rclpy.init in this process

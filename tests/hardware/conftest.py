"""Fixtures of the hardware (stand-in robot) tests: an isolated ROS 2 environment and an rclpy context."""

from __future__ import annotations

import itertools

import pytest

from sim2real.deploy.ros_env import isolate_ros_environment

DOMAIN_ID = isolate_ros_environment()  # before any rclpy.init in this process
_namespaces = itertools.count()


@pytest.fixture(scope="module")
def ros_ctx():
    from sim2real.deploy.ros_runtime import ros_context

    with ros_context() as ctx:
        yield ctx


@pytest.fixture
def namespace():
    return f"/hardware_test_{next(_namespaces)}"

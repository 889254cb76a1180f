"""Command-line arguments of ``sim2real deploy`` and ``sim2real standin`` (kept free of ROS imports so that
``sim2real --help`` works without a ROS 2 environment)."""

from __future__ import annotations

import argparse


def add_deploy_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--policy", required=True, help="folder of an exported policy (policy.onnx + metadata.json)")
    p.add_argument("--robot", required=True, help="robot config name or YAML path of the robot this runs on")


def add_standin_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--robot", default="crazyflie2", help="robot config name or YAML path")

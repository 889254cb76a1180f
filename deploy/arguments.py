"""Command-line arguments of ``sim2real deploy`` and ``sim2real standin`` (kept free of ROS imports so that
``sim2real --help`` works without a ROS 2 environment)."""

from __future__ import annotations

import argparse
import math


def finite_float(text: str) -> float:
    """argparse type: a finite float (``nan``/``inf`` are refused)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be finite, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """argparse type: a finite float > 0."""
    value = finite_float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text!r}")
    return value


def non_negative_float(text: str) -> float:
    """argparse type: a finite float >= 0."""
    value = finite_float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {text!r}")
    return value


def add_deploy_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--policy", required=True, help="folder of an exported policy (policy.onnx + metadata.json)")
    p.add_argument("--robot", required=True, help="robot config name or YAML path of the robot this runs on")
    p.add_argument("--namespace", default=None,
                   help="ROS namespace of the topics (quadrotor: odom, goal, estop, cmd/motors|cmd/ctbr, default "
                        "/crazyflie; legged robot: joint_states, imu, jump_command, estop, cmd/joint_targets, "
                        "cmd/joint_gains, and for footstep policies odom, footstep_plan, footstep_plan_poses, "
                        "footstep_status; default /<robot name>)")
    p.add_argument("--node-name", default="policy_node", help="ROS node name (default policy_node)")
    p.add_argument("--activate", action="store_true",
                   help="configure and activate at start (otherwise wait for the lifecycle services)")
    p.add_argument("--state-timeout", type=positive_float, default=0.1, metavar="S",
                   help="odometry (legged: joint states or IMU) older than this is stale and idles the motors "
                        "(legged: damping mode) (s, default 0.1)")
    p.add_argument("--duration", type=positive_float, default=None, metavar="S",
                   help="run this long, then idle the motors and exit (s; default: until Ctrl-C)")
    p.add_argument("--goal", type=finite_float, nargs=3, metavar=("X", "Y", "Z"),
                   help="quadrotor: initial goal position in the world frame (m; default: hold the first odometry "
                        "position)")
    p.add_argument("--rate-hz", type=positive_float, default=None,
                   help="quadrotor: override the control rate (benchmarks only; default: the policy's training rate)")
    p.add_argument("--ramp-s", type=non_negative_float, default=2.0, metavar="S",
                   help="legged robot: on activation, ramp linearly from the measured joint positions to the default "
                        "pose over this time before the policy takes over (s, default 2)")
    p.add_argument("--damping-kd", type=positive_float, default=None, metavar="KD",
                   help="legged robot: joint damping of the damping mode (kp = 0) sent on faults, e-stop and "
                        "deactivation (N m s/rad, default 2)")
    p.add_argument("--max-tilt", type=positive_float, default=1.0, metavar="RAD",
                   help="legged robot: a base tilt beyond this (from the IMU) during the ramp or the policy means a "
                        "fall: damping mode until the node is activated again (rad, default 1.0)")


def add_standin_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--robot", default="crazyflie2",
                   help="robot config name or YAML path (a quadrotor or a legged robot, e.g. go2)")
    p.add_argument("--namespace", default=None,
                   help="ROS namespace of the topics (default /crazyflie for a quadrotor, /<robot name> for a legged "
                        "robot)")
    p.add_argument("--node-name", default="standin", help="ROS node name (default standin)")
    p.add_argument("--initial-position", type=finite_float, nargs=3, default=[0.0, 0.0, 1.0],
                   metavar=("X", "Y", "Z"),
                   help="quadrotor: where the drone is held until the first command (m, world frame; default 0 0 1)")
    p.add_argument("--mass-scale", type=positive_float, default=1.05,
                   help="quadrotor: true mass / nominal mass (default 1.05: the stand-in differs from the config)")
    p.add_argument("--thrust-scale", type=positive_float, default=0.97,
                   help="quadrotor: true max motor thrust / nominal (default 0.97)")
    p.add_argument("--inertia-scale", type=positive_float, default=1.03,
                   help="quadrotor: true inertia / nominal (default 1.03)")
    p.add_argument("--motor-time-constant", type=positive_float, default=None, metavar="S",
                   help="quadrotor: true motor time constant (s; default: the robot config's)")
    p.add_argument("--ext-force", type=finite_float, nargs=3, default=[0.0, 0.0, 0.0], metavar=("FX", "FY", "FZ"),
                   help="quadrotor: constant external force in the world frame, e.g. wind (N, default 0 0 0)")
    p.add_argument("--sensor-rate-hz", type=positive_float, default=None,
                   help="odometry and IMU (legged: joint states and IMU) publishing rate (Hz, default 100 for a "
                        "quadrotor, 500 for a legged robot; at most the physics rate)")
    p.add_argument("--odom-rate-hz", type=positive_float, default=None,
                   help="legged robot: ground-truth odometry (odom, frame 'odom') and contacts publishing rate (Hz, "
                        "default 50; at most the physics rate)")
    p.add_argument("--command-timeout", type=positive_float, default=None, metavar="S",
                   help="commands older than this idle the motors, like the firmware watchdog (legged: damping "
                        "mode) (s, default 0.2 for a quadrotor, 0.1 for a legged robot)")
    p.add_argument("--mjcf", default=None, metavar="PATH",
                   help="legged robot: simulate this MJCF model instead of the robot config's (e.g. MuJoCo "
                        "Menagerie's unitree_go2/scene.xml)")
    p.add_argument("--gantry", choices=["auto", "on", "off"], default="auto",
                   help="legged robot: hold the base where it starts (a gantry) until the first joint command "
                        "arrives (auto: on for bipeds, which cannot stand in damping mode; off for others)")
    p.add_argument("--initial-pose", choices=["crouch", "default"], default="crouch",
                   help="legged robot: joint pose the robot starts in, on the floor (default crouch: folded legs, "
                        "resting on its feet or belly; default: the robot config's default pose)")
    p.add_argument("--damping-kd", type=positive_float, default=None, metavar="KD",
                   help="legged robot: joint damping held without fresh commands (N m s/rad, default 2)")
    p.add_argument("--duration", type=positive_float, default=None, metavar="S",
                   help="run this long, then exit (s; default: until Ctrl-C)")

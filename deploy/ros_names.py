"""ROS names of a deploy, stand-in or bridge command, checked before any node starts: the robot's default namespace
(:func:`robot_namespace`), the namespace and node name (:func:`check_ros_names`), drone names and their
positions (:func:`drone_names`, :func:`parse_positions`, :func:`check_swarm_names`).

Parsing needs no ROS; the checks import rclpy's name validators.
"""

from __future__ import annotations

import math


def robot_namespace(args) -> tuple[dict, str]:
    """The robot config named by ``args.robot`` and its kind; fills the kind's default of an unset ``--namespace``
    (quadrotor: ``/crazyflie``; legged robot: ``/<robot name>``).

    Raises:
        ConfigError: unknown robot or unreadable robot YAML.
    """
    from sim2real.configs import load_robot

    robot = load_robot(args.robot)
    kind = robot.get("kind")
    if args.namespace is None:
        args.namespace = "/crazyflie" if kind != "legged" else f"/{robot.get('name')}"
    return robot, kind


def ros_command(args) -> tuple[str, str]:
    """(the command line's name, e.g. ``sim2real bridge crazyflie``, the extra it needs) of a ROS command's
    parsed ``args``: ``bridge`` the hardware extra, ``deploy --finetune`` the finetune extra, else deploy."""
    command = getattr(args, "command", None) or "deploy"
    if command == "bridge":
        return f"sim2real bridge {getattr(args, 'bridge', '')}".rstrip(), "hardware"
    if command == "deploy" and getattr(args, "finetune", None) is not None:
        return "sim2real deploy --finetune", "finetune"
    return f"sim2real {command}", "deploy"


def check_ros_names(args) -> None:
    """The first step of every ROS command (deploy, standin, bridge): load rclpy, then check the namespace and node
    name (and ``--swarm-ns`` with ``--drones``).

    Raises:
        MissingExtraError, RosUnavailableError: rclpy is not installed (one line naming the extra, see
            :func:`ros_command`) or cannot be imported (ConfigErrors: one line saying why and the fix, see
            :func:`sim2real.deploy.ros_env.require_rclpy`).
        ConfigError: a namespace or node name ROS 2 would reject.
    """
    from sim2real.deploy.ros_env import require_rclpy

    require_rclpy(*ros_command(args))
    from rclpy.exceptions import NameValidationException
    from rclpy.validate_namespace import validate_namespace
    from rclpy.validate_node_name import validate_node_name

    from sim2real.configs import ConfigError

    checks = [("--namespace", args.namespace, validate_namespace), ("--node-name", args.node_name, validate_node_name)]
    if getattr(args, "drones", None) is not None:
        checks.append(("--swarm-ns", args.swarm_ns, validate_namespace))
    for flag, value, validate in checks:
        try:
            validate(value)
        except NameValidationException as exc:
            raise ConfigError(f"{flag} {value!r}: {str(exc).splitlines()[0]}") from None


def parse_positions(text: str) -> list[list[float]]:
    """``"x,y,z;x,y,z;..."`` -> ``[[x, y, z], ...]`` (finite floats).

    Raises:
        ValueError: a malformed or non-finite entry.
    """
    out = []
    for i, item in enumerate(part for part in text.split(";") if part.strip()):
        try:
            values = [float(v) for v in item.split(",")]
        except ValueError:
            raise ValueError(f"position {i} ({item.strip()!r}) is not x,y,z") from None
        if len(values) != 3 or not all(math.isfinite(v) for v in values):
            raise ValueError(f"position {i} ({item.strip()!r}) must be 3 finite numbers x,y,z")
        out.append(values)
    return out


def drone_names(spec: str) -> list[str]:
    """``--drones``: a count ``N`` (names ``cf0 .. cf{N-1}``) or comma-separated names.

    Raises:
        ValueError: no drone, a count below 1, or a name twice.
    """
    spec = spec.strip()
    if spec.isdigit():
        if int(spec) < 1:
            raise ValueError("--drones: need at least one drone")
        return [f"cf{i}" for i in range(int(spec))]
    names = [n.strip() for n in spec.split(",") if n.strip()]
    if not names:
        raise ValueError("--drones: need at least one drone name")
    if len(set(names)) != len(names):
        raise ValueError(f"--drones: a name is given twice in {spec!r}")
    return names


def check_swarm_names(swarm_ns: str, names: list[str]) -> None:
    """Raise ValueError unless every ``<swarm_ns>/<name>`` is a valid ROS namespace (imports rclpy)."""
    from rclpy.exceptions import NameValidationException
    from rclpy.validate_namespace import validate_namespace

    for name in names:
        try:
            validate_namespace("/" + "/".join(p for p in (swarm_ns.strip("/"), name) if p))
        except NameValidationException as exc:
            raise ValueError(f"drone name {name!r} under {swarm_ns!r}: {str(exc).splitlines()[0]}") from None

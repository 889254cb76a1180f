"""``sim2real standin`` and ``sim2real bridge``: the robot's default namespace, the ROS names, then the stand-in of
the robot's kind (:mod:`sim2real.hardware.standins`) or the named bridge (``crazyflie``, ``unitree``).

A stand-in simulates the ROBOT a policy will drive, so it is chosen by the robot config's ``kind``: ``legged`` ->
:mod:`~sim2real.hardware.standins.legged`; a quadrotor -> :mod:`~sim2real.hardware.standins.quadrotor`, or with
``--drones`` the swarm stand-in (:mod:`~sim2real.hardware.standins.swarm`).
"""

from __future__ import annotations

from sim2real.tasks.spec import resolve_hook

#: ``sim2real bridge NAME`` -> ``"module:attr"`` of its entry ``bridge_main(args) -> exit status``.
BRIDGES = {
    "crazyflie": "sim2real.hardware.crazyflie.bridge:bridge_main",
    "unitree": "sim2real.hardware.unitree.bridge:bridge_main",
}


def standin_command(args) -> int:
    """``sim2real standin``: check the options against the robot's kind, fill the quadrotor defaults
    (``--sensor-rate-hz`` 100, ``--command-timeout`` 0.2 s), run the stand-in (with ``--viz``, inside a
    :class:`~sim2real.deploy.watch.session.DeployWatch`: the live view of its topics).

    Raises:
        ConfigError: unknown robot, bad ROS names, an option of another robot kind (``--mjcf`` on a quadrotor;
            ``--drones``, ``--gap``, ``--latency-s`` on a legged robot; ``--gap`` / ``--latency-s`` with
            ``--drones``), a ``--lockstep`` rate that does not divide the physics rate.
    """
    from sim2real.deploy.ros_names import check_ros_names, robot_namespace

    robot, kind = robot_namespace(args)
    check_ros_names(args)
    from sim2real.deploy.watch.session import watch_from_args

    # --viz: checked and bound now, before any ROS traffic (a stand-in records nothing)
    watch = watch_from_args(args, robot, [args.swarm_ns if args.drones is not None else args.namespace],
                            record=False)
    if watch is None:
        return _standin(args, robot, kind)
    try:
        with watch:
            return _standin(args, robot, kind)
    finally:
        watch.close()


def _standin(args, robot: dict, kind: str) -> int:
    from sim2real.configs import ConfigError

    if kind == "legged":
        if args.drones is not None:
            raise ConfigError(f"--drones simulates a quadrotor swarm; robot '{robot.get('name')}' is {kind!r}")
        if args.gap is not None or args.latency_s is not None:
            raise ConfigError(f"--gap and --latency-s apply to the quadrotor stand-in; robot '{robot.get('name')}' "
                              f"is {kind!r}")
        from sim2real.hardware.standins.legged import standin_main as legged_standin_main

        return legged_standin_main(args, robot)
    if args.mjcf is not None:
        raise ConfigError(f"--mjcf applies to legged robots; robot '{robot.get('name')}' is {kind!r}")
    args.sensor_rate_hz = 100.0 if args.sensor_rate_hz is None else args.sensor_rate_hz
    args.command_timeout = 0.2 if args.command_timeout is None else args.command_timeout
    if args.drones is not None:
        if args.gap is not None or args.latency_s is not None:
            raise ConfigError("--gap and --latency-s apply to the single quadrotor stand-in, not to --drones")
        from sim2real.hardware.standins.quadrotor import resolve_standin_options
        from sim2real.hardware.standins.swarm import swarm_standin_main

        resolve_standin_options(args)  # the defaults of the scales
        return swarm_standin_main(args, robot)
    from sim2real.hardware.standins.quadrotor import standin_main

    return standin_main(args)


def bridge_command(args) -> int:
    """``sim2real bridge crazyflie|unitree``: the ROS names (unitree: the namespace default ``/<robot name>``), then
    the bridge (see :data:`BRIDGES`).

    Raises:
        ConfigError: unknown robot, bad ROS names; the bridge's own errors.
    """
    from sim2real.deploy.ros_names import check_ros_names, robot_namespace

    if args.bridge == "unitree":
        robot_namespace(args)  # the namespace default: /<robot name>
    check_ros_names(args)
    return resolve_hook(BRIDGES[args.bridge], "")(args)

"""Command-line arguments of ``sim2real deploy`` and ``sim2real standin`` (kept free of ROS imports so that
``sim2real --help`` works without a ROS 2 environment)."""

from __future__ import annotations

import argparse
import math

from sim2real.deploy.control_clock import DEFAULT_RT_PRIORITY, STANDIN_RT_PRIORITY  # no ROS import there
from sim2real.deploy.watch.options import DEFAULT_VIZ_PORT, VIZ_DEFAULT_CONST  # nor there


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


def int_in_range(lo: int, hi: int):
    """argparse type: an integer in ``[lo, hi]`` (a one-line error otherwise)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"must be in {lo}-{hi}, got {value}")
        return value

    return parse


def add_deploy_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--policy", default=None,
                   help="folder of an exported policy (policy.onnx + metadata.json); required unless --finetune")
    p.add_argument("--robot", required=True, help="robot config name or YAML path of the robot this runs on")
    p.add_argument("--namespace", default=None,
                   help="ROS namespace of the topics (quadrotor: odom, goal, estop, cmd/motors|cmd/ctbr, default "
                        "/crazyflie; legged robot: joint_states, imu, jump_command, estop, cmd/joint_targets, "
                        "cmd/joint_gains, and for footstep policies odom, footstep_plan, footstep_plan_poses, "
                        "foot_wrench/left|right, footstep_status; default /<robot name>)")
    p.add_argument("--node-name", default="policy_node", help="ROS node name (default policy_node)")
    p.add_argument("--activate", action="store_true",
                   help="configure and activate at start (otherwise wait for the lifecycle services)")
    p.add_argument("--state-timeout", type=positive_float, default=0.1, metavar="S",
                   help="odometry (legged: joint states or IMU) older than this is stale and idles the motors "
                        "(legged: damping mode) (s, default 0.1)")
    p.add_argument("--rt-priority", type=int_in_range(0, 99), default=DEFAULT_RT_PRIORITY, metavar="0-99",
                   help="SCHED_FIFO priority of the control thread where the OS allows it (root, CAP_SYS_NICE or an "
                        f"rtprio limit; else nice -10, else the default); 0: no real-time request (default "
                        f"{DEFAULT_RT_PRIORITY})")
    p.add_argument("--duration", type=positive_float, default=None, metavar="S",
                   help="run this long, then idle the motors and exit (s of wall time, also with --sim-time; default: "
                        "until Ctrl-C)")
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
                        "fall: damping mode until the node is activated again; --finetune: a tilt beyond this ends "
                        "the episode (safety envelope) (rad, default 1.0)")
    p.add_argument("--sim-time", action="store_true",
                   help="lockstep with a simulator (sim2real standin --lockstep HZ at the policy's control "
                        "rate): tick once per control period of the simulated time the inputs' "
                        "header stamps carry, as soon as every input of that instant has arrived, and stamp the "
                        "commands with it; the result no longer depends on the machine's load (tests, sim-to-sim "
                        "checks)")
    add_viz_argument(p)
    p.add_argument("--record", action=argparse.BooleanOptionalAction, default=True,
                   help="record every topic under the namespace and /diagnostics to an MCAP file (ROS 2 CDR, "
                        "Foxglove and ros2 bag read it) in a new run folder <runs-root>/<time>_<robot>/ "
                        "(default: on; --no-record: off)")
    p.add_argument("--runs-root", default=None, metavar="DIR",
                   help="folder of the run folders (default $SIM2REAL_DEPLOY_RUNS, else ./deploy_runs)")
    add_finetune_deploy_arguments(p)
    g = p.add_argument_group("quadrotor swarm (a quadrotor-swarm policy; see sim2real.deploy.nodes.swarm)")
    g.add_argument("--drones", default=None, metavar="NAMES",
                   help="comma-separated names of the drones this process flies (or a count N: cf0..cf{N-1}); "
                        "topics <swarm-ns>/<name>/odom, goal, estop, cmd/ctbr|cmd/motors")
    g.add_argument("--peers", default=None, metavar="NAMES",
                   help="names of every drone of the swarm whose odometry is observed (neighbours; default: "
                        "--drones); must include --drones")
    g.add_argument("--swarm-ns", default="/swarm", metavar="NS",
                   help="namespace of the swarm's topics: <ns>/<name>/..., <ns>/obstacles, <ns>/world, <ns>/estop "
                        "(default /swarm)")
    g.add_argument("--one-node", action="store_true",
                   help="one node (<swarm-ns>/<node-name>) serving all --drones with batched inference, instead of "
                        "one node per drone (<swarm-ns>/<name>/<node-name>)")
    g.add_argument("--goals", default=None, metavar="X,Y,Z;...",
                   help="initial goals of --drones, in order (m, world frame; default: hold the first position); "
                        "write --goals=... when the first value is negative")
    g.add_argument("--no-obstacles", action="store_true",
                   help="the room has no columns: fly without waiting for <swarm-ns>/obstacles (default: send the "
                        "safe command until the obstacle map has arrived)")
    g.add_argument("--peer-timeout", type=positive_float, default=None, metavar="S",
                   help="a neighbour whose odometry is older than this is left out of the observation (s, default "
                        "--state-timeout)")
    g.add_argument("--expect-swarm", action="append", default=[], metavar="KEY=VALUE",
                   help="refuse a policy whose swarm metadata differs, e.g. --expect-swarm num_neighbors=6 "
                        "--expect-swarm sdf.size=3 (repeatable)")


def add_viz_argument(p: argparse.ArgumentParser) -> None:
    """``--viz [HOST:]PORT`` (checked by the command, so that a bad value is one ``error:`` line)."""
    p.add_argument("--viz", nargs="?", const=VIZ_DEFAULT_CONST, default=None, metavar="[HOST:]PORT",
                   help="live view: stream the robot's state, commands, goal/footsteps, safety state and control "
                        "timing to Foxglove through a WebSocket server on this address (the flag alone: "
                        f"127.0.0.1:{DEFAULT_VIZ_PORT}; 0.0.0.0:PORT: every interface; port 0: any free one); "
                        "see docs/deploy.md, Watching a deployed robot")


def port(text: str) -> int:
    """argparse type: a TCP port number in [1, 65535]."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 1 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port must be in [1, 65535], got {text!r}")
    return value


def add_finetune_deploy_arguments(p: argparse.ArgumentParser) -> None:
    """``sim2real deploy --finetune SESSION`` options (see :mod:`sim2real.deploy.finetune.node`)."""
    g = p.add_argument_group("fine-tuning (a quadrotor-hover session; see sim2real.deploy.finetune.node)")
    g.add_argument("--finetune", default=None, metavar="SESSION",
                   help="run the node in fine-tuning mode for this session folder: its base policy plus the current "
                        "residual version, episodes with resets, transitions and topics recorded to "
                        "<SESSION>/recordings, transitions streamed to the learner; topics <ns>/finetune/episode "
                        "(std_msgs/String start|stop), <ns>/finetune/teleop (std_msgs/Float32MultiArray, normalised "
                        "actions), <ns>/finetune/status, <ns>/finetune/goal")
    g.add_argument("--episodes", choices=["auto", "operator"], default="auto",
                   help="auto: episodes follow each other (stop on finetune/episode pauses, start resumes); "
                        "operator: each episode waits for a start (default auto)")
    g.add_argument("--episode-s", type=positive_float, default=None, metavar="S",
                   help="episode length (s; default: the task's env.episode_length_s)")
    g.add_argument("--reset-to", choices=["sample", "start"], default="sample",
                   help="reset point between episodes: a point drawn in the goal box, or the last episode's start "
                        "(default sample)")
    g.add_argument("--reset-hold-s", type=positive_float, default=1.0, metavar="S",
                   help="the reset point must be held this long before the next episode (s, default 1)")
    g.add_argument("--reset-tolerance", type=positive_float, default=0.5, metavar="M",
                   help="the reset is done when the drone has been this close to the reset point, and slower than "
                        "0.3 m/s, for --reset-hold-s (m, default 0.5: the base policy may hold with an offset under "
                        "a reality gap)")
    g.add_argument("--safe-stop-s", type=positive_float, default=2.0, metavar="S",
                   help="after a safety-envelope breach the base policy holds the position this long, then resets "
                        "(s, default 2)")
    g.add_argument("--goal-box", type=finite_float, nargs=6, default=None,
                   metavar=("XMIN", "YMIN", "ZMIN", "XMAX", "YMAX", "ZMAX"),
                   help="goals and reset points are drawn in this box (m, world frame; default: the task's "
                        "env.goal_min/goal_max)")
    g.add_argument("--goal-radius", type=positive_float, default=None, metavar="M",
                   help="each episode's goal is drawn within this distance of the drone's start, inside the goal box "
                        "(m; default: the task's init.pos_radius, the start spread the policy was trained on)")
    g.add_argument("--geofence", type=finite_float, nargs=6, default=None,
                   metavar=("XMIN", "YMIN", "ZMIN", "XMAX", "YMAX", "ZMAX"),
                   help="leaving this box ends the episode (m, world frame; default: the goal box grown by "
                        "--geofence-margin); must contain the goal box")
    g.add_argument("--geofence-margin", type=non_negative_float, default=1.0, metavar="M",
                   help="default geofence = goal box +- this (m, default 1)")
    g.add_argument("--min-height", type=finite_float, default=0.3, metavar="M",
                   help="flying below this height ends the episode (m, world z, default 0.3)")
    g.add_argument("--teleop-timeout", type=positive_float, default=0.2, metavar="S",
                   help="a teleop action overrides the policy while younger than this (s, default 0.2)")
    g.add_argument("--learner", choices=["auto", "off"], default="auto",
                   help="auto: stream to the learner running on this computer (<SESSION>/learner/endpoints.json of "
                        "a live learner process), else to the session config's link host/ports (or --learner-host/"
                        "--learner-ports); off: no learner (default auto)")
    g.add_argument("--learner-host", default=None, metavar="HOST", help="the learner's host (default: see --learner)")
    g.add_argument("--learner-ports", type=port, nargs=2, default=None, metavar=("TRANSITIONS", "POLICY"),
                   help="the learner's transitions and policy ports (default: see --learner)")
    g.add_argument("--seed", type=int, default=None,
                   help="seed of the goals and reset points (default: the session config's seed)")


def add_standin_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--robot", default="crazyflie2",
                   help="robot config name or YAML path (a quadrotor or a legged robot, e.g. go2)")
    p.add_argument("--namespace", default=None,
                   help="ROS namespace of the topics (default /crazyflie for a quadrotor, /<robot name> for a legged "
                        "robot)")
    p.add_argument("--node-name", default="standin", help="ROS node name (default standin)")
    p.add_argument("--rt-priority", type=int_in_range(0, 99), default=STANDIN_RT_PRIORITY, metavar="0-99",
                   help="SCHED_FIFO priority of the simulated robot's physics and publishing where the OS allows it "
                        "(else nice -10, else the default): a robot is not slowed by the CPU load of the machine "
                        f"that deploys to it; 0: no real-time request (default {STANDIN_RT_PRIORITY}, below deploy's "
                        f"{DEFAULT_RT_PRIORITY})")
    p.add_argument("--initial-position", type=finite_float, nargs=3, default=[0.0, 0.0, 1.0],
                   metavar=("X", "Y", "Z"),
                   help="quadrotor: where the drone is held until the first command (m, world frame; default 0 0 1)")
    p.add_argument("--mass-scale", type=positive_float, default=None,
                   help="quadrotor: true mass / nominal mass (default 1.05: the stand-in differs from the config; "
                        "or --gap's)")
    p.add_argument("--thrust-scale", type=positive_float, default=None,
                   help="quadrotor: true max motor thrust / nominal (default 0.97, or --gap's)")
    p.add_argument("--inertia-scale", type=positive_float, default=None,
                   help="quadrotor: true inertia / nominal (default 1.03, or --gap's)")
    p.add_argument("--latency-s", type=non_negative_float, default=None, metavar="S",
                   help="quadrotor: extra command latency: each command takes effect this long after it arrives "
                        "(s, default 0, or --gap's)")
    p.add_argument("--gap", default=None, metavar="NAME",
                   help="quadrotor: a named reality gap (sim2real.hardware.standins.reality_gap): quadrotor (mass "
                        "x1.2, max thrust x0.8, command latency 2-3 control steps: the stand-in takes the middle of "
                        "each range, 2.5 steps of 10 ms = 0.025 s), quadrotor_mass_thrust (the same without the "
                        "latency; the weak-motor gap of fine-tuning sessions is not a stand-in option); explicit "
                        "--mass-scale/--thrust-scale/--inertia-scale/--motor-time-constant/--latency-s win")
    p.add_argument("--motor-time-constant", type=positive_float, default=None, metavar="S",
                   help="quadrotor: true motor time constant (s; default: the robot config's, or --gap's)")
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
    p.add_argument("--lockstep", type=positive_float, default=None, metavar="HZ",
                   help="step in lockstep with the deploy node (sim2real deploy --sim-time) at this control rate "
                        "instead of in real time: every 1/HZ s of simulated time publish the state (every topic, "
                        "stamped with simulated time) and wait for that instant's commands (legged: joint targets "
                        "and gains stamped with it; quadrotor: one command per drone); HZ must be the policy's "
                        "control rate and divide the physics rate")
    p.add_argument("--gantry", choices=["auto", "on", "off"], default="auto",
                   help="legged robot: hold the base where it starts (a gantry) until the first joint command "
                        "arrives (auto: on for bipeds, which cannot stand in damping mode; off for others)")
    p.add_argument("--initial-pose", choices=["crouch", "default"], default="crouch",
                   help="legged robot: joint pose the robot starts in, on the floor (default crouch: folded legs, "
                        "resting on its feet or belly; default: the robot config's default pose)")
    p.add_argument("--damping-kd", type=positive_float, default=None, metavar="KD",
                   help="legged robot: joint damping held without fresh commands (N m s/rad, default 2)")
    p.add_argument("--duration", type=positive_float, default=None, metavar="S",
                   help="run this long, then exit (s of wall time, also with --lockstep; default: until Ctrl-C)")
    add_viz_argument(p)
    g = p.add_argument_group("quadrotor swarm (see sim2real.hardware.standins.swarm)")
    g.add_argument("--drones", default=None, metavar="N|NAMES",
                   help="simulate a swarm: N drones cf0..cf{N-1}, or comma-separated names, in a room of columns")
    g.add_argument("--swarm-ns", default="/swarm", metavar="NS",
                   help="namespace of the swarm's topics (default /swarm)")
    g.add_argument("--density", type=finite_float, default=0.2,
                   help="fraction of the obstacle grid's cells holding a column (default 0.2)")
    g.add_argument("--seed", type=int, default=0, help="seed of the column placement and sampled starts (default 0)")
    g.add_argument("--positions", default=None, metavar="X,Y,Z;...",
                   help="start positions of the drones, in order (m, world frame; default: drawn in the task's start "
                        "zone); write --positions=... when the first value is negative")
    g.add_argument("--policy", default=None, metavar="DIR",
                   help="take the room geometry and collision model from this exported swarm policy's metadata "
                        "(default: the quadrotor-swarm task config)")
    g.add_argument("--report", default=None, metavar="FILE",
                   help="write a JSON report at exit: per drone final position and contact counts")

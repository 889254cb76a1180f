"""``sim2real standin``: a simulated quadrotor node standing in for the real drone on the deploy topics.

It steps :class:`QuadrotorDynamics` (batch 1) in real time with its OWN parameters, deliberately off the robot
config (``mass_scale``, ``thrust_scale``, ``inertia_scale``, motor time constant, a constant external force),
so a policy is tested against a plant it was not built from.

Topics, relative to the namespace (default ``/crazyflie``):
  * ``odom`` (``nav_msgs/Odometry``, out, sensor rate): ``header.frame_id`` ``world``, ``child_frame_id``
    ``base_link``; pose in the world frame, twist in the body frame;
  * ``imu`` (``sensor_msgs/Imu``, out, sensor rate, frame ``base_link``): orientation, gyro [rad/s],
    specific force [m/s^2] (reads +g up at rest);
  * ``cmd/motors`` / ``cmd/ctbr`` (``std_msgs/Float32MultiArray``, in): applied through the same action term
    as in training, ``QuadrotorAction(robot, interface).apply(command, dyn)``, at every physics step; the last
    command is held. Commands of the wrong length or with NaN/Inf are ignored.

Behaviour:
  * command latency (``latency_s``, default 0): each valid command is queued (FIFO, with its arrival time on the
    monotonic clock) and takes effect ``latency_s`` after it arrived, at the first physics step at or after that
    time (so at the 10 ms physics step the effective delay is ``latency_s`` rounded up to the step); with 0 a
    command takes effect on arrival, as before;
  * hand launch: the drone is held still at ``initial_position`` (level) until the first command other than the
    safe one (motors idle, which a node sends while it waits for its inputs) takes effect, then let go with its
    motors already at that command's thrust (spun up in the hand);
  * firmware watchdog: no command (taking effect) for more than ``command_timeout_s`` -> motors idle (the safe
    command);
  * ground plane at z = 0: inelastic contact with full friction (no penetration, no sliding, no spin);
  * timing: a steady wall-clock timer at the physics step ``dt`` (0.01 s); late callbacks catch up
    (:class:`RealTimeStepper`), so simulated time tracks the wall clock instead of drifting;
  * lockstep (``lockstep_hz``, ``sim2real standin --lockstep HZ``, with ``sim2real deploy --sim-time``): no wall
    clock. Every ``1 / HZ`` s of simulated time (a whole number of physics steps) the stand-in publishes odometry and
    IMU once, stamped with the simulated time, then waits for a valid command that arrived after that publication
    (a lockstep deploy node answers each instant with one command: the policy's or its safe one) and steps the
    physics to the next instant; while it waits it re-sends that state every
    :data:`~sim2real.hardware.realtime.LOCKSTEP_RESEND_S` s of wall time, and says so every
    :data:`~sim2real.hardware.realtime.LOCKSTEP_STALL_S` s. Latency and the watchdog count simulated
    time; the same commands give the same flight whatever the machine's load.
"""

from __future__ import annotations

import collections
import math
import time

import numpy as np
import torch
from nav_msgs.msg import Odometry
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from rclpy.qos import QoSProfile
from sensor_msgs.msg import Imu
from std_msgs.msg import Float32MultiArray

from sim2real.deploy.ros_conversions import command_from_message, fill_imu, fill_odometry, time_from_seconds
from sim2real.hardware.realtime import LOCKSTEP_RESEND_S, RealTimeStepper, StandInClock, lockstep_steps
from sim2real.sim.quadrotor import QuadrotorDynamics, QuadrotorParams
from sim2real.sim.rotations import quat_rotate_inverse
from sim2real.tasks.actions import QuadrotorAction

COMMAND_TOPICS = {"motor_thrust": "cmd/motors", "ctbr": "cmd/ctbr"}
WORLD_FRAME, BODY_FRAME = "world", "base_link"
#: Control period [s] a reality gap's ``latency_steps`` are counted in (quadrotor-hover's: 100 Hz).
GAP_CONTROL_PERIOD_S = 0.01
#: Stand-in defaults (``sim2real standin`` and :class:`SimQuadrotorNode`): deliberately off the robot config.
STANDIN_DEFAULTS = {"mass_scale": 1.05, "thrust_scale": 0.97, "inertia_scale": 1.03, "latency_s": 0.0,
                    "motor_time_constant": None}
# Reality-gap keys the stand-in can reproduce -> its option.
_GAP_KEYS = {"domain_rand.mass_scale": "mass_scale", "domain_rand.thrust_scale": "thrust_scale",
             "domain_rand.inertia_scale": "inertia_scale", "domain_rand.motor_time_constant": "motor_time_constant",
             "domain_rand.latency_steps": "latency_s"}


def gap_standin_settings(name: str) -> dict:
    """Stand-in options of a named reality gap (:data:`sim2real.hardware.standins.reality_gap.REALITY_GAPS`): each of the
    preset's ranges gives its middle, e.g. ``quadrotor``: mass_scale 1.2, thrust_scale 0.8, and latency_steps
    [2, 3] -> 2.5 steps x :data:`GAP_CONTROL_PERIOD_S` (10 ms) = ``latency_s`` 0.025.

    Raises:
        ValueError: an unknown name, or a preset with a key the quadrotor stand-in cannot reproduce (e.g. a legged
            robot's friction).
    """
    from sim2real.hardware.standins.reality_gap import REALITY_GAPS

    if name not in REALITY_GAPS:
        usable = [g for g, keys in REALITY_GAPS.items() if all(k in _GAP_KEYS for k in keys)]
        raise ValueError(f"unknown reality gap {name!r} (the quadrotor stand-in's: {', '.join(usable)})")
    out = {}
    for key, value in REALITY_GAPS[name].items():
        if key not in _GAP_KEYS:
            raise ValueError(f"reality gap {name!r} sets {key}, which the quadrotor stand-in cannot reproduce")
        middle = (float(value[0]) + float(value[-1])) / 2.0
        option = _GAP_KEYS[key]
        out[option] = middle * GAP_CONTROL_PERIOD_S if option == "latency_s" else middle
    return out


def resolve_standin_options(args) -> dict:
    """The quadrotor stand-in's ``mass_scale``, ``thrust_scale``, ``inertia_scale``, ``motor_time_constant`` and
    ``latency_s`` from ``sim2real standin`` arguments: an explicit flag wins, then ``--gap NAME``
    (:func:`gap_standin_settings`), then :data:`STANDIN_DEFAULTS`. Also writes them back into ``args``.

    Raises:
        ValueError: see :func:`gap_standin_settings`.
    """
    gap = gap_standin_settings(args.gap) if getattr(args, "gap", None) else {}
    out = {}
    for key, default in STANDIN_DEFAULTS.items():
        explicit = getattr(args, key, None)
        out[key] = explicit if explicit is not None else gap.get(key, default)
        setattr(args, key, out[key])
    return out


def standin_params(robot: dict, num: int, mass_scale: float = 1.0, thrust_scale: float = 1.0,
                   inertia_scale: float = 1.0, motor_time_constant: float | None = None) -> QuadrotorParams:
    """The stand-in's true parameters of ``num`` drones: the robot config's nominal ones scaled (true / nominal
    mass, max motor thrust and inertia) and, if given, another motor time constant [s]."""
    p = QuadrotorParams.from_robot(robot, num)
    p.mass = p.mass * mass_scale
    p.max_motor_thrust = p.max_motor_thrust * thrust_scale
    p.inertia = p.inertia * inertia_scale
    if motor_time_constant is not None:
        p.motor_time_constant = torch.full_like(p.motor_time_constant, float(motor_time_constant))
    return p


def odometry_message(stamp, dyn: QuadrotorDynamics, i: int) -> Odometry:
    """``nav_msgs/Odometry`` of drone ``i`` of ``dyn``: frame ``world`` / child ``base_link``, pose in the world
    frame, twist in the body frame, stamped ``stamp``."""
    odom = Odometry()
    odom.header.stamp, odom.header.frame_id, odom.child_frame_id = stamp, WORLD_FRAME, BODY_FRAME
    return fill_odometry(odom, dyn.pos_w[i], dyn.quat_w[i], dyn.lin_vel_w[i], dyn.ang_vel_b[i])


def check_standin_args(robot: dict, sensor_rate_hz: float, dt: float, what: str) -> None:
    """Raise ValueError unless ``robot`` is a quadrotor and the sensor rate [Hz] is at most the physics rate."""
    if robot.get("kind") != "quadrotor":
        raise ValueError(f"{what} simulates quadrotors; robot '{robot.get('name')}' is {robot.get('kind')!r}")
    if sensor_rate_hz * dt > 1.0 + 1e-9:
        raise ValueError(f"sensor rate {sensor_rate_hz} Hz is above the physics rate {1.0 / dt:.4g} Hz")


class SimQuadrotorNode(StandInClock, Node):
    """A real-time simulated quadrotor on the deploy topics (see the module docstring).

    Args:
        robot: robot config (``kind: quadrotor``); the nominal parameters the true ones are scaled from.
        namespace, node_name: ROS names.
        initial_position: where the drone is held until the first command [m], world frame.
        mass_scale, thrust_scale, inertia_scale: true / nominal mass, max motor thrust, inertia.
        motor_time_constant: true motor time constant [s] (None: the config's).
        ext_force: constant external force [N], world frame.
        sensor_rate_hz: odometry/IMU rate [Hz]; rounded to publish every ``round(1 / (dt rate))`` physics steps.
        command_timeout_s: commands older than this idle the motors [s] (age counted from when they take
            effect).
        dt: physics timestep [s].
        latency_s: extra command latency [s]: a command takes effect this long after it arrives (FIFO).
        context: rclpy context.
        lockstep_hz: step in lockstep with the deploy node at this control rate [Hz] (see the module docstring;
            None: real time); odometry and IMU then go out once per lockstep period.

    Raises:
        ValueError: robot not a quadrotor, ``sensor_rate_hz`` above the physics rate, a negative latency, or a
            lockstep rate that does not divide the physics rate.
    """

    def __init__(self, robot: dict, *, namespace: str = "/crazyflie", node_name: str = "standin",
                 initial_position=(0.0, 0.0, 1.0), mass_scale: float = 1.05, thrust_scale: float = 0.97,
                 inertia_scale: float = 1.03, motor_time_constant: float | None = None, ext_force=(0.0, 0.0, 0.0),
                 sensor_rate_hz: float = 100.0, command_timeout_s: float = 0.2, dt: float = 0.01,
                 latency_s: float = 0.0, context=None, lockstep_hz: float | None = None):
        check_standin_args(robot, sensor_rate_hz, dt, "the stand-in")
        #: physics steps per lockstep period (None: real time)
        self.lockstep_steps = None if lockstep_hz is None else lockstep_steps(lockstep_hz, dt)
        self.lockstep_k = 0  # lockstep: the current instant is lockstep_k periods of simulated time
        self._answered = False  # lockstep: a command arrived since the current instant went out
        self._lockstep_steps_done = 0  # lockstep: physics steps completed
        if not (math.isfinite(latency_s) and latency_s >= 0.0):
            raise ValueError(f"latency_s must be a finite number >= 0, got {latency_s}")
        super().__init__(node_name, namespace=namespace, context=context)
        self.latency_s = float(latency_s)
        # (time it takes effect [s, monotonic], command [1, 4], interface), oldest first.
        self._queue: collections.deque = collections.deque(maxlen=100_000)
        self.robot = robot
        p = standin_params(robot, 1, mass_scale, thrust_scale, inertia_scale, motor_time_constant)
        self.dyn = QuadrotorDynamics(p, dt)
        self.dt = float(dt)
        self.initial_position = torch.tensor(initial_position, dtype=torch.float32).reshape(1, 3)
        self.dyn.pos_w[:] = self.initial_position
        self.dyn.ext_force_w[:] = torch.tensor(ext_force, dtype=torch.float32).reshape(1, 3)
        self.action_terms = {i: QuadrotorAction(robot, i) for i in COMMAND_TOPICS}
        self.command_timeout_s = float(command_timeout_s)
        self.sensor_every = max(1, int(round(1.0 / (sensor_rate_hz * dt))))
        self.released = False  # held at the initial pose until the first command
        self.released_at_step: int | None = None
        self.command: torch.Tensor | None = None  # [1, 4], held
        self.interface: str | None = None
        self.command_time = -float("inf")
        self.watchdog_tripped = False
        self.commands_received = 0
        self.specific_force_b = torch.tensor([[0.0, 0.0, p.gravity]])
        self._gravity_w = torch.tensor([[0.0, 0.0, -p.gravity]])

        qos = QoSProfile(depth=10)
        self.odom_pub = self.create_publisher(Odometry, "odom", qos)
        self.imu_pub = self.create_publisher(Imu, "imu", qos)
        for interface, topic in COMMAND_TOPICS.items():
            self.create_subscription(Float32MultiArray, topic,
                                     lambda msg, i=interface: self._on_command(msg, i), qos)
        self.stepper = RealTimeStepper(self.dt, time.monotonic())
        self._steady = Clock(clock_type=ClockType.STEADY_TIME)
        if self.lockstep_steps is None:
            self.timer = self.create_timer(self.dt, self._on_timer, clock=self._steady)
        else:
            self.lockstep_wait_begins()
            self.timer = self.create_timer(LOCKSTEP_RESEND_S, self._on_lockstep_resend, clock=self._steady)
            self.publish_sensors()
        timing = "real time" if self.lockstep_steps is None else \
            f"lockstep every {self.lockstep_steps} steps ({1.0 / (self.lockstep_steps * self.dt):g} Hz)"
        self.get_logger().info(
            f"stand-in {robot['name']}: mass x{mass_scale}, thrust x{thrust_scale}, inertia x{inertia_scale}, "
            f"latency {self.latency_s * 1000:g} ms; "
            f"held at {[round(float(x), 3) for x in initial_position]} until the first command; {timing}")

    # --- commands -------------------------------------------------------------------------------------------
    def _on_command(self, msg: Float32MultiArray, interface: str) -> None:
        values = command_from_message(msg)
        if values is None:
            self.get_logger().warning(f"{COMMAND_TOPICS[interface]}: command ignored (need 4 finite values)",
                                      throttle_duration_sec=1.0)
            return
        if self.lockstep_steps is None:
            self.receive_command(values, interface, time.monotonic())
            return
        self.receive_command(values, interface, self.sim_time)
        self._answered = True
        self.lockstep_advance()

    def receive_command(self, values, interface: str, now: float) -> None:
        """A valid command (4 finite values of ``interface``) arrived at ``now`` [s, monotonic; lockstep:
        simulated]: it takes effect now, or with ``latency_s`` > 0 at the first physics step at or after
        ``now + latency_s``."""
        self.commands_received += 1
        command = torch.as_tensor(values, dtype=torch.float32).reshape(1, 4)
        if self.latency_s > 0.0:
            self._queue.append((now + self.latency_s, command, interface))
        else:
            self._take_command(command, interface, now)

    def _apply_due(self, now: float) -> None:
        """Take every queued command whose time has come by ``now`` (in arrival order)."""
        while self._queue and self._queue[0][0] <= now:
            t, command, interface = self._queue.popleft()
            self._take_command(command, interface, t)

    def _take_command(self, command: torch.Tensor, interface: str, t: float) -> None:
        """``command`` ``[1, 4]`` of ``interface`` acts from ``t`` [s] on (held; the first one releases)."""
        self.command = command
        self.interface = interface
        self.command_time = t
        if not self.released and torch.equal(command, self.action_terms[interface].safe_command(1)):
            return  # motors idle (a node's safe command while it waits for its inputs): still held in the hand
        if not self.released:  # hand launch: the motors spun up to this command in the hand, then let go
            self.dyn.motor_thrust = self.action_terms[interface].apply(self.command, self.dyn).clamp_min(0.0)
            self.released = True
            self.released_at_step = self.steps_taken
            self.get_logger().info(f"first command on {COMMAND_TOPICS[interface]}: released")

    def applied_command(self, now: float) -> torch.Tensor:
        """The command ``[1, 4]`` acting at time ``now`` [s] (wall; lockstep: simulated): the held one, or the safe
        one once stale."""
        term = self.action_terms[self.interface]
        if now - self.command_time > self.command_timeout_s:
            if not self.watchdog_tripped:
                self.get_logger().warning(f"no command for {self.command_timeout_s} s: motors idle")
            self.watchdog_tripped = True
            return term.safe_command(1)
        self.watchdog_tripped = False
        return self.command

    # --- physics --------------------------------------------------------------------------------------------
    def physics_step(self, now: float) -> None:
        """One ``dt`` step at time ``now`` [s] (wall; lockstep: simulated; nothing moves while held before the
        first command); first takes the queued commands due by ``now``."""
        self._apply_due(now)
        if not self.released:
            return
        dyn = self.dyn
        term = self.action_terms[self.interface]
        v_prev = dyn.lin_vel_w.clone()
        dyn.step(term.apply(self.applied_command(now), dyn))
        if float(dyn.pos_w[0, 2]) < 0.0:  # ground: no penetration, no sliding, no spin
            dyn.pos_w[:, 2] = 0.0
            dyn.lin_vel_w[:, :2] = 0.0
            dyn.lin_vel_w[:, 2] = dyn.lin_vel_w[:, 2].clamp_min(0.0)
            dyn.ang_vel_b[:] = 0.0
        acc_w = (dyn.lin_vel_w - v_prev) / self.dt
        self.specific_force_b = quat_rotate_inverse(dyn.quat_w, acc_w - self._gravity_w)

    def _on_timer(self) -> None:
        now = time.monotonic()
        n = self.stepper.due(now)
        for _ in range(n):
            self.physics_step(now)
        if self.stepper.passed_multiple_of(self.sensor_every, n):
            self.publish_sensors()

    # --- lockstep -------------------------------------------------------------------------------------------
    @property
    def steps_taken(self) -> int:
        """Physics steps taken since the start (real time: counted per timer callback, its catch-up included;
        lockstep: completed steps)."""
        return self.stepper.steps_taken if self.lockstep_steps is None else self._lockstep_steps_done

    def lockstep_advance(self) -> int:
        """Lockstep: once a command answered the current instant, step the physics one lockstep period (each step
        at its own simulated time, for the latency queue) and publish the next instant's state. Returns the periods
        stepped (0 in real time or before the answer)."""
        if self.lockstep_steps is None or not self._answered:
            return 0
        t0 = self.sim_time
        for j in range(self.lockstep_steps):
            self.physics_step(t0 + j * self.dt)
            self._lockstep_steps_done += 1
        self.lockstep_k += 1
        self._answered = False
        self.lockstep_wait_begins()
        self.publish_sensors()
        return 1

    def _on_lockstep_resend(self) -> None:
        """Lockstep, while waiting for the current instant's command: re-send the state; every
        :data:`~sim2real.hardware.realtime.LOCKSTEP_STALL_S` s of wall time without that command, say so."""
        self.publish_sensors()
        waited = self.lockstep_stalled()
        if waited is not None:
            hz = 1.0 / (self.lockstep_steps * self.dt)
            self.get_logger().warning(
                f"lockstep: waiting {waited:.0f} s at {self.sim_time:.6g} s of simulated time for a command (a deploy "
                f"node with --sim-time at the lockstep rate, {hz:.6g} Hz; simulated time stands still until then)")

    def publish_sensors(self) -> None:
        """Publish odometry and IMU of the current state, stamped with the node clock (lockstep: the simulated
        instant)."""
        d = self.dyn
        stamp = self.get_clock().now().to_msg() if self.lockstep_steps is None else time_from_seconds(self.sim_time)
        odom = odometry_message(stamp, d, 0)
        imu = Imu()
        imu.header.stamp, imu.header.frame_id = stamp, BODY_FRAME
        fill_imu(imu, d.quat_w[0], d.ang_vel_b[0], self.specific_force_b[0])
        self.odom_pub.publish(odom)
        self.imu_pub.publish(imu)

    def position(self) -> np.ndarray:
        """True position ``[3]`` m, world frame."""
        return self.dyn.pos_w[0].numpy().copy()


def standin_main(args) -> int:
    """``sim2real standin``: run :class:`SimQuadrotorNode` until ``--duration`` or Ctrl-C / SIGTERM.

    Discovery is forced to loopback (``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST``): a simulated robot never talks
    beyond this machine. ``ROS_DOMAIN_ID`` is taken from the environment.

    Raises:
        ConfigError: unknown robot, not a quadrotor, a sensor rate above the physics rate, or a start below the
            floor.
    """
    from sim2real.configs import ConfigError, load_robot
    from sim2real.deploy.ros_env import force_localhost_discovery

    force_localhost_discovery()
    robot = load_robot(args.robot)
    try:
        resolve_standin_options(args)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if args.initial_position[2] < 0.0:
        raise ConfigError(f"--initial-position z = {args.initial_position[2]:g} m is below the floor (z = 0)")
    torch.set_num_threads(1)

    from sim2real.deploy.ros_runtime import ros_context, spin_node, stop_on_signals, stopping_note

    with stop_on_signals(), ros_context() as ctx:
        try:
            node = SimQuadrotorNode(
                robot, namespace=args.namespace, node_name=args.node_name, initial_position=args.initial_position,
                mass_scale=args.mass_scale, thrust_scale=args.thrust_scale, inertia_scale=args.inertia_scale,
                motor_time_constant=args.motor_time_constant, ext_force=args.ext_force,
                sensor_rate_hz=args.sensor_rate_hz, command_timeout_s=args.command_timeout,
                latency_s=args.latency_s, context=ctx, lockstep_hz=getattr(args, "lockstep", None))
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        spin_node(node, ctx, args.duration, rt_priority=args.rt_priority,
                  on_exit=stopping_note("quadrotor stand-in", ctx))
    return 0

"""``sim2real bridge unitree``: a real Unitree robot on the legged deploy topics, over Unitree SDK2 for Python.

The bridge plays the part the stand-in (:mod:`sim2real.hardware.standins.legged`) plays in simulation: the legged
policy node (``sim2real deploy --robot go2``, :mod:`sim2real.deploy.nodes.legged`) cannot tell them apart. The SDK
(``unitree_sdk2py`` from ``unitree-sdk2py-dimos==1.0.3``, on CycloneDDS 0.10.2: ``.ci/install-unitree-sdk``) is
imported lazily (:func:`load_unitree_sdk`), so the rest of the project imports without it. The DDS side is
injectable (``transport=``, see :class:`DdsTransport`), which is how the tests drive the bridge without a robot.


The robot side (the ``unitree:`` block, LowState_ and LowCmd_, what is sent, the DDS transport) is in
:mod:`sim2real.hardware.unitree.protocol`.

ROS side, relative to the namespace (default ``/<robot name>``):
  * ``joint_states`` (``sensor_msgs/JointState``, out, one per valid LowState): the mapped joints in MOTOR-slot
    order (as the stand-in, in the model's motor order), names from the config; position = ``q`` [rad], velocity =
    ``dq`` [rad/s], effort = ``tau_est`` [N m]; stamped with the bridge's ROS clock at arrival;
  * ``imu`` (``sensor_msgs/Imu``, out, same rate, ``frame_id`` ``imu`` as the stand-in's): ``imu_state.quaternion``
    (Unitree's w, x, y, z: the IMU's orientation in the world frame) converted explicitly to ROS x, y, z, w by
    :func:`~sim2real.deploy.ros_conversions.fill_imu`; ``gyroscope`` [rad/s] and ``accelerometer`` [m/s^2,
    specific force] in the IMU (body) frame. The node rotates it to the base frame (``imu_to_base_quat``);
  * A LowState with NaN/Inf in a mapped motor's q/dq/tau_est or in the IMU, or a quaternion whose norm is off by
    more than :data:`~sim2real.deploy.ros_conversions.QUAT_NORM_TOLERANCE`, is dropped (logged, throttled) and
    does not count as fresh state. No ``contacts`` topic: the legged node does not read it, and the Go2's
    ``foot_force`` is a raw, uncalibrated sensor value, not Newtons;
  * ``cmd/joint_targets`` and ``cmd/joint_gains`` (``sensor_msgs/JointState``, in; targets: position [rad],
    optional velocity [rad/s] (empty: 0); gains: position = kp, velocity = kd), matched BY NAME to the config's
    joints (:class:`~sim2real.deploy.ros_conversions.JointOrder`); a message missing a joint, with NaN/Inf or a
    negative gain is dropped;
  * ``arm`` (``std_msgs/Bool``, in): ``true`` arms, ``false`` disarms; ``estop`` (``std_msgs/Bool``, in): ``true``
    latches damping until the bridge restarts (arming is refused from then on).

Commands (:meth:`UnitreeBridgeNode.tick`, a steady timer at ``command_rate_hz``; 500 Hz for the Go2): SERVO —
the latest targets and gains through :func:`safe_command` — only when armed, not e-stopped, the latest valid
LowState is at most ``state_timeout_s`` old and the targets and gains at most ``command_timeout_s`` old (0.1 s
each); otherwise DAMPING (:func:`damping_command`): q = the latest measured positions, dq = 0, kp = 0, kd =
``damping_kd``, tau = 0 — the deploy node's damping convention (the legs sink slowly; never torque off). Before
arming only damping commands are written. :attr:`UnitreeBridgeNode.fault` names why (``disarmed``, ``estop``,
``no_lowstate``, ``stale_lowstate``, ``no_targets``, ``stale_targets``, ``no_gains``, ``stale_gains``). When no
LowState at all has arrived for :data:`LOWSTATE_SILENCE_S` (1 s; armed or not), the bridge warns, naming the
network interface and DDS domain (cable, ``--interface``, ``--domain-id``, the robot's sport mode), every
:data:`LOWSTATE_WARN_EVERY_S` (5 s) while it lasts.


Stopping (:meth:`UnitreeBridgeNode.close`: Ctrl-C, SIGTERM, ``--duration``): damping commands for
``exit_damping_s`` (0.5 s) at the command rate, then no more writes (the motors keep the last, damping, command).
"""

from __future__ import annotations

import collections
import math
import time

import numpy as np
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from rclpy.qos import QoSProfile
from sensor_msgs.msg import Imu, JointState

from sim2real.deploy.ros_conversions import (
    InvalidMessage, JointOrder, fill_imu, fill_joint_state, joint_gains_from_message,
)
from sim2real.hardware.arming import ArmingLatch
from sim2real.hardware.unitree.protocol import (
    LOWCMD_TOPIC, LOWSTATE_TOPIC, DdsTransport, LowStateSample, MotorCommand, UnitreeBridgeError, UnitreeConfig,
    damping_command, fill_lowcmd, load_unitree_sdk, lowstate_to_sample, open_dds, safe_command, unitree_config,
)

TARGETS_TOPIC, GAINS_TOPIC = "cmd/joint_targets", "cmd/joint_gains"
IMU_FRAME = "imu"  # as the stand-in (sim2real.hardware.standins.legged)
EXIT_DAMPING_S = 0.5
#: No LowState (valid or not) for this long [s] since the start or the last one: a warning naming the interface and
#: the DDS domain, armed or not; repeated at most every LOWSTATE_WARN_EVERY_S while the silence lasts.
LOWSTATE_SILENCE_S = 1.0
LOWSTATE_WARN_EVERY_S = 5.0


def state_messages(sample: LowStateSample, cfg: UnitreeConfig) -> tuple[JointState, Imu]:
    """``(joint_states, imu)`` of a sample (headers: the caller stamps them; ``imu`` frame :data:`IMU_FRAME`):
    joints in motor-slot order, IMU quaternion w, x, y, z -> ROS x, y, z, w through :func:`fill_imu`."""
    order = cfg.motor_order
    js = fill_joint_state(JointState(), [cfg.joint_names[j] for j in order], sample.q[order], sample.dq[order],
                          sample.tau[order])
    imu = fill_imu(Imu(), sample.quat_w, sample.gyro, sample.acc)
    imu.header.frame_id = IMU_FRAME
    return js, imu


# --- the node ---------------------------------------------------------------------------------------------------------
class UnitreeBridgeNode(ArmingLatch, Node):
    """A Unitree robot on the legged deploy topics (see the module docstring).

    Args:
        robot: the robot config (``kind: legged``).
        cfg: its resolved ``unitree:`` block (:func:`unitree_config`).
        transport: :class:`DdsTransport` or an object with ``start(on_lowstate)``, ``write(msg)``, ``close()``.
        sdk: :func:`load_unitree_sdk`'s namespace (message types and CRC); None: loaded here.
        namespace: ROS namespace (default ``/<robot name>``); node_name: ROS node name.
        command_timeout_s: targets or gains older than this [s] -> damping.
        state_timeout_s: a LowState older than this [s] -> damping.
        damping_kd: kd [N m s/rad] of the damping mode (None: the config's ``damping_kd``).
        exit_damping_s: how long :meth:`close` writes damping commands [s].
        start_timer: write commands on a steady timer at ``cfg.command_rate_hz`` (tests call :meth:`tick`).
        context: rclpy context.
        interface, domain_id: the network interface and DDS domain the transport listens on (named by the
            no-LowState warning; None: not known).

    Raises:
        UnitreeBridgeError: non-positive timeouts or damping gain; the SDK missing.
    """

    ARMED_TEXT = (f"armed: {TARGETS_TOPIC} + {GAINS_TOPIC} now reach the motors (damping whenever they or the "
                  f"robot's state go stale)")
    DISARMED_TEXT = "damping"
    ESTOP_TEXT = "e-stop: damping, latched until the bridge restarts"

    def __init__(self, robot: dict, cfg: UnitreeConfig, transport, *, sdk=None, namespace: str | None = None,
                 node_name: str = "unitree_bridge", command_timeout_s: float = 0.1, state_timeout_s: float = 0.1,
                 damping_kd: float | None = None, exit_damping_s: float = EXIT_DAMPING_S,
                 start_timer: bool = True, context=None, interface: str | None = None, domain_id: int | None = None):
        for label, value in (("command timeout", command_timeout_s), ("state timeout", state_timeout_s)):
            if not (math.isfinite(value) and value > 0):
                raise UnitreeBridgeError(f"{label} must be a positive number of seconds, got {value}")
        damping_kd = cfg.damping_kd if damping_kd is None else float(damping_kd)
        if not (math.isfinite(damping_kd) and damping_kd > 0):
            raise UnitreeBridgeError(f"damping kd must be positive, got {damping_kd}")
        self.sdk = load_unitree_sdk() if sdk is None else sdk
        super().__init__(node_name, namespace=namespace or f"/{robot.get('name', 'robot')}", context=context)
        self.robot, self.cfg, self.transport = robot, cfg, transport
        self.types = self.sdk.types[cfg.family]
        self.command_timeout_s, self.state_timeout_s = float(command_timeout_s), float(state_timeout_s)
        self.damping_kd = damping_kd
        self.exit_damping_s = float(exit_damping_s)
        self.order = JointOrder(cfg.joint_names)
        self.interface, self.domain_id = interface, domain_id

        self._init_latch()
        self.state: LowStateSample | None = None
        self.state_time = -math.inf  # monotonic [s] of the latest valid LowState
        self.targets: tuple[np.ndarray, np.ndarray] | None = None  # (q*, dq*) policy order
        self.gains: tuple[np.ndarray, np.ndarray] | None = None  # (kp, kd)
        self.targets_time = self.gains_time = -math.inf
        self.fault: str | None = "disarmed"
        self.last_sent: MotorCommand | None = None
        self.last_lowcmd = None
        self.writes = 0
        self.states_received = self.states_dropped = 0
        self.tick_faults: collections.Counter = collections.Counter()  # ticks per outcome ("servo" or a fault)
        self._closed = False
        self.lowstate_arrival = time.monotonic()  # monotonic [s] of the latest LowState (valid or not), or the start
        self._silence_warned = -math.inf  # monotonic [s] of the latest no-LowState warning

        qos = QoSProfile(depth=10)
        self.joint_pub = self.create_publisher(JointState, "joint_states", qos)
        self.imu_pub = self.create_publisher(Imu, "imu", qos)
        self.create_subscription(JointState, TARGETS_TOPIC, lambda m: self.on_targets(m, time.monotonic()), qos)
        self.create_subscription(JointState, GAINS_TOPIC, lambda m: self.on_gains(m, time.monotonic()), qos)
        self._subscribe_latch(qos)
        self._steady = Clock(clock_type=ClockType.STEADY_TIME)
        self.timer = (self.create_timer(1.0 / cfg.command_rate_hz, lambda: self.tick(time.monotonic()),
                                        clock=self._steady) if start_timer else None)
        self.transport.start(lambda msg: self.on_lowstate(msg, time.monotonic()))
        self._log("info", f"{robot.get('name')} ({cfg.family}, {len(cfg.joint_names)} motors) on "
                          f"{LOWSTATE_TOPIC} / {LOWCMD_TOPIC} at {cfg.command_rate_hz:g} Hz; DISARMED (damping) "
                          f"until true on {self.resolve_topic_name('arm')} or --arm")

    # --- state ------------------------------------------------------------------------------------------------------
    def on_lowstate(self, msg, now: float) -> tuple[JointState, Imu] | None:
        """A LowState arrived at ``now`` [s, monotonic]: when valid, keep it and publish (and return) the
        ``(joint_states, imu)`` pair; otherwise drop it (logged, throttled) and return None. Ignored once
        closed."""
        if self._closed:
            return None
        with self._lock:
            self.lowstate_arrival = max(self.lowstate_arrival, now)
        try:
            sample = lowstate_to_sample(msg, self.cfg)
        except ValueError as exc:
            with self._lock:
                self.states_dropped += 1
            self._log("warning", f"{LOWSTATE_TOPIC} dropped: {exc}", throttle_s=1.0, key="lowstate")
            return None
        with self._lock:
            self.state, self.state_time = sample, now
            self.states_received += 1
        js, imu = state_messages(sample, self.cfg)
        js.header.stamp = imu.header.stamp = self.get_clock().now().to_msg()
        self.joint_pub.publish(js)
        self.imu_pub.publish(imu)
        return js, imu

    # --- commands from the policy node ---------------------------------------------------------------------------------
    def on_targets(self, msg: JointState, now: float) -> bool:
        """``cmd/joint_targets`` at ``now``: keep (q*, dq*) by name (dq* = 0 when ``velocity`` is empty);
        False when dropped."""
        try:
            q_t = self.order.field(msg, "position")
            dq_t = self.order.field(msg, "velocity", required=False)
        except InvalidMessage as exc:
            self._log("warning", f"{TARGETS_TOPIC} dropped: {exc}", throttle_s=1.0, key="targets")
            return False
        with self._lock:
            self.targets = (q_t, np.zeros_like(q_t) if dq_t is None else dq_t)
            self.targets_time = now
        return True

    def on_gains(self, msg: JointState, now: float) -> bool:
        """``cmd/joint_gains`` at ``now``: keep (kp, kd) by name; False when dropped."""
        try:
            gains = joint_gains_from_message(msg, self.order)
        except InvalidMessage as exc:
            self._log("warning", f"{GAINS_TOPIC} dropped: {exc}", throttle_s=1.0, key="gains")
            return False
        with self._lock:
            self.gains, self.gains_time = gains, now
        return True

    # --- the command loop ----------------------------------------------------------------------------------------------
    def command(self, now: float) -> tuple[str | None, MotorCommand]:
        """``(fault, command)`` at ``now`` [s, monotonic]: fault None and the :func:`safe_command` of the latest
        targets and gains when everything is fresh and the bridge armed; else the fault's name and
        :func:`damping_command` at the latest measured positions."""
        with self._lock:
            state, targets, gains = self.state, self.targets, self.gains
            if self.estop_latched:
                fault = "estop"
            elif not self.armed:
                fault = "disarmed"
            elif state is None:
                fault = "no_lowstate"
            elif now - self.state_time > self.state_timeout_s:
                fault = "stale_lowstate"
            elif targets is None:
                fault = "no_targets"
            elif now - self.targets_time > self.command_timeout_s:
                fault = "stale_targets"
            elif gains is None:
                fault = "no_gains"
            elif now - self.gains_time > self.command_timeout_s:
                fault = "stale_gains"
            else:
                fault = None
        if fault is None:
            return None, safe_command(targets[0], targets[1], gains[0], gains[1], state.q, state.dq, self.cfg)
        return fault, damping_command(None if state is None else state.q, self.cfg, self.damping_kd)

    def tick(self, now: float):
        """One command period: build the LowCmd of :meth:`command`, write it; returns it (None once closed). Warns
        when no LowState has arrived for :data:`LOWSTATE_SILENCE_S` (see :meth:`check_lowstate_silence`)."""
        if self._closed:
            return None
        fault, cmd = self.command(now)
        self.check_lowstate_silence(now)
        return self._write(fault, cmd, now)

    def check_lowstate_silence(self, now: float) -> bool:
        """Warn (and return True) when no LowState, valid or not, has arrived for more than
        :data:`LOWSTATE_SILENCE_S` [s] at ``now`` [s, monotonic] (since the start or the last one), at most once per
        :data:`LOWSTATE_WARN_EVERY_S`: nothing else would say so while the bridge is disarmed (only damping is
        sent)."""
        with self._lock:
            silent = now - self.lowstate_arrival
            if silent <= LOWSTATE_SILENCE_S or now - self._silence_warned < LOWSTATE_WARN_EVERY_S:
                return False
            self._silence_warned = now
        where = (f"network interface '{self.interface if self.interface is not None else '?'}', DDS domain "
                 f"{self.domain_id if self.domain_id is not None else '?'}")
        self._log("warning", f"no LowState on {LOWSTATE_TOPIC} for {silent:.1f} s ({where}): check the cable to the "
                             f"robot and that it is on, --interface (the one wired to the robot) and --domain-id "
                             f"(Unitree robots use 0), and that the robot's sport mode is off (Unitree app or the "
                             f"SDK's motion switcher)")
        return True

    def _write(self, fault: str | None, cmd: MotorCommand, now: float):
        with self._lock:
            mode_machine = self.state.mode_machine if self.state is not None else 0
        msg = fill_lowcmd(self.types.new_lowcmd(), cmd, self.cfg, self.sdk.crc, mode_machine)
        self.transport.write(msg)
        self.last_sent, self.last_lowcmd = cmd, msg
        self.writes += 1
        self.tick_faults[fault or "servo"] += 1
        if fault != self.fault:
            if fault is None:
                self._log("info", "servo: targets and gains reach the motors")
            elif fault not in ("disarmed", "estop"):
                self._log("warning", f"damping: {fault}")
            self.fault = fault
        return msg

    def close(self) -> None:
        """Write damping commands for ``exit_damping_s`` at the command rate, then stop writing and close the
        transport (idempotent)."""
        if self._closed:
            return
        if self.timer is not None:
            self.destroy_timer(self.timer)
            self.timer = None
        with self._lock:
            self.armed = False
        period = 1.0 / self.cfg.command_rate_hz
        end = time.monotonic() + self.exit_damping_s
        while True:
            now = time.monotonic()
            with self._lock:
                q = None if self.state is None else self.state.q
            self._write("closing", damping_command(q, self.cfg, self.damping_kd), now)
            if now >= end:
                break
            time.sleep(period)
        self._closed = True
        self.transport.close()
        self._log("info", f"stopped: damping written for {self.exit_damping_s:g} s")


def bridge_main(args) -> int:
    """``sim2real bridge unitree``: load the robot and its ``unitree:`` block, open DDS on ``--interface`` /
    ``--domain-id``, arm with ``--arm``, bridge until ``--duration`` or Ctrl-C / SIGTERM; always ends with damping
    commands (:meth:`UnitreeBridgeNode.close`). Returns 0.

    Raises:
        UnitreeBridgeError: the SDK missing (naming the install script), no or a bad ``unitree:`` block, a DDS
            interface that cannot be opened, ``--arm`` refused.
        ConfigError: an unknown robot or a bad robot config.
    """
    from sim2real.configs import load_robot, load_robot_interface
    from sim2real.deploy.ros_runtime import ros_context, spin_node, stop_on_signals

    robot = load_robot(args.robot)
    cfg = unitree_config(robot, load_robot_interface(args.robot, "unitree"))
    sdk = load_unitree_sdk()
    open_dds(sdk, args.domain_id, args.interface)
    with stop_on_signals(), ros_context() as ctx:
        node = UnitreeBridgeNode(robot, cfg, DdsTransport(sdk, cfg.family), sdk=sdk, namespace=args.namespace,
                                 node_name=args.node_name, command_timeout_s=args.command_timeout,
                                 state_timeout_s=args.state_timeout, damping_kd=args.damping_kd, context=ctx,
                                 interface=args.interface, domain_id=args.domain_id)

        def start():
            if args.arm and not node.arm():
                raise UnitreeBridgeError(f"--arm: {node.log_lines[-1][1]}")

        spin_node(node, ctx, args.duration, start=start, on_exit=node.close)
    return 0

"""``sim2real bridge crazyflie``: a real Crazyflie 2.x on the deploy topics, over cflib (``cflib==0.1.34``).

The bridge plays the part the stand-in (:mod:`sim2real.hardware.standins.quadrotor`) plays in simulation: the policy
node (``sim2real deploy``) cannot tell them apart. cflib is imported lazily (:func:`load_cflib`), so the rest of
the project imports without it. The cflib ``Crazyflie`` object is injectable (``crazyflie=``), which is how the
tests drive the bridge without a radio.

Topics, relative to the namespace (default ``/crazyflie``):
  * ``odom`` (``nav_msgs/Odometry``, out, at the log rate): ``header.frame_id`` ``world``, ``child_frame_id``
    ``base_link``, stamped with the bridge's ROS clock when the last block of a time step arrived; pose in the
    world frame (the on-board estimator's frame), twist in the BODY frame. The quaternion goes through
    :func:`~sim2real.deploy.ros_conversions.fill_odometry` (project w, x, y, z -> ROS x, y, z, w), as the stand-in's;
  * ``cmd/ctbr`` (``std_msgs/Float32MultiArray``, in): collective thrust [N], body rates p, q, r [rad/s] ->
    cflib's ``Commander.send_setpoint`` (see "Commands" below);
  * ``cmd/motors`` (in): REFUSED. Per-motor commands cannot be sent over the cflib link (no such setpoint type):
    a ``motor_thrust`` policy has to run on board. Each message is dropped with an error line (throttled);
  * ``arm`` (``std_msgs/Bool``, in): ``true`` arms (see "Arming"), ``false`` stops the motors and disarms;
  * ``estop`` (``std_msgs/Bool``, in): ``true`` stops the motors and disarms, latched until the bridge restarts.


The Crazyflie side (log blocks, time alignment, the ctbr -> setpoint mapping) is in
:mod:`sim2real.hardware.crazyflie.protocol`.

Arming (:meth:`CrazyflieBridgeNode.arm`): nothing is sent to the commander before an explicit arm step, the
``--arm`` flag or ``true`` on ``arm``; until then ctbr commands are dropped with a warning. Arming checks that the
firmware reports RATE mode for roll, pitch and yaw (refused otherwise), sends the supervisor's arming request
(``cf.supervisor.send_arming_request``, needed by firmware built to require arming) and one zero setpoint, which
releases the RPYT decoder's thrust lock. Then each valid ctbr command is sent as it arrives.

Stopping: ``send_stop_setpoint`` (motors off, the drone falls) and a disarm request, then the bridge is DISARMED
(latched until the next arm step), when: ctbr commands go stale (none for more than ``command_timeout_s``, 0.2 s,
checked every 20 ms once a command has been sent since arming), ``estop``, ``false`` on ``arm``, the link is lost
(cflib's ``connection_lost``; the stop setpoint is attempted, but on a dead link it cannot arrive: the firmware's
commander watchdog then levels the drone 0.5 s and cuts the motors 2 s after the last setpoint) and on close.
After a link loss the bridge publishes no more odometry and ``sim2real bridge`` exits with status 1; it does not
reconnect.
"""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path

import numpy as np
from nav_msgs.msg import Odometry
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from rclpy.qos import QoSProfile
from std_msgs.msg import Float32MultiArray

from sim2real.deploy.ros_conversions import command_from_message, fill_odometry
from sim2real.hardware.arming import ArmingLatch
from sim2real.hardware.crazyflie.protocol import (
    LOG_BLOCKS, LOG_FETCH_AS, MOTOR_INTERFACE_REFUSAL, RATE_MODE, RATE_MODE_PARAMS, THRUST_COMMAND_MAX,
    CommanderSetpoint, CrazyflieBridgeError, LogBlockAligner, check_interface, check_log_blocks,
    check_policy_interface, ctbr_to_setpoint, first_line, load_cflib, quiet_cflib_logging, rotor_thrust_of_command,
    state_from_log,
)

WORLD_FRAME, BODY_FRAME = "world", "base_link"  # as the stand-in (sim2real.hardware.standins.quadrotor)
COMMAND_TOPIC, MOTOR_TOPIC = "cmd/ctbr", "cmd/motors"


# --- the node ---------------------------------------------------------------------------------------------------------
class CrazyflieBridgeNode(ArmingLatch, Node):
    """A Crazyflie on the deploy topics through cflib (see the module docstring).

    Args:
        uri: cflib link URI, e.g. ``radio://0/80/2M/E7E7E7E7E7``.
        crazyflie: a cflib ``Crazyflie`` (or an object with its interface: ``open_link``, ``close_link``, the
            ``connected`` / ``fully_connected`` / ``connection_failed`` / ``connection_lost`` / ``disconnected``
            callers, ``commander``, ``param``, ``log``, ``supervisor``); None: a new ``Crazyflie`` with a TOC
            cache in ``~/.cache/sim2real/cflib``.
        robot: the quadrotor's robot config (its ``max_body_rate`` [rad/s] clamps the commanded rates); None:
            ``crazyflie2``.
        namespace, node_name: ROS names.
        interface: the action interface of the policy to be bridged; only ``ctbr`` is accepted.
        command_timeout_s: ctbr commands older than this [s] stop the motors.
        log_period_ms: period of the log blocks [ms], 10 to 2540 in steps of 10.
        tolerance_ms: time alignment tolerance [ms] (None: ``log_period_ms - 1``).
        connect_timeout_s: how long :meth:`connect` waits for the link, TOCs and parameters [s].
        watchdog_period_s: period of the stale-command check [s].
        context: rclpy context.

    Raises:
        CrazyflieBridgeError: ``motor_thrust`` or another interface than ``ctbr``; a robot that is not a quadrotor;
            bad periods; cflib missing (only when ``crazyflie`` is None).
    """

    DISARMED_TEXT = "stop setpoint sent, motors stopped, disarmed"
    ESTOP_TEXT = "e-stop: motors stopped; latched until the bridge restarts"

    def __init__(self, uri: str, *, crazyflie=None, robot: dict | None = None, namespace: str = "/crazyflie",
                 node_name: str = "crazyflie_bridge", interface: str = "ctbr", command_timeout_s: float = 0.2,
                 log_period_ms: int = 10, tolerance_ms: int | None = None, connect_timeout_s: float = 30.0,
                 watchdog_period_s: float = 0.02, context=None):
        check_interface(interface)
        if robot is None:
            from sim2real.configs import load_robot

            robot = load_robot("crazyflie2")
        if robot.get("kind") != "quadrotor":
            raise CrazyflieBridgeError(f"the Crazyflie bridge drives a quadrotor; robot '{robot.get('name')}' is "
                                       f"{robot.get('kind')!r}")
        if not (10 <= int(log_period_ms) <= 2540 and int(log_period_ms) % 10 == 0):
            raise CrazyflieBridgeError(f"log period must be 10..2540 ms in steps of 10 (the firmware's unit), "
                                       f"got {log_period_ms}")
        if not (math.isfinite(command_timeout_s) and command_timeout_s > 0):
            raise CrazyflieBridgeError(f"command timeout must be a positive number of seconds, got "
                                       f"{command_timeout_s}")
        check_log_blocks()
        if crazyflie is None:
            cflib = load_cflib()
            from cflib.crazyflie import Crazyflie

            cflib.crtp.init_drivers()
            cache = Path.home() / ".cache" / "sim2real" / "cflib"
            cache.mkdir(parents=True, exist_ok=True)
            crazyflie = Crazyflie(rw_cache=str(cache))
        super().__init__(node_name, namespace=namespace, context=context)
        self.uri = uri
        self.cf = crazyflie
        self.max_body_rate = np.asarray(robot["max_body_rate"], dtype=np.float64).reshape(3)
        self.command_timeout_s = float(command_timeout_s)
        self.log_period_ms = int(log_period_ms)
        self.tolerance_ms = self.log_period_ms - 1 if tolerance_ms is None else int(tolerance_ms)
        self.connect_timeout_s = float(connect_timeout_s)
        self.aligner = LogBlockAligner([name for name, _ in LOG_BLOCKS], self.tolerance_ms)

        self._init_latch()
        self.link_up = False
        self.link_lost = threading.Event()
        self.link_lost_message: str | None = None
        self.last_command_time: float | None = None  # monotonic [s] of the last setpoint sent since arming
        self.commands_sent = 0
        self.odometry_published = 0
        self.last_skew_ms: int | None = None
        self.log_configs: list = []
        self._saved_params: dict[str, str] = {}
        self._connected = threading.Event()
        self._fully_connected = threading.Event()
        self._connect_error: str | None = None
        self._closed = False

        qos = QoSProfile(depth=10)
        self.odom_pub = self.create_publisher(Odometry, "odom", qos)
        self.create_subscription(Float32MultiArray, COMMAND_TOPIC, self._on_ctbr_msg, qos)
        self.create_subscription(Float32MultiArray, MOTOR_TOPIC, self._on_motor_msg, qos)
        self._subscribe_latch(qos)
        self.ARMED_TEXT = f"armed: commands on {self.resolve_topic_name(COMMAND_TOPIC)} now reach the motors"
        self._steady = Clock(clock_type=ClockType.STEADY_TIME)
        self.watchdog = self.create_timer(watchdog_period_s, lambda: self.check_commands(time.monotonic()),
                                          clock=self._steady)

        cf = self.cf
        cf.connected.add_callback(self._on_connected)
        cf.fully_connected.add_callback(self._on_fully_connected)
        cf.connection_failed.add_callback(self._on_connection_failed)
        cf.connection_lost.add_callback(self._on_connection_lost)
        cf.disconnected.add_callback(self._on_disconnected)

    # --- link -------------------------------------------------------------------------------------------------------
    def connect(self, cancel: threading.Event | None = None) -> None:
        """Open the link (blocking until the TOCs and parameters are in, at most ``connect_timeout_s``, or until
        ``cancel`` is set), switch the RPYT decoder to RATE mode (remembering the old values) and start the log
        blocks.

        Raises:
            CrazyflieBridgeError: the connection failed, timed out or was cancelled, a parameter or log variable is
                not in the firmware's TOC, or a log block is refused.
        """
        self._log("info", f"connecting to {self.uri}")
        self.cf.open_link(self.uri)
        deadline = time.monotonic() + self.connect_timeout_s
        while not self._fully_connected.is_set():
            if self._connect_error is not None:
                raise CrazyflieBridgeError(f"could not connect to the Crazyflie at {self.uri}: {self._connect_error}")
            if cancel is not None and cancel.is_set():
                self.cf.close_link()
                raise CrazyflieBridgeError(f"interrupted while connecting to {self.uri}")
            if time.monotonic() > deadline:
                self.cf.close_link()
                raise CrazyflieBridgeError(f"no Crazyflie answered at {self.uri} within {self.connect_timeout_s:g} s")
            self._fully_connected.wait(0.01)
        with self._lock:
            self.link_up = True
        self._set_rate_mode()
        self._start_log_blocks()
        max_thrust = 4.0 * rotor_thrust_of_command(THRUST_COMMAND_MAX)
        self._log("info", f"connected to {self.uri}: odometry on {self.resolve_topic_name('odom')} at "
                          f"{1000.0 / self.log_period_ms:g} Hz; ctbr -> send_setpoint in RATE mode (thrust saturates "
                          f"at {THRUST_COMMAND_MAX} = {max_thrust:.4g} N); DISARMED until the arm step")

    def _set_rate_mode(self) -> None:
        param = self.cf.param
        for name in RATE_MODE_PARAMS:
            try:
                self._saved_params[name] = param.get_value(name)
                param.set_value(name, RATE_MODE)
            except (KeyError, AttributeError) as exc:
                raise CrazyflieBridgeError(f"firmware parameter {name} unavailable ({exc}): the bridge needs the "
                                           f"RPYT commander's rate mode") from None

    def rate_mode_confirmed(self) -> bool:
        """Whether the firmware reports RATE (0) for roll, pitch and yaw (cflib's cache of the values it echoed)."""
        try:
            return all(int(float(self.cf.param.get_value(n))) == RATE_MODE for n in RATE_MODE_PARAMS)
        except (KeyError, ValueError, TypeError):
            return False

    def _start_log_blocks(self) -> None:
        from cflib.crazyflie.log import LogConfig

        for name, variables in LOG_BLOCKS:
            conf = LogConfig(name=f"sim2real_{name}", period_in_ms=self.log_period_ms)
            for var in variables:
                conf.add_variable(var, LOG_FETCH_AS)
            try:
                self.cf.log.add_config(conf)
            except KeyError as exc:
                raise CrazyflieBridgeError(f"log block {name}: {exc.args[0]} (not in the firmware's log TOC)") \
                    from None
            except AttributeError as exc:
                raise CrazyflieBridgeError(f"log block {name} refused: {exc}") from None
            conf.data_received_cb.add_callback(lambda ts, data, c, n=name: self.on_log_data(n, ts, data))
            conf.error_cb.add_callback(lambda c, msg, n=name: self._log("error", f"log block {n}: {msg}"))
            self.log_configs.append(conf)
            conf.start()

    def _on_connected(self, uri) -> None:
        self._connected.set()

    def _on_fully_connected(self, uri) -> None:
        self._fully_connected.set()

    def _on_connection_failed(self, uri, message) -> None:
        self._connect_error = first_line(message) or "connection failed"

    def _on_connection_lost(self, uri, message) -> None:
        """cflib's ``connection_lost``: stop the motors (attempted), disarm, stop publishing, one error line."""
        with self._lock:
            self.link_up = False
            was_armed = self.armed
            self._send_stop()
            self.armed = False
            self.last_command_time = None
        text = (f"crazyflie link lost ({uri}: {first_line(message)}): motors stopped (stop setpoint sent"
                f"{' while armed' if was_armed else ''}; if it cannot get through, the firmware's commander watchdog "
                f"cuts the motors 2 s after the last setpoint), disarmed, odometry stopped")
        self.link_lost_message = text
        self._log("error", text)
        self.link_lost.set()

    def _on_disconnected(self, uri) -> None:
        with self._lock:
            self.link_up = False

    def close(self) -> None:
        """Stop the motors and disarm, restore the RPYT stabilisation parameters, close the link (idempotent)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            link_up = self.link_up
            if link_up:
                self._send_stop()
                self._arming_request(False)
            self.armed = False
        if link_up:
            for name, value in self._saved_params.items():
                try:
                    self.cf.param.set_value(name, value)
                except Exception as exc:  # the link may be going down; the parameters reset on reboot anyway
                    self._log("warning", f"could not restore {name}={value}: {exc}")
        try:
            self.cf.close_link()
        except Exception as exc:
            self._log("warning", f"closing the link: {exc}")

    # --- arming and stopping (the latch: sim2real.hardware.arming) -------------------------------------------------
    def arm(self, confirm_timeout_s: float = 1.0) -> bool:
        """The explicit arm step: check the link, the e-stop and that the firmware reports RATE mode (waiting up
        to ``confirm_timeout_s`` [s] for its echo), send the supervisor's arming request and a zero setpoint (the
        RPYT decoder's thrust-lock release). Returns whether it armed; a refusal is logged with its reason."""
        self._confirm_timeout_s = float(confirm_timeout_s)
        return super().arm()

    def _arm_blocker(self) -> str | None:
        return None if self.link_up else "no link to the Crazyflie"

    def _arm_check(self) -> str | None:
        deadline = time.monotonic() + self._confirm_timeout_s
        while not self.rate_mode_confirmed() and time.monotonic() < deadline:
            time.sleep(0.01)
        if not self.rate_mode_confirmed():
            return (f"the firmware does not report RATE mode ({', '.join(RATE_MODE_PARAMS)} = {RATE_MODE}); "
                    f"a ctbr command would be taken as angles")
        return None

    def _engage(self) -> bool:
        if not self.link_up or self.estop_latched:
            self._log("error", "arming refused: the link or the e-stop changed while arming")
            return False
        self._arming_request(True)
        self.cf.commander.send_setpoint(0.0, 0.0, 0.0, 0)
        self.last_command_time = None
        return True

    def _stop(self) -> None:
        """Stop the motors (stop setpoint + disarm request, when the link is up)."""
        if self.link_up:
            self._send_stop()
            self._arming_request(False)
        self.last_command_time = None

    def _send_stop(self) -> None:
        try:
            self.cf.commander.send_stop_setpoint()
        except Exception as exc:  # a dead link must not keep the bridge from disarming
            self._log("error", f"stop setpoint not sent: {exc}")

    def _arming_request(self, arm: bool) -> None:
        supervisor = getattr(self.cf, "supervisor", None)
        if supervisor is None:
            return
        try:
            supervisor.send_arming_request(arm)
        except Exception as exc:
            self._log("warning", f"{'arming' if arm else 'disarming'} request not sent: {exc}")

    # --- commands ---------------------------------------------------------------------------------------------------
    def on_ctbr(self, values, now: float) -> CommanderSetpoint | None:
        """A ctbr command (4 values, or None for an invalid message) arrived at ``now`` [s, monotonic]: when armed
        and valid, send it (:func:`ctbr_to_setpoint`) and return what was sent; otherwise drop it (logged)."""
        if values is None:
            self._log("warning", f"{COMMAND_TOPIC}: command dropped (need 4 finite values)", throttle_s=1.0)
            return None
        with self._lock:
            if not self.armed:
                armed_hint = ("e-stop latched" if self.estop_latched else
                              f"start with --arm or publish true on {self.resolve_topic_name('arm')}")
                self._log("warning", f"not armed: ctbr command dropped ({armed_hint})", throttle_s=2.0,
                          key="not armed")
                return None
            sp = ctbr_to_setpoint(values, self.max_body_rate)
            self.cf.commander.send_setpoint(sp.roll, sp.pitch, sp.yawrate, sp.thrust)
            self.last_command_time = now
            self.commands_sent += 1
            return sp

    def check_commands(self, now: float) -> bool:
        """The stale-command watchdog at ``now`` [s, monotonic]: armed, and the last setpoint sent more than
        ``command_timeout_s`` ago -> stop and disarm. Returns whether it stopped."""
        with self._lock:
            stale = (self.armed and self.last_command_time is not None
                     and now - self.last_command_time > self.command_timeout_s)
        if stale:
            self.disarm(f"no ctbr command for {self.command_timeout_s:g} s (re-arm: true on "
                        f"{self.resolve_topic_name('arm')})")
        return stale

    def _on_ctbr_msg(self, msg: Float32MultiArray) -> None:
        self.on_ctbr(command_from_message(msg), time.monotonic())

    def _on_motor_msg(self, msg: Float32MultiArray) -> None:
        self._log("error", f"{MOTOR_TOPIC} refused: {MOTOR_INTERFACE_REFUSAL}", throttle_s=5.0)

    # --- state ------------------------------------------------------------------------------------------------------
    def on_log_data(self, block: str, timestamp_ms: int, values: dict) -> Odometry | None:
        """A log block's sample (cflib's ``data_received_cb``): feed the aligner; at a complete time step, publish
        and return the odometry. Nothing is published once the link is down."""
        with self._lock:
            if not self.link_up:
                return None
            aligned = self.aligner.feed(block, timestamp_ms, values)
        if aligned is None:
            return None
        try:
            state = state_from_log(aligned.values)
        except ValueError as exc:
            self._log("warning", f"state estimate dropped: {exc}", throttle_s=1.0, key="state")
            return None
        msg = Odometry()
        msg.header.stamp = self.get_clock().now().to_msg()
        msg.header.frame_id, msg.child_frame_id = WORLD_FRAME, BODY_FRAME
        fill_odometry(msg, state.pos_w, state.quat_w, state.lin_vel_w, state.ang_vel_b)
        self.odom_pub.publish(msg)
        self.last_skew_ms = aligned.skew_ms
        self.odometry_published += 1
        return msg


def bridge_main(args) -> int:
    """``sim2real bridge crazyflie``: check the interface (and ``--policy``'s), connect, arm with ``--arm``, bridge
    until ``--duration``, Ctrl-C / SIGTERM or a link loss; always stops the motors and closes the link.

    Returns 0, or 1 after a link loss (its error line printed).

    Raises:
        CrazyflieBridgeError: see :func:`check_interface`, :func:`check_policy_interface`, :func:`load_cflib`,
            :meth:`CrazyflieBridgeNode.connect`, or ``--arm`` refused.
        ConfigError: an unknown robot.
    """
    import sys
    import warnings

    from sim2real.configs import load_robot
    from sim2real.deploy.ros_runtime import STOP_REQUESTED, ros_context, spin_node, stop_on_signals

    check_interface(args.interface)
    if args.policy:
        check_policy_interface(args.policy)
    robot = load_robot(args.robot)
    load_cflib()
    quiet_cflib_logging()
    warnings.filterwarnings("ignore", message="module 'sre_", category=DeprecationWarning)  # lark, via rclpy
    with stop_on_signals(), ros_context() as ctx:
        node = CrazyflieBridgeNode(args.uri, robot=robot, namespace=args.namespace, node_name=args.node_name,
                                   interface=args.interface, command_timeout_s=args.command_timeout,
                                   log_period_ms=args.log_period_ms, context=ctx)

        def start():
            node.connect(cancel=STOP_REQUESTED)
            if args.arm and not node.arm():
                raise CrazyflieBridgeError(f"--arm: {node.log_lines[-1][1]}")

        spin_node(node, ctx, args.duration, start=start, stop_when=node.link_lost.is_set, on_exit=node.close)
    if node.link_lost.is_set():
        print("error: " + node.link_lost_message, file=sys.stderr)
        return 1
    return 0

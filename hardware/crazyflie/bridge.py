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

State estimate (cflib log blocks). A log block carries at most ``LogConfig.MAX_LEN`` = 26 bytes of payload, and
the state is 13 float32 (52 bytes), so it spans the three blocks of :data:`LOG_BLOCKS`, all at ``log_period_ms``
(default 10 ms, the firmware's finest period):
  * ``pos_vel``: ``stateEstimate.x, y, z`` [m] and ``stateEstimate.vx, vy, vz`` [m/s], world frame (the
    on-board estimator's global frame, z up: a positioning system's, or without one the pose at boot);
  * ``attitude``: ``stateEstimate.qx, qy, qz, qw``, body-to-world (the full quaternion, not the legacy Euler
    angles whose pitch is inverted);
  * ``rates``: ``gyro.x, y, z`` [deg/s], body frame (x forward, y left, z up; right-handed, unlike the legacy
    ``stateEstimateZ.ratePitch``) -> rad/s.
The world-frame velocity is rotated into the body frame for the twist: ``v_b = R(q)^T v_w``.

Time alignment (:class:`LogBlockAligner`). The firmware samples each block on its own timer: same period,
arbitrary phase, so blocks of one time step carry different timestamps (the firmware's 24-bit millisecond tick,
unwrapped here). An odometry message is published only when every block has a sample not used before and the
newest and oldest of these samples lie within ``tolerance_ms`` of each other (default: one log period minus 1 ms,
9 ms). Each sample is used at most once, so there is one message per time step; a block sample that was lost or
arrives too far apart is skipped with its time step. Since the phases of ``n`` blocks always leave a window of
``(n - 1) / n`` of a period holding one sample of each, the default is always met; the skew of the last message
is :attr:`CrazyflieBridgeNode.last_skew_ms`.

Commands (:func:`ctbr_to_setpoint`). ``send_setpoint(roll, pitch, yawrate, thrust)`` is the legacy RPYT packet
(``crtp_commander_rpyt.c``). With the firmware parameters ``flightmode.stabModeRoll`` and ``stabModePitch`` set to
0 (RATE; the bridge sets them at connection and restores them on close, and ``stabModeYaw``, RATE by default, is
set too) its roll and pitch are body-rate setpoints [deg/s] for the rate loops of the PID controller (the
firmware's default, assumed here), and yawrate is a yaw-rate setpoint [deg/s] (the PID controller integrates it
into its yaw setpoint). That is the only cflib 0.1.34 call that carries roll and pitch RATES with a raw 16-bit
thrust: ``send_setpoint_manual(..., rate=True)`` needs firmware with the generic commander's manual type (11) and
takes the thrust as a percentage mapped to 10001..60000 (0 % is 10001: no command below it),
``send_full_state_setpoint`` and the others are position or velocity setpoints. Mapping, units and signs (traced
through cflib, which sends ``-pitch``, the RPYT decoder, which inverts the yaw rate, and ``controller_pid.c``, which
tracks the pitch rate against ``-gyro.y``):
  * ``roll = degrees(p)``, ``pitch = degrees(q)``, ``yawrate = -degrees(r)`` [deg/s], each rate first clamped to
    the robot config's ``max_body_rate`` [rad/s];
  * ``thrust`` (uint16): per-rotor thrust ``T / 4`` [N] inverted through the firmware's own rotor model
    (``power_distribution_quadrotor.c``: ``f = A x^2 + B x``, ``x = PWM / 65535``, ``A`` = 0.091492681 N,
    ``B`` = 0.067673604 N), ``thrust = round(65535 x)``, clamped to [0, 60000] (60000: the decoder's ``MAX_THRUST``,
    about 0.555 N collective; negative thrust -> 0). The firmware gives zero thrust below its ``MIN_THRUST``
    (1000, about 0.004 N). The model is the firmware's (a stock Crazyflie 2.x); it tops out at 0.159 N per rotor,
    above the robot config's ``max_motor_thrust`` (0.1457 N), and does not model battery sag.

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

import collections
import json
import logging
import math
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from nav_msgs.msg import Odometry
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from rclpy.qos import QoSProfile
from std_msgs.msg import Bool, Float32MultiArray

from sim2real.configs import ConfigError
from sim2real.deploy.ros_conversions import QUAT_NORM_TOLERANCE, command_from_message, fill_odometry
from sim2real.deploy.ros_runtime import ThrottledLog

WORLD_FRAME, BODY_FRAME = "world", "base_link"  # as the stand-in (sim2real.hardware.standins.quadrotor)
CFLIB_REQUIREMENT = "cflib==0.1.34"

# --- the firmware's conventions --------------------------------------------------------------------------------------
#: Rotor model of the firmware (``power_distribution_quadrotor.c``, Förster 2015): ``f = A x^2 + B x`` [N per rotor],
#: ``x = PWM / PWM_FULL_SCALE`` in [0, 1].
THRUST_MODEL_A, THRUST_MODEL_B = 0.091492681, 0.067673604
PWM_FULL_SCALE = 65535
#: The RPYT decoder clips the thrust to ``MAX_THRUST`` and gives zero thrust below ``MIN_THRUST``.
THRUST_COMMAND_MAX, THRUST_COMMAND_MIN = 60000, 1000
#: Firmware parameters of the RPYT decoder's stabilisation mode per axis, and their RATE value.
RATE_MODE_PARAMS = ("flightmode.stabModeRoll", "flightmode.stabModePitch", "flightmode.stabModeYaw")
RATE_MODE = 0
#: Largest payload of one cflib log block [bytes] (``cflib.crazyflie.log.LogConfig.MAX_LEN``).
LOG_BLOCK_MAX_BYTES = 26
#: Firmware timestamps of log blocks: a 24-bit millisecond tick.
LOG_TIMESTAMP_MODULO = 1 << 24
#: The state estimate's log blocks ``(name, variables)``; every variable is fetched as float32 (4 bytes).
LOG_BLOCKS = (
    ("pos_vel", ("stateEstimate.x", "stateEstimate.y", "stateEstimate.z",
                 "stateEstimate.vx", "stateEstimate.vy", "stateEstimate.vz")),
    ("attitude", ("stateEstimate.qx", "stateEstimate.qy", "stateEstimate.qz", "stateEstimate.qw")),
    ("rates", ("gyro.x", "gyro.y", "gyro.z")),
)
LOG_FETCH_AS, LOG_VARIABLE_BYTES = "float", 4
COMMAND_TOPIC, MOTOR_TOPIC = "cmd/ctbr", "cmd/motors"


class CrazyflieBridgeError(ConfigError):
    """The bridge cannot run: cflib missing, a refused interface or policy, a failed connection, log variables or
    parameters the firmware does not have. ``sim2real bridge`` prints it as one ``error:`` line (exit status 2)."""


MOTOR_INTERFACE_REFUSAL = (
    "the Crazyflie bridge takes collective thrust + body rates (interface ctbr, cmd/ctbr) only: per-motor commands "
    "(motor_thrust, cmd/motors) cannot be sent over the cflib link; a motor_thrust policy has to run on board")


def load_cflib():
    """Import cflib (lazily: the rest of the project does not need it) and return the module.

    Raises:
        CrazyflieBridgeError: cflib is not installed.
    """
    try:
        import cflib
        import cflib.crazyflie
        import cflib.crazyflie.log
        import cflib.crtp
    except ImportError as exc:
        raise CrazyflieBridgeError(f"the Crazyflie bridge needs cflib, which is not installed ({exc}): "
                                   f"pip install {CFLIB_REQUIREMENT}") from None
    return cflib


def first_line(message) -> str:
    """The first non-empty line of a cflib message (its connection errors carry a whole traceback)."""
    lines = [line.strip() for line in str(message or "").splitlines() if line.strip()]
    return lines[0] if lines else ""


class _CflibLogFormatter(logging.Formatter):
    """cflib's own log records as one line each: ``cflib: <first line>``."""

    def format(self, record: logging.LogRecord) -> str:
        return f"cflib: {first_line(record.getMessage())}"


def quiet_cflib_logging() -> None:
    """Route cflib's Python logging (warnings and errors only) to stderr as one line per record, instead of the
    multi-line tracebacks it logs on a failed connection (the bridge reports the error itself)."""
    log = logging.getLogger("cflib")
    if not any(isinstance(h.formatter, _CflibLogFormatter) for h in log.handlers):
        handler = logging.StreamHandler()
        handler.setFormatter(_CflibLogFormatter())
        log.addHandler(handler)
    log.setLevel(logging.WARNING)
    log.propagate = False


def check_interface(interface: str) -> None:
    """Accept the ``ctbr`` action interface only.

    Raises:
        CrazyflieBridgeError: ``motor_thrust`` (:data:`MOTOR_INTERFACE_REFUSAL`) or an unknown interface.
    """
    if interface == "motor_thrust":
        raise CrazyflieBridgeError(MOTOR_INTERFACE_REFUSAL)
    if interface != "ctbr":
        raise CrazyflieBridgeError(f"the Crazyflie bridge takes the ctbr interface, not {interface!r}")


def check_policy_interface(policy_dir) -> str:
    """The action interface of an exported policy (``metadata.json``'s ``action.interface``), checked with
    :func:`check_interface`; returns it.

    Raises:
        CrazyflieBridgeError: no readable metadata, no interface in it, or an interface the bridge refuses.
    """
    path = Path(policy_dir) / "metadata.json"
    try:
        meta = json.loads(path.read_text())
        interface = meta["action"]["interface"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CrazyflieBridgeError(f"cannot read the action interface of {path}: {exc}") from None
    check_interface(interface)
    return interface


# --- commands -------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CommanderSetpoint:
    """The arguments of cflib's ``Commander.send_setpoint`` in the firmware's RATE mode.

    Attributes:
        roll: roll-rate setpoint [deg/s] (``degrees(p)``); pitch: pitch-rate setpoint [deg/s] (``degrees(q)``, cflib
            negates it on the wire); yawrate: [deg/s] (``-degrees(r)``); thrust: uint16 thrust command.
    """

    roll: float
    pitch: float
    yawrate: float
    thrust: int


def rotor_thrust_of_command(command: float) -> float:
    """Per-rotor thrust [N] the firmware's rotor model gives for a thrust command (0..65535)."""
    x = float(command) / PWM_FULL_SCALE
    return THRUST_MODEL_A * x * x + THRUST_MODEL_B * x


def collective_thrust_to_command(thrust_n: float) -> int:
    """Collective thrust [N] -> the uint16 thrust of ``send_setpoint``: ``T / 4`` per rotor through the inverse of
    the firmware's rotor model, ``x = (-B + sqrt(B^2 + 4 A f)) / (2 A)``, ``round(65535 x)``, clamped to
    [0, :data:`THRUST_COMMAND_MAX`] (negative thrust -> 0).

    Raises:
        ValueError: NaN/Inf.
    """
    if not math.isfinite(thrust_n):
        raise ValueError(f"thrust must be finite, got {thrust_n}")
    f = max(float(thrust_n), 0.0) / 4.0
    x = (-THRUST_MODEL_B + math.sqrt(THRUST_MODEL_B ** 2 + 4.0 * THRUST_MODEL_A * f)) / (2.0 * THRUST_MODEL_A)
    return int(min(round(x * PWM_FULL_SCALE), THRUST_COMMAND_MAX))


def ctbr_to_setpoint(command, max_body_rate) -> CommanderSetpoint:
    """A ctbr command ``[T N, p, q, r rad/s]`` -> :class:`CommanderSetpoint` (see the module docstring): rates
    clamped to ``±max_body_rate`` ``[3]`` [rad/s], then ``roll = deg(p)``, ``pitch = deg(q)``, ``yawrate = -deg(r)``;
    thrust by :func:`collective_thrust_to_command`.

    Raises:
        ValueError: not 4 values, or NaN/Inf.
    """
    values = np.asarray(command, dtype=np.float64).reshape(-1)
    if values.shape[0] != 4 or not np.isfinite(values).all():
        raise ValueError(f"a ctbr command is 4 finite values, got {values.tolist()}")
    limit = np.abs(np.asarray(max_body_rate, dtype=np.float64).reshape(3))
    p, q, r = np.clip(values[1:], -limit, limit)
    return CommanderSetpoint(math.degrees(p), math.degrees(q), -math.degrees(r),
                             collective_thrust_to_command(values[0]))


# --- state estimate -------------------------------------------------------------------------------------------------
def check_log_blocks(blocks=LOG_BLOCKS) -> None:
    """Raise ValueError when a block's payload exceeds :data:`LOG_BLOCK_MAX_BYTES` or has no variables."""
    for name, variables in blocks:
        size = LOG_VARIABLE_BYTES * len(variables)
        if not variables or size > LOG_BLOCK_MAX_BYTES:
            raise ValueError(f"log block {name!r}: {size} bytes (1 to {LOG_BLOCK_MAX_BYTES} allowed)")


@dataclass
class StateEstimate:
    """One time step of the on-board estimate in project conventions (float64 numpy arrays).

    Attributes:
        pos_w: position [m], world frame ``[3]``; quat_w: body-to-world (w, x, y, z), unit norm ``[4]``;
        lin_vel_w: velocity [m/s], world frame ``[3]``; ang_vel_b: body rates [rad/s], body frame ``[3]``.
    """

    pos_w: np.ndarray
    quat_w: np.ndarray
    lin_vel_w: np.ndarray
    ang_vel_b: np.ndarray


def state_from_log(values: dict) -> StateEstimate:
    """The :class:`StateEstimate` of the merged variables of :data:`LOG_BLOCKS` (cflib names -> values in the
    firmware's units: m, m/s, quaternion x, y, z, w, deg/s). The quaternion is renormalised.

    Raises:
        ValueError: a variable missing, NaN/Inf, or a quaternion whose norm is off by more than
            :data:`~sim2real.deploy.ros_conversions.QUAT_NORM_TOLERANCE` (e.g. an estimator not yet running).
    """
    def get(*names):
        try:
            return np.array([float(values[n]) for n in names], dtype=np.float64)
        except KeyError as exc:
            raise ValueError(f"log variable {exc.args[0]} missing") from None

    pos = get("stateEstimate.x", "stateEstimate.y", "stateEstimate.z")
    vel = get("stateEstimate.vx", "stateEstimate.vy", "stateEstimate.vz")
    qx, qy, qz, qw = get("stateEstimate.qx", "stateEstimate.qy", "stateEstimate.qz", "stateEstimate.qw")
    gyro_deg = get("gyro.x", "gyro.y", "gyro.z")
    quat = np.array([qw, qx, qy, qz])
    if not (np.isfinite(pos).all() and np.isfinite(vel).all() and np.isfinite(quat).all()
            and np.isfinite(gyro_deg).all()):
        raise ValueError("NaN/Inf in the state estimate")
    norm = float(np.linalg.norm(quat))
    if abs(norm - 1.0) > QUAT_NORM_TOLERANCE:
        raise ValueError(f"attitude quaternion of norm {norm:.4g}")
    return StateEstimate(pos, quat / norm, vel, np.radians(gyro_deg))


@dataclass
class AlignedSample:
    """One complete time step of the log blocks.

    Attributes:
        time_ms: the newest block timestamp of the set [ms, firmware clock, unwrapped];
        skew_ms: newest minus oldest timestamp of the set [ms];
        times_ms: each block's timestamp [ms, unwrapped];
        values: all blocks' variables merged (cflib name -> value).
    """

    time_ms: int
    skew_ms: int
    times_ms: dict
    values: dict


class LogBlockAligner:
    """Groups samples of several log blocks into time steps (the rule is in the module docstring).

    Args:
        block_names: the blocks that make one time step.
        tolerance_ms: largest spread [ms] of the timestamps of one set (inclusive).

    Raises:
        ValueError: no blocks, a block named twice, or a negative tolerance.
    """

    def __init__(self, block_names, tolerance_ms: int):
        self.block_names = tuple(block_names)
        if not self.block_names or len(set(self.block_names)) != len(self.block_names):
            raise ValueError(f"need distinct block names, got {self.block_names}")
        if not tolerance_ms >= 0:
            raise ValueError(f"tolerance_ms must be >= 0, got {tolerance_ms}")
        self.tolerance_ms = int(tolerance_ms)
        self._latest: dict[str, tuple[int, dict, bool]] = {}  # block -> (unwrapped time, values, used)
        self._reference: int | None = None  # newest unwrapped time seen
        self.dropped = 0  # samples refused as not newer than their block's previous one

    def unwrap(self, timestamp_ms: int) -> int:
        """The 24-bit firmware timestamp ``timestamp_ms`` on a continuous clock: the value congruent to it modulo
        2^24 nearest the newest time seen so far (shared by all blocks, so their times stay comparable across a
        wrap, every 4.66 h)."""
        raw = int(timestamp_ms) % LOG_TIMESTAMP_MODULO
        if self._reference is None:
            self._reference = raw
            return raw
        half = LOG_TIMESTAMP_MODULO // 2
        delta = (raw - self._reference + half) % LOG_TIMESTAMP_MODULO - half
        t = self._reference + delta
        self._reference = max(self._reference, t)
        return t

    def feed(self, block: str, timestamp_ms: int, values: dict) -> AlignedSample | None:
        """A sample of ``block`` with its firmware timestamp [ms]: the completed set, or None.

        Raises:
            KeyError: an unknown block.
        """
        if block not in self.block_names:
            raise KeyError(f"unknown log block {block!r}")
        t = self.unwrap(timestamp_ms)
        previous = self._latest.get(block)
        if previous is not None and t <= previous[0]:
            self.dropped += 1
            return None
        self._latest[block] = (t, dict(values), False)
        if len(self._latest) < len(self.block_names) or any(used for _, _, used in self._latest.values()):
            return None
        times = {b: self._latest[b][0] for b in self.block_names}
        skew = max(times.values()) - min(times.values())
        if skew > self.tolerance_ms:
            return None
        merged: dict = {}
        for b in self.block_names:
            tb, vb, _ = self._latest[b]
            merged.update(vb)
            self._latest[b] = (tb, vb, True)
        return AlignedSample(max(times.values()), skew, times, merged)


# --- the node ---------------------------------------------------------------------------------------------------------
class CrazyflieBridgeNode(ThrottledLog, Node):
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

        self._lock = threading.RLock()
        self.armed = False
        self.estop_latched = False
        self.link_up = False
        self.link_lost = threading.Event()
        self.link_lost_message: str | None = None
        self.last_command_time: float | None = None  # monotonic [s] of the last setpoint sent since arming
        self.commands_sent = 0
        self.odometry_published = 0
        self.last_skew_ms: int | None = None
        self.log_lines: collections.deque = collections.deque(maxlen=self.LOG_LINES_KEPT)  # (level, text)
        self._last_logged: dict[str, float] = {}
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
        self.create_subscription(Bool, "arm", self._on_arm_msg, qos)
        self.create_subscription(Bool, "estop", self._on_estop_msg, qos)
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

    # --- arming and stopping --------------------------------------------------------------------------------------
    def arm(self, confirm_timeout_s: float = 1.0) -> bool:
        """The explicit arm step: check the link, the e-stop and that the firmware reports RATE mode (waiting up
        to ``confirm_timeout_s`` [s] for its echo), send the supervisor's arming request and a zero setpoint (the
        RPYT decoder's thrust-lock release). Returns whether it armed; a refusal is logged with its reason."""
        with self._lock:
            if self.armed:
                return True
            reason = None
            if self.estop_latched:
                reason = "e-stop latched (restart the bridge)"
            elif not self.link_up:
                reason = "no link to the Crazyflie"
        if reason is None:
            deadline = time.monotonic() + confirm_timeout_s
            while not self.rate_mode_confirmed() and time.monotonic() < deadline:
                time.sleep(0.01)
            if not self.rate_mode_confirmed():
                reason = (f"the firmware does not report RATE mode ({', '.join(RATE_MODE_PARAMS)} = {RATE_MODE}); "
                          f"a ctbr command would be taken as angles")
        if reason is not None:
            self._log("error", f"arming refused: {reason}")
            return False
        with self._lock:
            if not self.link_up or self.estop_latched:
                self._log("error", "arming refused: the link or the e-stop changed while arming")
                return False
            self._arming_request(True)
            self.cf.commander.send_setpoint(0.0, 0.0, 0.0, 0)
            self.armed = True
            self.last_command_time = None
        self._log("info", f"armed: commands on {self.resolve_topic_name(COMMAND_TOPIC)} now reach the motors")
        return True

    def disarm(self, reason: str = "disarmed on request") -> None:
        """Stop the motors (stop setpoint + disarm request) and disarm; logs ``reason`` (a warning)."""
        with self._lock:
            if self.link_up:
                self._send_stop()
                self._arming_request(False)
            was_armed, self.armed = self.armed, False
            self.last_command_time = None
        if was_armed:
            self._log("warning", f"{reason}: stop setpoint sent, motors stopped, disarmed")

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

    def _on_arm_msg(self, msg: Bool) -> None:
        if msg.data:
            self.arm()
        else:
            self.disarm("disarmed on request")

    def _on_estop_msg(self, msg: Bool) -> None:
        if not msg.data:
            return
        with self._lock:
            first = not self.estop_latched
            self.estop_latched = True
        self.disarm("e-stop")
        if first:
            self._log("error", "e-stop: motors stopped; latched until the bridge restarts")

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

"""The Crazyflie side of ``sim2real bridge crazyflie`` (no ROS): cflib loading, the firmware's conventions, ctbr
commands -> ``Commander.send_setpoint`` and the state estimate's log blocks -> :class:`StateEstimate`. The ROS node
is :mod:`sim2real.hardware.crazyflie.bridge`.

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
"""

from __future__ import annotations

import importlib
import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from sim2real.configs import ConfigError
from sim2real.deploy.ros_conversions import QUAT_NORM_TOLERANCE

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


class CrazyflieBridgeError(ConfigError):
    """The bridge cannot run: cflib missing, a refused interface or policy, a failed connection, log variables or
    parameters the firmware does not have. ``sim2real bridge`` prints it as one ``error:`` line (exit status 2)."""


MOTOR_INTERFACE_REFUSAL = (
    "the Crazyflie bridge takes collective thrust + body rates (interface ctbr, cmd/ctbr) only: per-motor commands "
    "(motor_thrust, cmd/motors) cannot be sent over the cflib link; a motor_thrust policy has to run on board")


def load_cflib():
    """Import cflib (lazily: the rest of the project does not need it) and return the module.

    Raises:
        MissingExtraError: cflib is not installed (one line naming the ``hardware`` extra, which pins
            :data:`CFLIB_REQUIREMENT`).
    """
    module = "cflib"
    try:
        import cflib

        for module in ("cflib.crazyflie", "cflib.crazyflie.log", "cflib.crtp"):
            importlib.import_module(module)
    except ImportError as exc:
        from sim2real.extras import missing_extra

        raise missing_extra("hardware", "sim2real bridge crazyflie", module, exc) from None
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

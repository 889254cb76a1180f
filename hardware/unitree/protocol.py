"""The robot side of ``sim2real bridge unitree`` (no ROS): Unitree SDK2 loading, the robot config's ``unitree:``
block, LowState_ -> :class:`LowStateSample`, what is sent (:func:`safe_command`, :func:`damping_command`,
:func:`fill_lowcmd`) and the DDS transport. The ROS node is :mod:`sim2real.hardware.unitree.bridge`.

Robot side (DDS, ``ChannelFactoryInitialize(domain_id, interface)``): ``rt/lowstate`` (``LowState_``, in) and
``rt/lowcmd`` (``LowCmd_``, out) of the robot config's message family (:data:`FAMILIES`):
  * ``unitree_go`` (Go2, H1): ``unitree_sdk2py.idl.unitree_go.msg.dds_``, 20 motor slots; a command carries
    ``head`` = 0xFE 0xEF, ``level_flag`` = 0xFF (low level), ``gpio`` = 0;
  * ``unitree_hg`` (G1, H1-2): ``unitree_sdk2py.idl.unitree_hg.msg.dds_``, 35 motor slots; a command echoes the
    latest LowState's ``mode_machine`` and carries the config's ``mode_pr`` (0: ankle pitch/roll, 1: A/B).
Every command's ``crc`` is the SDK's own ``CRC().Crc(cmd)`` (Unitree's CRC-32 over the message's packed
little-endian words). Motor slots mapped to a joint get mode 0x01 (servo, PMSM); unmapped slots mode 0x00 (off),
kp = kd = tau = 0 (go family: q = ``PosStopF``, dq = ``VelStopF``, the vendor's "no position/velocity loop").

The ``unitree:`` block of the robot config (:func:`unitree_config`; keys in :data:`UNITREE_KEYS`): ``family``,
``command_rate_hz``, ``motor_index`` ``{joint name: slot}`` (every policy joint, by NAME: the Go2's motors are
ordered FR, FL, RR, RL, the policy's joints FL, FR, RL, RR), ``torque_limit`` [N m], ``velocity_limit`` [rad/s],
``kp_max`` [N m/rad], ``kd_max`` [N m s/rad] (numbers or ``{joint regex: value}`` maps, as the robot config's
per-joint values), ``damping_kd`` [N m s/rad], ``mode_pr`` (hg only). Joint position limits are the MJCF's joint
ranges (the compiled model, as the deploy node's). :func:`sim2real.configs.load_robot` leaves the block out of the
robot config (training and policy metadata do not see it); :func:`sim2real.configs.load_robot_interface` reads it.

Safety on what is SENT (:func:`safe_command`, per joint): the position target clamped to the joint range, the
velocity target to ``±velocity_limit``, kp to [0, ``kp_max``], kd to [0, ``kd_max``]; then the position target
is limited so that the PD torque the motor will produce at the latest measured state, ``kp (q* - q) + kd (dq* -
dq)``, lies within ``±torque_limit`` (applied last: it wins over the joint range when the two conflict, which needs
a measured state at the range's edge moving fast; the torque then equals what the motor's own saturation gives).
With kp = 0 the damping torque ``kd (dq* - dq)`` is not limited by the bridge (the motor saturates it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np

from sim2real.configs import ConfigError
from sim2real.deploy.ros_conversions import QUAT_NORM_TOLERANCE

SDK_REQUIREMENT = "unitree-sdk2py-dimos==1.0.3 (with cyclonedds==0.10.2)"
SDK_INSTALL_SCRIPT = ".ci/install-unitree-sdk"
#: Message family -> number of motor slots in its LowState_ / LowCmd_.
FAMILIES = {"unitree_go": 20, "unitree_hg": 35}
LOWSTATE_TOPIC, LOWCMD_TOPIC = "rt/lowstate", "rt/lowcmd"
#: Motor modes: servo (PMSM, the PD loop runs on the motor) and off.
MOTOR_SERVO, MOTOR_OFF = 0x01, 0x00
#: unitree_go commands: head bytes, the low-level flag, and the vendor's "no position / velocity loop" sentinels.
GO_HEAD = (0xFE, 0xEF)
GO_LEVEL_FLAG = 0xFF
POS_STOP_F, VEL_STOP_F = 2.146e9, 16000.0
#: Keys of a robot config's ``unitree:`` block (required, optional).
UNITREE_REQUIRED = ("family", "command_rate_hz", "motor_index", "torque_limit", "velocity_limit", "kp_max",
                    "kd_max", "damping_kd")
UNITREE_KEYS = UNITREE_REQUIRED + ("mode_pr",)
DAMPING_KD = 2.0  # N m s/rad, the deploy node's damping gain (the Go2 config's damping_kd)


class UnitreeBridgeError(ConfigError):
    """The bridge cannot run: the SDK missing, a robot config without (or with a bad) ``unitree:`` block, a DDS
    interface that cannot be opened. ``sim2real bridge`` prints it as one ``error:`` line (exit status 2)."""


def load_unitree_sdk() -> SimpleNamespace:
    """Import Unitree SDK2 for Python (lazily: the rest of the project does not need it).

    Returns:
        A namespace with ``ChannelFactoryInitialize``, ``ChannelPublisher``, ``ChannelSubscriber``, ``crc`` (the
        SDK's ``CRC()`` instance) and per family (``unitree_go``, ``unitree_hg``) ``new_lowcmd()`` and the
        ``LowState_`` / ``LowCmd_`` types (``sdk.types[family]``).

    Raises:
        UnitreeBridgeError: ``unitree_sdk2py`` or ``cyclonedds`` is not installed (one line naming the install
            script).
    """
    try:
        from unitree_sdk2py.core.channel import ChannelFactoryInitialize, ChannelPublisher, ChannelSubscriber
        from unitree_sdk2py.idl.default import unitree_go_msg_dds__LowCmd_, unitree_hg_msg_dds__LowCmd_
        from unitree_sdk2py.idl.unitree_go.msg import dds_ as go
        from unitree_sdk2py.idl.unitree_hg.msg import dds_ as hg
        from unitree_sdk2py.utils.crc import CRC
    except ImportError as exc:
        raise UnitreeBridgeError(f"the Unitree bridge needs Unitree SDK2 for Python, which is not installed ({exc}): "
                                 f"run {SDK_INSTALL_SCRIPT} ({SDK_REQUIREMENT})") from None
    return SimpleNamespace(
        ChannelFactoryInitialize=ChannelFactoryInitialize, ChannelPublisher=ChannelPublisher,
        ChannelSubscriber=ChannelSubscriber, crc=CRC(),
        types={"unitree_go": SimpleNamespace(LowState_=go.LowState_, LowCmd_=go.LowCmd_,
                                             new_lowcmd=unitree_go_msg_dds__LowCmd_),
               "unitree_hg": SimpleNamespace(LowState_=hg.LowState_, LowCmd_=hg.LowCmd_,
                                             new_lowcmd=unitree_hg_msg_dds__LowCmd_)})


# --- the robot config's unitree: block ------------------------------------------------------------------------------
@dataclass
class UnitreeConfig:
    """A robot config's ``unitree:`` block resolved against its joints (``[J]`` arrays in POLICY order).

    Attributes:
        family: ``unitree_go`` or ``unitree_hg``; num_slots: motor slots of its messages.
        joint_names: the robot config's ``joint_names`` (policy order).
        motor_index: ``[J]`` int, each joint's motor slot.
        command_rate_hz: LowCmd rate [Hz].
        joint_low, joint_high: joint position limits [rad] (the MJCF's joint ranges).
        torque_limit [N m], velocity_limit [rad/s], kp_max [N m/rad], kd_max [N m s/rad]: ``[J]`` float64.
        damping_kd: kd [N m s/rad] of the damping mode.
        mode_pr: the hg family's ``mode_pr`` (0 or 1).
    """

    family: str
    num_slots: int
    joint_names: list
    motor_index: np.ndarray
    command_rate_hz: float
    joint_low: np.ndarray
    joint_high: np.ndarray
    torque_limit: np.ndarray
    velocity_limit: np.ndarray
    kp_max: np.ndarray
    kd_max: np.ndarray
    damping_kd: float
    mode_pr: int = 0

    @property
    def motor_order(self) -> np.ndarray:
        """Indices into ``joint_names`` sorted by motor slot (the order ``joint_states`` lists the joints in)."""
        return np.argsort(self.motor_index, kind="stable")


def _positive(key: str, value, allow_zero: bool = False) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and (
        value >= 0 if allow_zero else value > 0)
    if not ok:
        raise UnitreeBridgeError(f"robot.unitree.{key}: expected a finite number {'>= 0' if allow_zero else '> 0'}, "
                                 f"got {value!r}")
    return float(value)


def unitree_config(robot: dict, block: dict | None, joint_range: np.ndarray | None = None) -> UnitreeConfig:
    """Check a robot config's ``unitree:`` block and resolve it (see the module docstring).

    Args:
        robot: the robot config (``kind: legged``; as :func:`~sim2real.configs.load_robot` returns it).
        block: its ``unitree:`` block (:func:`~sim2real.configs.load_robot_interface`), or None.
        joint_range: ``[J, 2]`` joint position limits [rad] in policy order; None: compiled from the robot's MJCF
            (:func:`~sim2real.sim.mujoco_model.build_model`, the joint ranges the deploy node clamps to).

    Raises:
        UnitreeBridgeError: no block, a missing or unknown key, an unknown family, a joint without a motor index,
            an index for a joint the config does not have, a duplicate index, an index outside the family's slots,
            a limit that is not positive, a per-joint map that does not cover the joints exactly once.
        ConfigError: the robot config itself (not legged, bad MJCF).
    """
    from sim2real.sim.robot import resolve_joint_values

    name = robot.get("name", "?")
    if robot.get("kind") != "legged":
        raise UnitreeBridgeError(f"the Unitree bridge drives legged robots; robot '{name}' is {robot.get('kind')!r}")
    if block is None:
        raise UnitreeBridgeError(f"robot '{name}' has no 'unitree:' block (family, motor_index, limits) in its "
                                 f"config: the bridge needs one (configs/robots/go2.yaml has an example)")
    if not isinstance(block, dict):
        raise UnitreeBridgeError(f"robot.unitree: expected a mapping, got {block!r}")
    unknown = sorted(set(map(str, block)) - set(UNITREE_KEYS))
    if unknown:
        raise UnitreeBridgeError(f"unknown config key 'robot.unitree.{unknown[0]}' (known at this level: "
                                 f"{', '.join(sorted(UNITREE_KEYS))})")
    missing = [k for k in UNITREE_REQUIRED if k not in block]
    if missing:
        raise UnitreeBridgeError(f"robot.unitree misses keys: {', '.join(missing)}")
    family = block["family"]
    if family not in FAMILIES:
        raise UnitreeBridgeError(f"robot.unitree.family: '{family}' (choose {' or '.join(FAMILIES)})")
    slots = FAMILIES[family]
    joints = list(robot["joint_names"])
    index = block["motor_index"]
    if not isinstance(index, dict) or not index:
        raise UnitreeBridgeError(f"robot.unitree.motor_index: expected a {{joint name: motor slot}} map, got {index!r}")
    extra = [j for j in index if j not in joints]
    if extra:
        raise UnitreeBridgeError(f"robot.unitree.motor_index: joint '{extra[0]}' is not in robot.joint_names")
    without = [j for j in joints if j not in index]
    if without:
        raise UnitreeBridgeError(f"robot.unitree.motor_index: joint{'s' if len(without) > 1 else ''} "
                                 f"{', '.join(without)} without a motor index")
    seen: dict[int, str] = {}
    for j in joints:
        slot = index[j]
        if not isinstance(slot, int) or isinstance(slot, bool) or not 0 <= slot < slots:
            raise UnitreeBridgeError(f"robot.unitree.motor_index.{j}: {slot!r} is not a motor slot of {family} "
                                     f"(0..{slots - 1})")
        if slot in seen:
            raise UnitreeBridgeError(f"robot.unitree.motor_index: slot {slot} given to both {seen[slot]} and {j}")
        seen[slot] = j

    def per_joint(key: str) -> np.ndarray:
        try:
            values = resolve_joint_values(block[key], joints, f"unitree.{key}")
        except ConfigError as exc:
            raise UnitreeBridgeError(str(exc)) from None
        if not (values > 0).all():
            raise UnitreeBridgeError(f"robot.unitree.{key}: limits must be > 0")
        return values

    mode_pr = block.get("mode_pr", 0)
    if mode_pr not in (0, 1) or isinstance(mode_pr, bool):
        raise UnitreeBridgeError(f"robot.unitree.mode_pr: 0 (pitch/roll) or 1 (A/B), got {mode_pr!r}")
    if joint_range is None:
        from sim2real.sim.mujoco_model import build_model

        _, model_index = build_model(robot, {"fidelity": "full"})
        joint_range = model_index.joint_range
    joint_range = np.asarray(joint_range, dtype=np.float64).reshape(len(joints), 2)
    return UnitreeConfig(
        family=family, num_slots=slots, joint_names=joints,
        motor_index=np.array([index[j] for j in joints], dtype=np.int64),
        command_rate_hz=_positive("command_rate_hz", block["command_rate_hz"]),
        joint_low=joint_range[:, 0].copy(), joint_high=joint_range[:, 1].copy(),
        torque_limit=per_joint("torque_limit"), velocity_limit=per_joint("velocity_limit"),
        kp_max=per_joint("kp_max"), kd_max=per_joint("kd_max"),
        damping_kd=_positive("damping_kd", block["damping_kd"]), mode_pr=int(mode_pr))


# --- state: LowState_ -> joint states and IMU -----------------------------------------------------------------------
@dataclass
class LowStateSample:
    """One LowState in project conventions (float64 numpy arrays; joints in POLICY order).

    Attributes:
        q [rad], dq [rad/s], tau [N m] (``tau_est``): ``[J]``.
        quat_w: the IMU's orientation in the world frame (w, x, y, z), unit norm ``[4]``.
        gyro: angular velocity [rad/s], IMU frame ``[3]``; acc: specific force [m/s^2], IMU frame ``[3]``.
        mode_machine: the hg family's ``mode_machine`` (0 for the go family).
    """

    q: np.ndarray
    dq: np.ndarray
    tau: np.ndarray
    quat_w: np.ndarray
    gyro: np.ndarray
    acc: np.ndarray
    mode_machine: int = 0


def lowstate_to_sample(msg, cfg: UnitreeConfig) -> LowStateSample:
    """The :class:`LowStateSample` of a ``LowState_`` (either family): each joint's motor slot by the config's
    ``motor_index``; the quaternion (Unitree w, x, y, z) renormalised.

    Raises:
        ValueError: NaN/Inf in a mapped motor's q, dq or tau_est or in the IMU, or a quaternion whose norm is off
            by more than :data:`QUAT_NORM_TOLERANCE` (the message must be dropped).
    """
    motors = msg.motor_state
    raw = np.array([(motors[s].q, motors[s].dq, motors[s].tau_est) for s in cfg.motor_index], dtype=np.float64)
    imu = msg.imu_state
    quat = np.array(imu.quaternion, dtype=np.float64)
    gyro, acc = np.array(imu.gyroscope, dtype=np.float64), np.array(imu.accelerometer, dtype=np.float64)
    if not np.isfinite(raw).all():
        bad = sorted({cfg.joint_names[j] for j in np.flatnonzero(~np.isfinite(raw).all(axis=1))})
        raise ValueError(f"NaN/Inf motor state of {', '.join(bad)}")
    if not (np.isfinite(quat).all() and np.isfinite(gyro).all() and np.isfinite(acc).all()):
        raise ValueError("NaN/Inf IMU state")
    norm = float(np.linalg.norm(quat))
    if abs(norm - 1.0) > QUAT_NORM_TOLERANCE:
        raise ValueError(f"IMU quaternion of norm {norm:.4g}")
    return LowStateSample(raw[:, 0].copy(), raw[:, 1].copy(), raw[:, 2].copy(), quat / norm, gyro, acc,
                          int(getattr(msg, "mode_machine", 0)))


# --- commands -------------------------------------------------------------------------------------------------------
@dataclass
class MotorCommand:
    """What is sent to the mapped motors (``[J]`` float64 in POLICY order): position q [rad], velocity dq [rad/s],
    kp [N m/rad], kd [N m s/rad], feed-forward tau [N m] (always 0)."""

    q: np.ndarray
    dq: np.ndarray
    kp: np.ndarray
    kd: np.ndarray
    tau: np.ndarray

    def pd_torque(self, q, dq) -> np.ndarray:
        """The torque [N m] the motors' PD loop produces at measured ``q``, ``dq``: ``kp (q* - q) + kd (dq* - dq) +
        tau``."""
        return self.kp * (self.q - np.asarray(q)) + self.kd * (self.dq - np.asarray(dq)) + self.tau


def safe_command(q_target, dq_target, kp, kd, q, dq, cfg: UnitreeConfig) -> MotorCommand:
    """The command actually sent for targets and gains at the latest measured state (see "Safety" in the module
    docstring): q* to the joint range, dq* to ``±velocity_limit``, kp to [0, kp_max], kd to [0, kd_max], then q*
    to the window where ``|kp (q* - q) + kd (dq* - dq)| <= torque_limit`` (where kp > 0).

    Args:
        q_target [rad], dq_target [rad/s] (None: 0), kp [N m/rad], kd [N m s/rad], q [rad], dq [rad/s]: ``[J]``
            array-likes in policy order.

    Raises:
        ValueError: wrong sizes, or NaN/Inf.
    """
    n = len(cfg.joint_names)
    arrays = [np.asarray(x, dtype=np.float64).reshape(-1) if x is not None else np.zeros(n)
              for x in (q_target, dq_target, kp, kd, q, dq)]
    if any(a.shape != (n,) for a in arrays) or not all(np.isfinite(a).all() for a in arrays):
        raise ValueError(f"need {n} finite values per joint")
    q_t, dq_t, kp, kd, q, dq = arrays
    q_t = np.clip(q_t, cfg.joint_low, cfg.joint_high)
    dq_t = np.clip(dq_t, -cfg.velocity_limit, cfg.velocity_limit)
    kp = np.clip(kp, 0.0, cfg.kp_max)
    kd = np.clip(kd, 0.0, cfg.kd_max)
    stiff = kp > 0
    if stiff.any():
        damping = kd * (dq_t - dq)  # the velocity term of the PD torque
        safe_kp = np.where(stiff, kp, 1.0)
        lo = q + (-cfg.torque_limit - damping) / safe_kp
        hi = q + (cfg.torque_limit - damping) / safe_kp
        q_t = np.where(stiff, np.clip(q_t, lo, hi), q_t)
    return MotorCommand(q_t, dq_t, kp, kd, np.zeros(n))


def damping_command(q, cfg: UnitreeConfig, damping_kd: float | None = None) -> MotorCommand:
    """The damping command: q* = ``q`` (the latest measured positions; zeros before any), dq* = 0, kp = 0, kd =
    ``damping_kd`` (default the config's; at most ``kd_max``), tau = 0."""
    n = len(cfg.joint_names)
    kd = cfg.damping_kd if damping_kd is None else float(damping_kd)
    q = np.zeros(n) if q is None else np.asarray(q, dtype=np.float64).reshape(n)
    return MotorCommand(q.copy(), np.zeros(n), np.zeros(n), np.minimum(np.full(n, kd), cfg.kd_max), np.zeros(n))


def fill_lowcmd(msg, command: MotorCommand, cfg: UnitreeConfig, crc, mode_machine: int = 0):
    """Write ``command`` into a ``LowCmd_`` of the config's family (a fresh one from the SDK's default
    constructor): header fields, mapped slots servo (0x01) with q, dq, kp, kd, tau, unmapped slots off (0x00),
    then ``crc = crc.Crc(msg)`` (the SDK's ``CRC``). Returns ``msg``."""
    go = cfg.family == "unitree_go"
    if go:
        msg.head[0], msg.head[1] = GO_HEAD
        msg.level_flag = GO_LEVEL_FLAG
        msg.gpio = 0
    else:
        msg.mode_pr = cfg.mode_pr
        msg.mode_machine = int(mode_machine)
    for m in msg.motor_cmd:
        m.mode, m.kp, m.kd, m.tau = MOTOR_OFF, 0.0, 0.0, 0.0
        m.q, m.dq = (POS_STOP_F, VEL_STOP_F) if go else (0.0, 0.0)
    for j, slot in enumerate(cfg.motor_index):
        m = msg.motor_cmd[int(slot)]
        m.mode = MOTOR_SERVO
        m.q, m.dq = float(command.q[j]), float(command.dq[j])
        m.kp, m.kd, m.tau = float(command.kp[j]), float(command.kd[j]), float(command.tau[j])
    msg.crc = crc.Crc(msg)
    return msg


# --- transport --------------------------------------------------------------------------------------------------------
class DdsTransport:
    """The robot's DDS topics through the SDK's channels: ``rt/lowstate`` in, ``rt/lowcmd`` out (the channel
    factory must be initialised first: :func:`open_dds`). A test transport offers the same three methods.

    Args:
        sdk: :func:`load_unitree_sdk`'s namespace; family: the message family.
    """

    def __init__(self, sdk, family: str):
        self.types = sdk.types[family]
        self.sdk = sdk
        self._sub = self._pub = None

    def start(self, on_lowstate) -> None:
        """Subscribe ``on_lowstate(msg)`` (called on the SDK's reader thread) and open the command writer."""
        self._pub = self.sdk.ChannelPublisher(LOWCMD_TOPIC, self.types.LowCmd_)
        self._pub.Init()
        self._sub = self.sdk.ChannelSubscriber(LOWSTATE_TOPIC, self.types.LowState_)
        self._sub.Init(on_lowstate, 10)

    def write(self, msg) -> bool:
        """Write one ``LowCmd_`` (no wait for a matched reader); False when closed or the write failed."""
        return bool(self._pub.Write(msg)) if self._pub is not None else False

    def close(self) -> None:
        """Close both channels (idempotent)."""
        for ch in (self._sub, self._pub):
            if ch is not None:
                try:
                    ch.Close()
                except Exception:  # closing while the process exits
                    pass
        self._sub = self._pub = None


def open_dds(sdk, domain_id: int, interface: str) -> None:
    """``ChannelFactoryInitialize(domain_id, interface)`` (once per process: the SDK's factory is a singleton).

    Raises:
        UnitreeBridgeError: the domain cannot be created on that interface.
    """
    try:
        sdk.ChannelFactoryInitialize(int(domain_id), interface)
    except Exception as exc:
        raise UnitreeBridgeError(f"cannot open DDS domain {domain_id} on interface '{interface}' ({exc}): check "
                                 f"--interface (the network interface wired to the robot, e.g. eth0)") from None

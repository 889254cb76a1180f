"""``sim2real bridge unitree``: a real Unitree robot on the legged deploy topics, over Unitree SDK2 for Python.

The bridge plays the part the stand-in (:mod:`sim2real.hardware.standins.legged`) plays in simulation: the legged
policy node (``sim2real deploy --robot go2``, :mod:`sim2real.deploy.nodes.legged`) cannot tell them apart. The SDK
(``unitree_sdk2py`` from ``unitree-sdk2py-dimos==1.0.3``, on CycloneDDS 0.10.2: ``.ci/install-unitree-sdk``) is
imported lazily (:func:`load_unitree_sdk`), so the rest of the project imports without it. The DDS side is
injectable (``transport=``, see :class:`DdsTransport`), which is how the tests drive the bridge without a robot.

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

Safety on what is SENT (:func:`safe_command`, per joint): the position target clamped to the joint range, the
velocity target to ``±velocity_limit``, kp to [0, ``kp_max``], kd to [0, ``kd_max``]; then the position target
is limited so that the PD torque the motor will produce at the latest measured state, ``kp (q* - q) + kd (dq* -
dq)``, lies within ``±torque_limit`` (applied last: it wins over the joint range when the two conflict, which needs
a measured state at the range's edge moving fast; the torque then equals what the motor's own saturation gives).
With kp = 0 the damping torque ``kd (dq* - dq)`` is not limited by the bridge (the motor saturates it).

Stopping (:meth:`UnitreeBridgeNode.close`: Ctrl-C, SIGTERM, ``--duration``): damping commands for
``exit_damping_s`` (0.5 s) at the command rate, then no more writes (the motors keep the last, damping, command).
"""

from __future__ import annotations

import collections
import math
import threading
import time
from dataclasses import dataclass
from types import SimpleNamespace

import numpy as np
from rclpy.clock import Clock, ClockType
from rclpy.node import Node
from rclpy.qos import QoSProfile
from sensor_msgs.msg import Imu, JointState
from std_msgs.msg import Bool

from sim2real.configs import ConfigError
from sim2real.deploy.ros_conversions import (
    QUAT_NORM_TOLERANCE, InvalidMessage, JointOrder, fill_imu, fill_joint_state, joint_gains_from_message,
)
from sim2real.deploy.ros_runtime import ThrottledLog

SDK_REQUIREMENT = "unitree-sdk2py-dimos==1.0.3 (with cyclonedds==0.10.2)"
SDK_INSTALL_SCRIPT = ".ci/install-unitree-sdk"
#: Message family -> number of motor slots in its LowState_ / LowCmd_.
FAMILIES = {"unitree_go": 20, "unitree_hg": 35}
LOWSTATE_TOPIC, LOWCMD_TOPIC = "rt/lowstate", "rt/lowcmd"
TARGETS_TOPIC, GAINS_TOPIC = "cmd/joint_targets", "cmd/joint_gains"
IMU_FRAME = "imu"  # as the stand-in (sim2real.hardware.standins.legged)
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
EXIT_DAMPING_S = 0.5
#: No LowState (valid or not) for this long [s] since the start or the last one: a warning naming the interface and
#: the DDS domain, armed or not; repeated at most every LOWSTATE_WARN_EVERY_S while the silence lasts.
LOWSTATE_SILENCE_S = 1.0
LOWSTATE_WARN_EVERY_S = 5.0


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
            (:func:`~sim2real.sim.mujoco_backend.build_model`, the joint ranges the deploy node clamps to).

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
        from sim2real.sim.mujoco_backend import build_model

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


def state_messages(sample: LowStateSample, cfg: UnitreeConfig) -> tuple[JointState, Imu]:
    """``(joint_states, imu)`` of a sample (headers: the caller stamps them; ``imu`` frame :data:`IMU_FRAME`):
    joints in motor-slot order, IMU quaternion w, x, y, z -> ROS x, y, z, w through :func:`fill_imu`."""
    order = cfg.motor_order
    js = fill_joint_state(JointState(), [cfg.joint_names[j] for j in order], sample.q[order], sample.dq[order],
                          sample.tau[order])
    imu = fill_imu(Imu(), sample.quat_w, sample.gyro, sample.acc)
    imu.header.frame_id = IMU_FRAME
    return js, imu


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


# --- the node ---------------------------------------------------------------------------------------------------------
class UnitreeBridgeNode(ThrottledLog, Node):
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

        self._lock = threading.RLock()
        self.armed = False
        self.estop_latched = False
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
        self.log_lines: collections.deque = collections.deque(maxlen=self.LOG_LINES_KEPT)  # (level, text)
        self._last_logged: dict[str, float] = {}
        self._closed = False
        self.lowstate_arrival = time.monotonic()  # monotonic [s] of the latest LowState (valid or not), or the start
        self._silence_warned = -math.inf  # monotonic [s] of the latest no-LowState warning

        qos = QoSProfile(depth=10)
        self.joint_pub = self.create_publisher(JointState, "joint_states", qos)
        self.imu_pub = self.create_publisher(Imu, "imu", qos)
        self.create_subscription(JointState, TARGETS_TOPIC, lambda m: self.on_targets(m, time.monotonic()), qos)
        self.create_subscription(JointState, GAINS_TOPIC, lambda m: self.on_gains(m, time.monotonic()), qos)
        self.create_subscription(Bool, "arm", self._on_arm_msg, qos)
        self.create_subscription(Bool, "estop", self._on_estop_msg, qos)
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

    # --- arming -----------------------------------------------------------------------------------------------------
    def arm(self) -> bool:
        """Arm: from now on fresh targets and gains may reach the motors. Refused (False, logged) after an e-stop."""
        with self._lock:
            if self.estop_latched:
                self._log("error", "arming refused: e-stop latched (restart the bridge)")
                return False
            was, self.armed = self.armed, True
        if not was:
            self._log("info", f"armed: {TARGETS_TOPIC} + {GAINS_TOPIC} now reach the motors (damping whenever "
                              f"they or the robot's state go stale)")
        return True

    def disarm(self, reason: str = "disarmed on request") -> None:
        """Disarm: damping commands only until the next arm step."""
        with self._lock:
            was, self.armed = self.armed, False
        if was:
            self._log("warning", f"{reason}: damping")

    def estop(self) -> None:
        """E-stop: disarm and latch damping until the bridge restarts."""
        with self._lock:
            first = not self.estop_latched
            self.estop_latched = True
        self.disarm("e-stop")
        if first:
            self._log("error", "e-stop: damping, latched until the bridge restarts")

    def _on_arm_msg(self, msg: Bool) -> None:
        if msg.data:
            self.arm()
        else:
            self.disarm()

    def _on_estop_msg(self, msg: Bool) -> None:
        if msg.data:
            self.estop()

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

"""The ROS boundary: ROS 2 messages <-> the project's arrays and :class:`~sim2real.tasks.state.RobotState`.

The one place where conventions change (both the deploy node and the stand-in robot use it):
  * quaternions: ROS messages carry (x, y, z, w), the project (w, x, y, z)
    (:func:`~sim2real.sim.rotations.quat_xyzw_to_wxyz` / ``quat_wxyz_to_xyzw``);
  * ``nav_msgs/Odometry``: pose in ``header.frame_id`` (the world frame), twist in ``child_frame_id`` (the body
    frame); :class:`RobotState` wants the linear velocity in the world frame: ``v_w = R(q) v_b``;
  * commands: ``std_msgs/Float32MultiArray`` of 4 values, ``layout.dim[0].label`` = comma-joined command names.

Legged robots (``kind: legged``):
  * ``sensor_msgs/JointState``: joints are matched BY NAME to the robot config's ``joint_names`` (the policy
    order), whatever order the message lists them in; positions [rad], velocities [rad/s], efforts [N m];
  * ``sensor_msgs/Imu``: orientation (x, y, z, w) of the IMU frame in the world frame, angular velocity in the IMU
    frame; both are rotated explicitly to the base frame by the fixed IMU-to-base rotation ``q_bi`` (w, x, y, z;
    the IMU frame's orientation in the base frame, identity unless the robot config has ``imu_to_base_quat``):
    ``q_wb = q_wi * conj(q_bi)``, ``w_b = R(q_bi) w_i``;
  * joint commands: two ``sensor_msgs/JointState`` messages, ``cmd/joint_targets`` (position = target [rad],
    velocity = 0, effort = 0) and ``cmd/joint_gains`` (a (kp, kd) carrier: position = kp [N m/rad], velocity = kd
    [N m s/rad], effort empty), both naming the joints they command;
  * the jump command: ``std_msgs/Float32MultiArray`` of 5 values (dx, dy [m], dyaw [rad], obstacle height,
    obstacle length [m]);
  * footstep plans: ``nav_msgs/Path`` or ``geometry_msgs/PoseArray`` of foot poses (position = the foot point
    projected to the ground [m], orientation (x, y, z, w) whose yaw is the foot's heading) in the odometry frame;
    pose 0 is the current support foot, the feet alternate, and pose 0's foot is inferred from the geometry:
    pose 1 to the LEFT of pose 0 (y > 0 in pose 0's yaw frame) -> pose 0 is the RIGHT foot, else the LEFT
    (:func:`footstep_plan_from_poses`);
  * foot forces: one ``geometry_msgs/WrenchStamped`` per foot on ``foot_wrench/<label>`` (:func:`foot_wrench_topics`:
    ``left`` / ``right`` for a biped, else the foot's name), as a foot force/torque sensor reports it:
    ``header.frame_id`` = the foot body's frame, ``wrench.force.z`` = the normal force [N] the ground exerts on the
    foot (>= 0, positive when the foot is loaded, along the sole's normal); the footstep node reads only
    ``force.z`` (:func:`foot_force_from_wrench`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from geometry_msgs.msg import Pose, PoseArray, PoseStamped, WrenchStamped
from nav_msgs.msg import Odometry, Path
from sensor_msgs.msg import Imu, JointState
from std_msgs.msg import Float32MultiArray, MultiArrayDimension

from sim2real.sim.rotations import (
    quat_mul, quat_rotate, quat_rotate_inverse, quat_wxyz_to_xyzw, quat_xyzw_to_wxyz,
)
from sim2real.tasks.state import RobotState

#: Largest accepted deviation of an odometry quaternion's norm from 1 (it is renormalised below this).
QUAT_NORM_TOLERANCE = 1e-2


@dataclass
class OdometrySample:
    """One odometry message in project conventions (float64 numpy arrays).

    Attributes:
        pos_w: base position in the world frame [m], ``[3]``.
        quat_w: body-to-world orientation (w, x, y, z), unit norm, ``[4]``.
        lin_vel_w: base linear velocity in the world frame [m/s], ``[3]``.
        ang_vel_b: base angular velocity in the body frame [rad/s], ``[3]``.
        frame_id: the world frame's name (``header.frame_id``).
    """

    pos_w: np.ndarray
    quat_w: np.ndarray
    lin_vel_w: np.ndarray
    ang_vel_b: np.ndarray
    frame_id: str = ""


def odometry_to_sample(msg: Odometry) -> OdometrySample | None:
    """Convert ``nav_msgs/Odometry`` (pose in the world frame, twist in the body frame) to project conventions.

    Returns None when any field is NaN/Inf or the quaternion's norm is off by more than
    :data:`QUAT_NORM_TOLERANCE` (the message must then be discarded).
    """
    p, o = msg.pose.pose.position, msg.pose.pose.orientation
    v, w = msg.twist.twist.linear, msg.twist.twist.angular
    raw = np.array([p.x, p.y, p.z, o.x, o.y, o.z, o.w, v.x, v.y, v.z, w.x, w.y, w.z], dtype=np.float64)
    if not np.isfinite(raw).all():
        return None
    quat_xyzw = torch.from_numpy(raw[3:7])
    norm = float(torch.linalg.vector_norm(quat_xyzw))
    if abs(norm - 1.0) > QUAT_NORM_TOLERANCE:
        return None
    quat_w = quat_xyzw_to_wxyz(quat_xyzw / norm)
    lin_vel_w = quat_rotate(quat_w, torch.from_numpy(raw[7:10]))
    return OdometrySample(raw[0:3].copy(), quat_w.numpy().copy(), lin_vel_w.numpy().copy(), raw[10:13].copy(),
                          msg.header.frame_id)


def goal_to_position(msg: PoseStamped) -> np.ndarray:
    """Goal position ``[3]`` m (world frame) of a ``geometry_msgs/PoseStamped`` (orientation unused)."""
    p = msg.pose.position
    return np.array([p.x, p.y, p.z], dtype=np.float64)


def robot_state(sample: OdometrySample, last_action: torch.Tensor, command: torch.Tensor) -> RobotState:
    """A batch-1 float32 :class:`RobotState` from one odometry sample.

    Args:
        sample: the latest valid odometry.
        last_action: the previous policy action ``[1, A]`` (normalised).
        command: the task command ``[1, C]`` (quadrotor-hover: goal position in the world frame [m]).
    """

    def t(x: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(x, dtype=torch.float32).reshape(1, -1)

    return RobotState(t(sample.pos_w), t(sample.quat_w), t(sample.lin_vel_w), t(sample.ang_vel_b),
                      last_action.reshape(1, -1).float(), command.reshape(1, -1).float())


def fill_odometry(msg: Odometry, pos_w, quat_w, lin_vel_w, ang_vel_b) -> Odometry:
    """Write a state into ``msg`` (pose in the world frame, twist in the body frame); returns ``msg``.

    Args: ``pos_w`` [3] m, ``quat_w`` [4] (w, x, y, z) body-to-world, ``lin_vel_w`` [3] m/s world frame,
    ``ang_vel_b`` [3] rad/s body frame (array-likes or tensors). Header and frame ids are left to the caller.
    """
    q = torch.as_tensor(quat_w, dtype=torch.float64).reshape(4)
    v_b = quat_rotate_inverse(q, torch.as_tensor(lin_vel_w, dtype=torch.float64).reshape(3))
    qx, qy, qz, qw = (float(x) for x in quat_wxyz_to_xyzw(q))
    pos = [float(x) for x in torch.as_tensor(pos_w).reshape(3)]
    w = [float(x) for x in torch.as_tensor(ang_vel_b).reshape(3)]
    pose = msg.pose.pose
    pose.position.x, pose.position.y, pose.position.z = pos
    pose.orientation.x, pose.orientation.y, pose.orientation.z, pose.orientation.w = qx, qy, qz, qw
    tw = msg.twist.twist
    tw.linear.x, tw.linear.y, tw.linear.z = (float(x) for x in v_b)
    tw.angular.x, tw.angular.y, tw.angular.z = w
    return msg


def fill_imu(msg: Imu, quat_w, ang_vel_b, specific_force_b) -> Imu:
    """Write an IMU sample into ``msg``: orientation (w, x, y, z -> ROS x, y, z, w), gyro [rad/s] and
    accelerometer (specific force, body frame) [m/s^2]; returns ``msg``."""
    q = torch.as_tensor(quat_w, dtype=torch.float64).reshape(4)
    msg.orientation.x, msg.orientation.y, msg.orientation.z, msg.orientation.w = (
        float(x) for x in quat_wxyz_to_xyzw(q))
    msg.angular_velocity.x, msg.angular_velocity.y, msg.angular_velocity.z = (
        float(x) for x in torch.as_tensor(ang_vel_b).reshape(3))
    msg.linear_acceleration.x, msg.linear_acceleration.y, msg.linear_acceleration.z = (
        float(x) for x in torch.as_tensor(specific_force_b).reshape(3))
    return msg


def command_to_message(command, names: list[str]) -> Float32MultiArray:
    """A command ``[4]`` (or ``[1, 4]``) as ``Float32MultiArray``; ``layout.dim[0].label`` = ``",".join(names)``."""
    values = [float(x) for x in torch.as_tensor(command).reshape(-1)]
    msg = Float32MultiArray()
    msg.layout.dim = [MultiArrayDimension(label=",".join(names), size=len(values), stride=len(values))]
    msg.data = values
    return msg


def command_from_message(msg: Float32MultiArray, size: int = 4) -> np.ndarray | None:
    """The command ``[size]`` (float64) of a ``Float32MultiArray``, or None if it has another length or NaN/Inf."""
    data = np.asarray(msg.data, dtype=np.float64).reshape(-1)
    if data.shape[0] != size or not np.isfinite(data).all():
        return None
    return data


# --- quadrotor swarm -----------------------------------------------------------------------------------------------
#: Values of the swarm's world message (``std_msgs/Float32MultiArray`` on ``<swarm_ns>/world``), in order [m].
WORLD_FIELDS = ("room_half", "room_height", "obstacle_radius", "drone_radius")


def obstacles_to_message(centers, frame_id: str = "world") -> PoseArray:
    """Column centres ``[C, 2]`` (x, y) [m] as ``geometry_msgs/PoseArray``: one pose per column at its axis on the
    floor ``(x, y, 0)``, identity orientation (columns are vertical cylinders from floor to ceiling; their radius
    is the world message's)."""
    msg = PoseArray()
    msg.header.frame_id = frame_id
    for x, y in torch.as_tensor(centers, dtype=torch.float64).reshape(-1, 2).tolist():
        pose = Pose()
        pose.position.x, pose.position.y = float(x), float(y)
        pose.orientation.w = 1.0
        msg.poses.append(pose)
    return msg


def obstacles_from_message(msg: PoseArray) -> torch.Tensor | None:
    """Column centres ``[C, 2]`` (float32, m) of an obstacle ``PoseArray``, or None when a position is NaN/Inf."""
    xy = np.array([[p.position.x, p.position.y] for p in msg.poses], dtype=np.float64).reshape(-1, 2)
    if not np.isfinite(xy).all():
        return None
    return torch.as_tensor(xy, dtype=torch.float32)


def world_to_message(room) -> Float32MultiArray:
    """The room's :data:`WORLD_FIELDS` (of a :class:`~sim2real.tasks.quadrotor_swarm.world.RoomSpec`) as
    ``Float32MultiArray`` (``layout.dim[0].label`` = the comma-joined field names)."""
    return command_to_message([float(getattr(room, f)) for f in WORLD_FIELDS], list(WORLD_FIELDS))


def world_from_message(msg: Float32MultiArray) -> dict[str, float] | None:
    """``{field: value}`` of a world message, or None if it has another length or NaN/Inf."""
    values = command_from_message(msg, len(WORLD_FIELDS))
    return None if values is None else dict(zip(WORLD_FIELDS, (float(v) for v in values)))


# --- legged robots -------------------------------------------------------------------------------------------------
#: Values of a jump command (``std_msgs/Float32MultiArray`` on ``jump_command``), in order.
JUMP_COMMAND_NAMES = ("dx", "dy", "dyaw", "obstacle_height", "obstacle_length")


class InvalidMessage(ValueError):
    """A message that must be discarded; the text says why (a missing joint, NaN/Inf, a non-unit quaternion)."""


@dataclass
class JointSample:
    """One ``sensor_msgs/JointState`` in the policy joint order (float64 ``[J]`` arrays).

    Attributes:
        pos: joint positions [rad]; vel: joint velocities [rad/s]; stamp_s: ``header.stamp`` [s].
    """

    pos: np.ndarray
    vel: np.ndarray
    stamp_s: float = 0.0


@dataclass
class ImuSample:
    """One ``sensor_msgs/Imu`` expressed for the BASE frame (float64 numpy arrays).

    Attributes:
        quat_w: base-to-world orientation (w, x, y, z), unit norm, ``[4]``.
        ang_vel_b: base angular velocity in the base frame [rad/s], ``[3]``.
    """

    quat_w: np.ndarray
    ang_vel_b: np.ndarray


class JointOrder:
    """Maps the joint lists of incoming ``JointState`` messages BY NAME to a fixed joint order (cached per name
    list, so a stream in one order costs one dict lookup per message after the first).

    Args:
        joint_names: the order wanted (the robot config's ``joint_names``, i.e. the policy order).
    """

    def __init__(self, joint_names: list[str]):
        self.joint_names = list(joint_names)
        self._cache_key: tuple[str, ...] | None = None
        self._cache: np.ndarray | None = None

    def indices(self, names) -> np.ndarray:
        """For each wanted joint, its index in the message's ``names``.

        Raises:
            InvalidMessage: a wanted joint is missing or named twice.
        """
        key = tuple(names)
        if key == self._cache_key:
            return self._cache
        where: dict[str, int] = {}
        for i, n in enumerate(key):
            if n in where:
                raise InvalidMessage(f"joint '{n}' listed twice")
            where[n] = i
        missing = [j for j in self.joint_names if j not in where]
        if missing:
            raise InvalidMessage(f"joint{'s' if len(missing) > 1 else ''} {', '.join(missing)} missing")
        self._cache_key, self._cache = key, np.array([where[j] for j in self.joint_names], dtype=np.int64)
        return self._cache

    def field(self, msg: JointState, field: str, required: bool = True) -> np.ndarray | None:
        """``msg.<field>`` (position, velocity or effort) in this order, float64 ``[J]``.

        Returns None for an empty field when not ``required``.

        Raises:
            InvalidMessage: a missing joint, a field whose length differs from ``msg.name`` (an empty required
                one included), or a NaN/Inf value of a wanted joint.
        """
        values = np.asarray(getattr(msg, field), dtype=np.float64)
        if values.size == 0 and not required:
            return None
        if values.shape[0] != len(msg.name):
            raise InvalidMessage(f"{field} has {values.shape[0]} values for {len(msg.name)} joint names")
        out = values[self.indices(msg.name)]
        if not np.isfinite(out).all():
            bad = [self.joint_names[i] for i in np.flatnonzero(~np.isfinite(out))]
            raise InvalidMessage(f"{field} of {', '.join(bad)} is NaN/Inf")
        return out


def stamp_seconds(stamp) -> float:
    """A ``builtin_interfaces/Time`` as seconds [s]."""
    return stamp.sec + 1e-9 * stamp.nanosec


def time_from_seconds(t: float):
    """Seconds [s] (>= 0) as a ``builtin_interfaces/Time``, to the nanosecond."""
    from builtin_interfaces.msg import Time

    ns = int(round(t * 1e9))
    return Time(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000)


def joint_state_to_sample(msg: JointState, order: JointOrder) -> JointSample:
    """Positions and velocities of ``msg`` in ``order`` (by name).

    Raises:
        InvalidMessage: a joint missing, a position or velocity absent or NaN/Inf (the message must be discarded).
    """
    return JointSample(order.field(msg, "position"), order.field(msg, "velocity"), stamp_seconds(msg.header.stamp))


def imu_to_sample(msg: Imu, imu_to_base_quat=None) -> ImuSample:
    """Base orientation and base-frame angular velocity of a ``sensor_msgs/Imu`` (see the module docstring).

    Args:
        msg: the IMU message (orientation x, y, z, w in the world frame; angular velocity in the IMU frame).
        imu_to_base_quat: ``q_bi`` (w, x, y, z), the IMU frame's orientation in the base frame; None: identity.

    Raises:
        InvalidMessage: NaN/Inf, no orientation estimate (``orientation_covariance[0] == -1``, the ROS
            convention), or a quaternion whose norm is off by more than :data:`QUAT_NORM_TOLERANCE`.
    """
    o, w = msg.orientation, msg.angular_velocity
    raw = np.array([o.x, o.y, o.z, o.w, w.x, w.y, w.z], dtype=np.float64)
    if not np.isfinite(raw).all():
        raise InvalidMessage("NaN/Inf")
    if msg.orientation_covariance[0] == -1.0:
        raise InvalidMessage("no orientation estimate (orientation_covariance[0] = -1)")
    q_xyzw = torch.from_numpy(raw[:4])
    norm = float(torch.linalg.vector_norm(q_xyzw))
    if abs(norm - 1.0) > QUAT_NORM_TOLERANCE:
        raise InvalidMessage(f"orientation quaternion of norm {norm:.4g}")
    q_wi = quat_xyzw_to_wxyz(q_xyzw / norm)
    w_i = torch.from_numpy(raw[4:7])
    if imu_to_base_quat is None:
        return ImuSample(q_wi.numpy().copy(), w_i.numpy().copy())
    q_bi = torch.as_tensor(imu_to_base_quat, dtype=torch.float64).reshape(4)
    q_bi = q_bi / torch.linalg.vector_norm(q_bi)
    q_ib = q_bi * torch.tensor([1.0, -1.0, -1.0, -1.0], dtype=torch.float64)
    q_wb = quat_mul(q_wi.unsqueeze(0), q_ib.unsqueeze(0))[0]
    q_wb = q_wb / torch.linalg.vector_norm(q_wb)
    return ImuSample(q_wb.numpy().copy(), quat_rotate(q_bi, w_i).numpy().copy())


def legged_robot_state(joints: JointSample, imu: ImuSample, default_pose, last_action: torch.Tensor,
                       command, time_s: float, odom: OdometrySample | None = None, phase=None) -> RobotState:
    """A batch-1 float32 :class:`RobotState` of a legged robot from its latest joint and IMU samples (and
    odometry, for policies that observe the base pose in the world frame).

    Without ``odom``: ``base_pos_w`` and ``base_lin_vel_w`` are zeros (not measured on board; the jump policy does
    not observe them) and ``base_quat_w`` is the IMU's. With ``odom``: ``base_pos_w``, ``base_quat_w`` and
    ``base_lin_vel_w`` are the odometry's (its frame: the frame footstep plans are given in); the angular
    velocity stays the IMU's (gyro, base frame). ``foot_contact`` is None.

    Args:
        joints, imu: the latest valid samples (policy joint order; base frame).
        default_pose: ``[J]`` rad, policy order.
        last_action: the previous policy action ``[1, A]``.
        command: the task command ``[C]`` (quadruped-jump: dx, dy, dyaw, obstacle height, obstacle length;
            humanoid-footsteps: the next two footsteps' x, y, z, yaw in the odometry frame).
        time_s: time since the command began [s] (``-inf`` before any command).
        odom: the latest valid odometry, or None.
        phase: gait clock phase ``[1]`` in [0, 1), or None.
    """

    def t(x) -> torch.Tensor:
        return torch.as_tensor(np.asarray(x, dtype=np.float64), dtype=torch.float32).reshape(1, -1)

    zeros3 = torch.zeros(1, 3)
    pos, quat, lin_vel = ((zeros3, t(imu.quat_w), zeros3.clone()) if odom is None
                          else (t(odom.pos_w), t(odom.quat_w), t(odom.lin_vel_w)))
    return RobotState(
        base_pos_w=pos, base_quat_w=quat, base_lin_vel_w=lin_vel, base_ang_vel_b=t(imu.ang_vel_b),
        last_action=torch.as_tensor(last_action).reshape(1, -1).float(), command=t(command),
        joint_pos=t(joints.pos), joint_vel=t(joints.vel), default_joint_pos=t(default_pose),
        foot_contact=None, time_s=torch.tensor([float(time_s)], dtype=torch.float32),
        phase=None if phase is None else torch.as_tensor(phase, dtype=torch.float32).reshape(1))


def joint_command_messages(names: list[str], targets, kp, kd) -> tuple[JointState, JointState]:
    """The ``(cmd/joint_targets, cmd/joint_gains)`` pair of one joint command (headers left to the caller).

    Args:
        names: joint names, in the order of the arrays.
        targets: position targets ``[J]`` [rad]; kp ``[J]`` [N m/rad]; kd ``[J]`` [N m s/rad].
    """
    n = len(names)

    def floats(x) -> list[float]:
        values = [float(v) for v in np.asarray(torch.as_tensor(x).detach().cpu(), dtype=np.float64).reshape(-1)]
        if len(values) != n:
            raise ValueError(f"{len(values)} values for {n} joints")
        return values

    target_msg = JointState(name=list(names), position=floats(targets), velocity=[0.0] * n, effort=[0.0] * n)
    gains_msg = JointState(name=list(names), position=floats(kp), velocity=floats(kd))
    return target_msg, gains_msg


def joint_targets_from_message(msg: JointState, order: JointOrder) -> np.ndarray:
    """Position targets ``[J]`` [rad] of a ``cmd/joint_targets`` message, in ``order`` (by name).

    Raises:
        InvalidMessage: a joint missing, or NaN/Inf.
    """
    return order.field(msg, "position")


def joint_gains_from_message(msg: JointState, order: JointOrder) -> tuple[np.ndarray, np.ndarray]:
    """``(kp [N m/rad], kd [N m s/rad])`` ``[J]`` each of a ``cmd/joint_gains`` message, in ``order`` (by name).

    Raises:
        InvalidMessage: a joint missing, NaN/Inf, or a negative gain.
    """
    kp, kd = order.field(msg, "position"), order.field(msg, "velocity")
    if (kp < 0).any() or (kd < 0).any():
        raise InvalidMessage("negative gain")
    return kp, kd


def fill_joint_state(msg: JointState, names: list[str], pos, vel, effort=None) -> JointState:
    """Write joint positions [rad], velocities [rad/s] and efforts [N m] (in the order of ``names``) into
    ``msg``; returns ``msg``."""
    msg.name = list(names)
    msg.position = np.asarray(pos, dtype=np.float64).reshape(-1)
    msg.velocity = np.asarray(vel, dtype=np.float64).reshape(-1)
    msg.effort = [] if effort is None else np.asarray(effort, dtype=np.float64).reshape(-1)
    return msg


# --- foot forces -------------------------------------------------------------------------------------------------
FOOT_WRENCH_TOPIC = "foot_wrench"


def foot_wrench_topics(foot_names: list[str]) -> list[str]:
    """``foot_wrench/<label>`` of each foot (robot config foot order), relative to the robot's namespace: labels
    ``left``, ``right`` for a biped (the footstep plans' foot codes 0 and 1), else the foot names lowercased."""
    labels = ["left", "right"] if len(foot_names) == 2 else [n.lower() for n in foot_names]
    return [f"{FOOT_WRENCH_TOPIC}/{label}" for label in labels]


def fill_foot_wrench(msg: WrenchStamped, normal_force: float, frame_id: str) -> WrenchStamped:
    """A foot's normal contact force [N] as a force/torque sensor's wrench in frame ``frame_id``: ``force.z`` =
    the force, the other components 0 (not measured); returns ``msg``."""
    msg.header.frame_id = frame_id
    msg.wrench.force.x = msg.wrench.force.y = 0.0
    msg.wrench.force.z = float(normal_force)
    msg.wrench.torque.x = msg.wrench.torque.y = msg.wrench.torque.z = 0.0
    return msg


def foot_force_from_wrench(msg: WrenchStamped) -> float:
    """The normal force [N] on a foot (``wrench.force.z``) of a foot sensor's ``WrenchStamped``.

    Raises:
        InvalidMessage: NaN/Inf (the message must be discarded).
    """
    f = float(msg.wrench.force.z)
    if not np.isfinite(f):
        raise InvalidMessage("NaN/Inf force")
    return f


# --- footstep plans -----------------------------------------------------------------------------------------------
def footstep_plan_from_poses(poses, limits=None):
    """A :class:`~sim2real.tasks.humanoid_footsteps.plans.FootstepPlan` (poses in the message's frame) from a
    sequence of ``geometry_msgs/Pose``.

    Pose k is step k: ``(x, y, z)`` = its position, yaw = the heading of its orientation (roll and pitch are
    ignored). Pose 0 is the current support foot; its foot is inferred from where pose 1 lies in pose 0's yaw
    frame (``y > 0``: pose 1 is the left foot, so pose 0 is the RIGHT foot; else pose 0 is the LEFT foot); the
    feet then alternate.

    Args:
        poses: ``geometry_msgs/Pose`` s.
        limits: :class:`~sim2real.tasks.humanoid_footsteps.plans.PlanLimits` (None: the defaults).

    Raises:
        InvalidMessage: fewer than 2 poses, a NaN/Inf, a quaternion whose norm is off by more than
            :data:`QUAT_NORM_TOLERANCE`, or a step :func:`~sim2real.tasks.humanoid_footsteps.plans.check_plan`
            refuses (too long, too wide, crossed feet, too much turn or height); the message says which.
    """
    from sim2real.tasks.humanoid_footsteps.plans import LEFT, RIGHT, FootstepPlan, check_plan

    poses = list(poses)
    if len(poses) < 2:
        raise InvalidMessage(f"{len(poses)} pose(s): a plan needs the support foot and at least one target")
    raw = np.array([[p.position.x, p.position.y, p.position.z, p.orientation.x, p.orientation.y,
                     p.orientation.z, p.orientation.w] for p in poses], dtype=np.float64)
    bad = np.flatnonzero(~np.isfinite(raw).all(axis=1))
    if len(bad):
        raise InvalidMessage(f"pose {int(bad[0])} has NaN/Inf")
    norms = np.linalg.norm(raw[:, 3:7], axis=1)
    off = np.flatnonzero(np.abs(norms - 1.0) > QUAT_NORM_TOLERANCE)
    if len(off):
        raise InvalidMessage(f"pose {int(off[0])} has an orientation quaternion of norm {norms[off[0]]:.4g}")
    x, y, z, w = (raw[:, 3 + k] / norms for k in range(4))
    yaw = np.arctan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))
    c, s = np.cos(yaw[0]), np.sin(yaw[0])
    lateral = -s * (raw[1, 0] - raw[0, 0]) + c * (raw[1, 1] - raw[0, 1])
    first = RIGHT if lateral > 0 else LEFT
    feet = (first + np.arange(len(poses))) % 2
    plan = FootstepPlan(feet, np.column_stack((raw[:, 0:3], yaw)), name="ros plan", mode="ros")
    problems = check_plan(plan, limits)
    if problems:
        raise InvalidMessage("; ".join(problems))
    return plan


def footstep_plan_from_path(msg: Path, limits=None):
    """``(plan, frame_id)`` of a ``nav_msgs/Path`` footstep plan (see :func:`footstep_plan_from_poses`).

    Raises:
        InvalidMessage: a pose whose own ``header.frame_id`` is set and differs from the path's, or see
            :func:`footstep_plan_from_poses`.
    """
    frame = msg.header.frame_id
    for k, p in enumerate(msg.poses):
        if p.header.frame_id and p.header.frame_id != frame:
            raise InvalidMessage(f"pose {k} is in frame '{p.header.frame_id}', the path in '{frame}'")
    return footstep_plan_from_poses([p.pose for p in msg.poses], limits), frame


def footstep_plan_from_pose_array(msg: PoseArray, limits=None):
    """``(plan, frame_id)`` of a ``geometry_msgs/PoseArray`` footstep plan (see :func:`footstep_plan_from_poses`).

    Raises:
        InvalidMessage: see :func:`footstep_plan_from_poses`.
    """
    return footstep_plan_from_poses(msg.poses, limits), msg.header.frame_id


def fill_footstep_poses(poses_out: list, steps) -> list:
    """Append one ``geometry_msgs/Pose`` per step ``(x, y, z, yaw)`` (``[S, 4]`` or ``[S, 5]`` with the foot
    code first) to ``poses_out``; returns it (the inverse of :func:`footstep_plan_from_poses`, for tests and
    planners)."""
    from geometry_msgs.msg import Pose

    steps = np.asarray(torch.as_tensor(steps).detach().cpu(), dtype=np.float64)
    steps = steps[:, -4:]
    for x, y, z, yaw in steps:
        p = Pose()
        p.position.x, p.position.y, p.position.z = float(x), float(y), float(z)
        p.orientation.z, p.orientation.w = float(np.sin(yaw / 2)), float(np.cos(yaw / 2))
        poses_out.append(p)
    return poses_out

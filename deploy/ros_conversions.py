"""The ROS boundary: ROS 2 messages <-> the project's arrays and :class:`~sim2real.tasks.state.RobotState`.

The one place where conventions change (both the deploy node and the stand-in robot use it):
  * quaternions: ROS messages carry (x, y, z, w), the project (w, x, y, z)
    (:func:`~sim2real.sim.rotations.quat_xyzw_to_wxyz` / ``quat_wxyz_to_xyzw``);
  * ``nav_msgs/Odometry``: pose in ``header.frame_id`` (the world frame), twist in ``child_frame_id`` (the body
    frame); :class:`RobotState` wants the linear velocity in the world frame: ``v_w = R(q) v_b``;
  * commands: ``std_msgs/Float32MultiArray`` of 4 values, ``layout.dim[0].label`` = comma-joined command names.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from geometry_msgs.msg import PoseStamped
from nav_msgs.msg import Odometry
from sensor_msgs.msg import Imu
from std_msgs.msg import Float32MultiArray, MultiArrayDimension

from sim2real.sim.rotations import quat_rotate, quat_rotate_inverse, quat_wxyz_to_xyzw, quat_xyzw_to_wxyz
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

"""The state struct: the seam between the world (a simulator or a robot's ROS topics) and the learning code.

Simulators fill it from their arrays, the deploy node from ``nav_msgs/Odometry`` (batch of 1); observation terms
read only from it, so training and deployment build observations with the same code.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class RobotState:
    """Batched robot state; every tensor is ``[N, ...]``.

    Attributes:
        base_pos_w: base position in the world frame [m], ``[N, 3]``.
        base_quat_w: base orientation, body-to-world, quaternion (w, x, y, z), ``[N, 4]``.
        base_lin_vel_w: base linear velocity in the world frame [m/s], ``[N, 3]``.
        base_ang_vel_b: base angular velocity in the body frame [rad/s], ``[N, 3]``.
        last_action: the policy's previous action (normalised, policy order), ``[N, A]``.
        command: the task command, ``[N, C]`` (for ``quadrotor-hover``: goal position in the world frame [m]).
        joint_pos: joint positions in policy order [rad], ``[N, J]``, or None for robots without joints.
        joint_vel: joint velocities in policy order [rad/s], ``[N, J]``, or None.
        default_joint_pos: the robot's default pose in policy order [rad], ``[N, J]``, or None.
        foot_contact: foot contact normal force [N], ``[N, F]`` in the robot config's ``foot_geoms`` order, or
            None where unmeasured (deploy).
        time_s: time since the episode (or, on a robot, the current command) began [s], ``[N]``, or None.
        phase: gait clock phase in [0, 1), ``[N]``, or None (footstep following: [0, 0.5) the left foot's step,
            [0.5, 1) the right foot's).
    """

    base_pos_w: torch.Tensor
    base_quat_w: torch.Tensor
    base_lin_vel_w: torch.Tensor
    base_ang_vel_b: torch.Tensor
    last_action: torch.Tensor
    command: torch.Tensor
    joint_pos: torch.Tensor | None = None
    joint_vel: torch.Tensor | None = None
    default_joint_pos: torch.Tensor | None = None
    foot_contact: torch.Tensor | None = None
    time_s: torch.Tensor | None = None
    phase: torch.Tensor | None = None

    @property
    def num_envs(self) -> int:
        return self.base_pos_w.shape[0]


# ---------------------------------------------------------------------------------------------------------------
# The robot's state estimate as a flat vector (what fine-tuning sessions record for system identification)

#: Version of the :func:`state_estimate` layout. A recording names it in its field labels (``state.v1``); a reader
#: refuses a version it does not know. Bump it whenever :func:`state_estimate_fields` changes.
STATE_ESTIMATE_VERSION = 1


def state_estimate_fields(num_joints: int = 0) -> list[tuple[str, int, str, str]]:
    """The layout of :func:`state_estimate` (version :data:`STATE_ESTIMATE_VERSION`): ``(name, size, unit,
    frame)`` in order. The base pose and twist (13 values), then, for a robot with ``num_joints`` > 0 joints, the
    joint positions and velocities in policy order (``2 J`` values)."""
    fields = [("base_pos_w", 3, "m", "world"), ("base_quat_w", 4, "unit quaternion (w, x, y, z)", "body to world"),
              ("base_lin_vel_w", 3, "m/s", "world"), ("base_ang_vel_b", 3, "rad/s", "body")]
    if num_joints:
        fields += [("joint_pos", int(num_joints), "rad", "joint"), ("joint_vel", int(num_joints), "rad/s", "joint")]
    return fields


def state_estimate_dim(num_joints: int = 0) -> int:
    """Width of :func:`state_estimate`: 13, plus ``2 J`` for a robot with joints."""
    return 13 + 2 * int(num_joints)


def state_estimate(state: RobotState) -> torch.Tensor:
    """The state a robot's estimator gives, flattened: ``[N, 13 (+ 2 J)]`` float32 in the order of
    :func:`state_estimate_fields` (base position [m] and orientation (w, x, y, z) body-to-world, linear velocity
    [m/s] in the world frame, angular velocity [rad/s] in the body frame, then joint positions [rad] and velocities
    [rad/s] in policy order when the state has them)."""
    parts = [state.base_pos_w, state.base_quat_w, state.base_lin_vel_w, state.base_ang_vel_b]
    if state.joint_pos is not None:
        parts += [state.joint_pos, state.joint_vel]
    return torch.cat([p.reshape(p.shape[0], -1).float() for p in parts], dim=-1)

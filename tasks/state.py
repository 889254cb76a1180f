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

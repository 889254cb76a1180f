"""Reward terms of ``quadruped-jump`` (no reference trajectories): landing accuracy, flight, height, upright,
stillness before the command and after landing, smoothness and torque.

Each term is ``[N]``; the env multiplies it by its weight (``rewards.<name>``) and, except for the terms in
:data:`ONCE`, by the control period.
"""

from __future__ import annotations

import torch

from sim2real.sim.rotations import wrap_angle, yaw_from_quat
from sim2real.tasks.state import RobotState

TERMS_PLACEHOLDER = True
REWARD_TERMS = ("position", "yaw", "flight", "height", "rise", "land_still", "wait_still", "upright", "action_rate",
                "torque", "joint_vel", "success", "termination")
#: Terms paid once per episode (not multiplied by the control period).
ONCE = ("success", "termination")
#: Window after the command's start [s] in which flight and height are rewarded.
TAKEOFF_WINDOW_S = 0.8
#: Time after the command's start [s] from which standing still is rewarded.
SETTLE_AFTER_S = 1.2


def compute(env, state: RobotState, fall: torch.Tensor, tilt: torch.Tensor) -> dict[str, torch.Tensor]:
    """Every term of :data:`REWARD_TERMS` but ``success`` (the env sets it at time-out)."""
    t = state.time_s
    started = (t > 0).float()
    window = ((t > 0) & (t < TAKEOFF_WINDOW_S)).float()
    settle = (t > SETTLE_AFTER_S).float()
    waiting = (t <= 0).float()
    pos_err = torch.linalg.vector_norm(state.base_pos_w[:, :2] - env.target_xy, dim=-1)
    yaw_err = wrap_angle(yaw_from_quat(state.base_quat_w) - env.target_yaw).abs()
    airborne = (state.foot_contact < 1.0).all(-1).float()
    height = (state.base_pos_w[:, 2] - env.settled_height).clamp(0.0, 0.4)
    rise = state.base_lin_vel_w[:, 2].clamp(0.0, 3.0)
    speed2 = state.base_lin_vel_w.square().sum(-1) + 0.1 * state.base_ang_vel_b.square().sum(-1)
    pose2 = (state.joint_pos - state.default_joint_pos).square().sum(-1)
    gravity_xy2 = torch.sin(tilt).square()
    torque = env.sim.joint_torque()
    return {
        "position": started * torch.exp(-pos_err / 0.25),
        "yaw": started * torch.exp(-yaw_err / 0.3),
        "flight": window * airborne,
        "height": window * airborne * height,  # only in flight: standing tall on extended legs is not a jump
        "rise": window * rise,
        "land_still": settle * torch.exp(-speed2),
        "wait_still": waiting * torch.exp(-speed2 - pose2),
        "upright": gravity_xy2,
        "action_rate": (state.last_action - env.last_actions).square().sum(-1),
        "torque": torque.square().sum(-1),
        "joint_vel": state.joint_vel.square().sum(-1),
        "termination": fall.float(),
    }


TERMS = dict.fromkeys(REWARD_TERMS)

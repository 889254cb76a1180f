"""Reward terms of ``humanoid-footsteps`` (no reference motions; after Singh et al., "Learning bipedal walking on
planned footsteps for humanoid robots"): foot placement at touchdown, a dense pull of the swing foot to its target,
foot force, swing height and foot-velocity shaping consistent with the gait clock, body progress and heading along
the plan,
upright torso, base height, survival, and smoothness / energy penalties.

Each term is a plain function of :class:`FootstepRewardInputs` and ``rewards.params`` returning ``[N]``; the env
multiplies it by its weight (``rewards.weights.<name>``) and, except for the terms in
:data:`ONCE`, by the control period.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sim2real.sim.rotations import quat_rotate_inverse, wrap_angle, yaw_from_quat
from sim2real.tasks.rewards import compute_terms

TERMS_PLACEHOLDER = True
#: Terms paid once per event (not multiplied by the control period).
ONCE = ("footstep", "termination")


@dataclass
class FootstepRewardInputs:
    """What the footstep reward terms read, batched ``[N]`` (world frame, SI units).

    Attributes:
        state: the robot state after the step.
        foot_pos_w: ``[N, 2, 3]`` foot points (left, right) [m]; ``foot_contact``: ``[N, 2]`` contact forces [N];
            ``prev_foot_pos_w``: ``[N, 2, 3]`` the foot points one control step earlier.
        target, support: ``[N, 5]`` the target and support footsteps (foot code, x, y, z [m], yaw [rad]).
        t_step: ``[N]`` time into the current step window [s]; ``step_period``: its length [s] (``[N]`` or scalar).
        swing_fraction: the leading share of a step window the target foot swings.
        robot_weight: [N] the robot's weight force; ``foot_point_height``: foot point above the sole [m];
            ``nominal_height_above_feet``: pelvis height above the feet standing [m]; ``foot_offset_x``: the feet
            midpoint's offset ahead of the pelvis [m].
        control_dt: control period [s].
        torque: ``[N, J]`` joint torques [N m]; ``actions``, ``last_actions``: ``[N, A]`` this and the previous
            action.
        touchdown_score: ``[N]`` placement score ``exp(-d/0.1) exp(-|dyaw|/0.2)`` of a touchdown of the target foot
            this step (0 when none); ``fall``: ``[N]`` bool, the episode ends on a fall this step.
    """

    state: object
    foot_pos_w: torch.Tensor
    foot_contact: torch.Tensor
    prev_foot_pos_w: torch.Tensor
    target: torch.Tensor
    support: torch.Tensor
    t_step: torch.Tensor
    step_period: torch.Tensor | float
    swing_fraction: float
    robot_weight: float
    foot_point_height: float
    nominal_height_above_feet: float
    foot_offset_x: float
    control_dt: float
    torque: torch.Tensor
    actions: torch.Tensor
    last_actions: torch.Tensor
    touchdown_score: torch.Tensor
    fall: torch.Tensor


def _rows(x: FootstepRewardInputs) -> torch.Tensor:
    return torch.arange(x.target.shape[0], device=x.target.device)


def _expect_air(x: FootstepRewardInputs) -> torch.Tensor:
    """``[N, 2]`` bool: the gait clock expects the foot in the air (the target foot, for the leading swing_fraction
    of its window; Singh et al.'s clock)."""
    foot = x.target[:, 0].long()
    in_swing = x.t_step < x.swing_fraction * x.step_period
    expect = torch.zeros(x.target.shape[0], 2, dtype=torch.bool, device=x.target.device)
    expect[_rows(x), foot] = in_swing
    return expect


def footstep(x: FootstepRewardInputs, p: dict) -> torch.Tensor:
    """The touchdown placement score (paid once per touchdown of the target foot)."""
    return x.touchdown_score


def foot_target(x: FootstepRewardInputs, p: dict) -> torch.Tensor:
    """``exp(-|swing foot xy - target xy| / 0.25)``."""
    swing_xy = x.foot_pos_w[..., :2][_rows(x), x.target[:, 0].long()]
    return torch.exp(-torch.linalg.vector_norm(swing_xy - x.target[:, 1:3], dim=-1) / 0.25)


def clock_force(x: FootstepRewardInputs, p: dict) -> torch.Tensor:
    """Per foot (mean): ``1 - load`` while the clock expects it in the air, ``load`` while in stance, ``load`` = its
    contact force over half the robot's weight in [0, 1]. Continuous in the force, so shifting the weight onto the
    stance foot already pays before the swing foot lifts."""
    load = (x.foot_contact / (0.5 * x.robot_weight)).clamp(0.0, 1.0)
    return torch.where(_expect_air(x), 1.0 - load, load).mean(-1)


def swing_height(x: FootstepRewardInputs, p: dict) -> torch.Tensor:
    """Swing foot height above its target's ground / 0.08 m, clipped to [0, 1], while the clock expects it up."""
    ground = x.target[:, 3].unsqueeze(-1)
    lift = ((x.foot_pos_w[..., 2] - x.foot_point_height - ground) / 0.08).clamp(0.0, 1.0)
    return (lift * _expect_air(x).float()).sum(-1)


def stance_foot_vel(x: FootstepRewardInputs, p: dict) -> torch.Tensor:
    """``|xy velocity|^2`` [m^2/s^2] of the feet the clock says are in stance."""
    foot_vel = (x.foot_pos_w[..., :2] - x.prev_foot_pos_w[..., :2]) / x.control_dt
    return ((foot_vel ** 2).sum(-1) * (~_expect_air(x)).float()).sum(-1)


def base_progress(x: FootstepRewardInputs, p: dict) -> torch.Tensor:
    """``exp(-|feet midpoint under the pelvis - midpoint of the support and target footsteps| / 0.25)``."""
    yaw = yaw_from_quat(x.state.base_quat_w)
    c, sn = torch.cos(yaw), torch.sin(yaw)
    ox = x.foot_offset_x
    body_xy = x.state.base_pos_w[:, :2] + torch.stack((c * ox, sn * ox), dim=-1)
    mid = 0.5 * (x.support[:, 1:3] + x.target[:, 1:3])
    return torch.exp(-torch.linalg.vector_norm(body_xy - mid, dim=-1) / 0.25)


def heading(x: FootstepRewardInputs, p: dict) -> torch.Tensor:
    """``exp(-|pelvis yaw - mean yaw of the support and target footsteps| / 0.3)``."""
    yaw = yaw_from_quat(x.state.base_quat_w)
    mean_yaw = x.support[:, 4] + 0.5 * wrap_angle(x.target[:, 4] - x.support[:, 4])
    return torch.exp(-wrap_angle(yaw - mean_yaw).abs() / 0.3)


def upright(x: FootstepRewardInputs, p: dict) -> torch.Tensor:
    """``exp(-10 |projected gravity xy|^2)``."""
    n = x.target.shape[0]
    g = quat_rotate_inverse(x.state.base_quat_w, torch.tensor([0.0, 0.0, -1.0], device=x.target.device).expand(n, 3))
    return torch.exp(-10.0 * (g[:, :2] ** 2).sum(-1))


def base_height(x: FootstepRewardInputs, p: dict) -> torch.Tensor:
    """``exp(-((pelvis height above the lower foot - nominal) / 0.05)^2)``."""
    height = x.state.base_pos_w[:, 2] - x.foot_pos_w[..., 2].min(-1).values
    return torch.exp(-((height - x.nominal_height_above_feet) / 0.05) ** 2)


def alive(x: FootstepRewardInputs, p: dict) -> torch.Tensor:
    """1 per step."""
    return torch.ones(x.target.shape[0], device=x.target.device)


def action_rate(x: FootstepRewardInputs, p: dict) -> torch.Tensor:
    """``|a_t - a_{t-1}|^2``."""
    return ((x.actions - x.last_actions) ** 2).sum(-1)


def torque(x: FootstepRewardInputs, p: dict) -> torch.Tensor:
    """``|tau|^2`` [N^2 m^2]."""
    return (x.torque ** 2).sum(-1)


def joint_vel(x: FootstepRewardInputs, p: dict) -> torch.Tensor:
    """``|dq|^2`` [rad^2/s^2]."""
    return (x.state.joint_vel ** 2).sum(-1)


def termination(x: FootstepRewardInputs, p: dict) -> torch.Tensor:
    """1 on a fall or body contact (paid once)."""
    return x.fall.float()


TERMS = {"footstep": footstep, "foot_target": foot_target, "clock_force": clock_force, "swing_height": swing_height,
         "stance_foot_vel": stance_foot_vel, "base_progress": base_progress, "heading": heading, "upright": upright,
         "base_height": base_height, "alive": alive, "action_rate": action_rate, "torque": torque,
         "joint_vel": joint_vel, "termination": termination}


def compute(x: FootstepRewardInputs, params: dict) -> dict[str, torch.Tensor]:
    """Every term of :data:`TERMS` ``{name: [N]}`` (unweighted)."""
    return compute_terms(TERMS, x, params)

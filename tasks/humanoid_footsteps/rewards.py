"""Reward terms of ``humanoid-footsteps`` (no reference motions; after Singh et al., "Learning bipedal walking on
planned footsteps for humanoid robots"): foot placement at touchdown, a dense pull of the swing foot to its target,
foot force, swing height and foot-velocity shaping consistent with the gait clock, body progress and heading along
the plan,
upright torso, base height, survival, and smoothness / energy penalties.

Each term is ``[N]``; the env multiplies it by its weight (``rewards.<name>``) and, except for the terms in
:data:`ONCE`, by the control period.
"""

from __future__ import annotations

import torch

from sim2real.sim.rotations import quat_rotate_inverse, wrap_angle, yaw_from_quat

TERMS_PLACEHOLDER = True
REWARD_TERMS = ("footstep", "foot_target", "clock_force", "swing_height", "stance_foot_vel", "base_progress", "heading",
                "upright", "base_height", "alive", "action_rate", "torque", "joint_vel", "termination")
#: Terms paid once per event (not multiplied by the control period).
ONCE = ("footstep", "termination")


def compute(env, state, touchdown_score: torch.Tensor, fall: torch.Tensor) -> dict[str, torch.Tensor]:
    """Every term of :data:`REWARD_TERMS` for the env's current state.

    Args:
        env: the :class:`~sim2real.tasks.humanoid_footsteps.env.HumanoidFootstepsEnv`.
        state: its :class:`~sim2real.tasks.state.RobotState`.
        touchdown_score: ``[N]`` placement score ``exp(-d/0.1) exp(-|dyaw|/0.2)`` of a touchdown of the target
            foot this step (0 when none).
        fall: ``[N]`` bool, the episode ends on a fall this step.
    """
    tr, s = env.tracker, env._state
    target, support = tr.target(), tr.support()
    foot = target[:, 0].long()                                   # [N] the swing foot's code
    feet_xy = s["foot_pos_w"][..., :2]                           # [N, 2, 2]
    rows = torch.arange(env.num_envs, device=env.device)
    swing_xy = feet_xy[rows, foot]
    foot_target = torch.exp(-torch.linalg.vector_norm(swing_xy - target[:, 1:3], dim=-1) / 0.25)

    # Gait clock (Singh et al.'s clock-based foot force terms): the target foot is expected in the air for the
    # leading swing_fraction of its window, unloaded; the other foot carries the weight. Continuous in the contact
    # force, so shifting the weight onto the stance foot already pays before the swing foot lifts.
    in_swing = tr.t_step < env.swing_fraction * tr.step_period   # [N]
    expect_air = torch.zeros(env.num_envs, 2, dtype=torch.bool, device=env.device)
    expect_air[rows, foot] = in_swing
    load = (s["foot_contact"] / (0.5 * env.robot_weight)).clamp(0.0, 1.0)          # [N, 2], 1 = half the weight
    clock_force = torch.where(expect_air, 1.0 - load, load).mean(-1)
    ground = target[:, 3].unsqueeze(-1)
    lift = ((s["foot_pos_w"][..., 2] - env.foot_point_height - ground) / 0.08).clamp(0.0, 1.0)  # [N, 2]
    swing_height = (lift * expect_air.float()).sum(-1)
    foot_vel = (s["foot_pos_w"][..., :2] - env.prev_foot_pos[..., :2]) / env.control_dt
    stance_foot_vel = ((foot_vel ** 2).sum(-1) * (~expect_air).float()).sum(-1)

    # Body: over the midpoint of the support and target footsteps, heading their mean yaw.
    yaw = yaw_from_quat(state.base_quat_w)
    c, sn = torch.cos(yaw), torch.sin(yaw)
    ox = env.foot_offset_x                                        # feet midpoint lies ox ahead of the pelvis
    body_xy = state.base_pos_w[:, :2] + torch.stack((c * ox, sn * ox), dim=-1)
    mid = 0.5 * (support[:, 1:3] + target[:, 1:3])
    base_progress = torch.exp(-torch.linalg.vector_norm(body_xy - mid, dim=-1) / 0.25)
    mean_yaw = support[:, 4] + 0.5 * wrap_angle(target[:, 4] - support[:, 4])
    heading = torch.exp(-wrap_angle(yaw - mean_yaw).abs() / 0.3)

    g = quat_rotate_inverse(state.base_quat_w, torch.tensor([0.0, 0.0, -1.0], device=env.device)
                            .expand(env.num_envs, 3))
    upright = torch.exp(-10.0 * (g[:, :2] ** 2).sum(-1))
    height = state.base_pos_w[:, 2] - s["foot_pos_w"][..., 2].min(-1).values
    base_height = torch.exp(-((height - env.nominal_height_above_feet) / 0.05) ** 2)

    torque = env.sim.joint_torque().to(env.device)
    return {
        "footstep": touchdown_score,
        "foot_target": foot_target,
        "clock_force": clock_force,
        "swing_height": swing_height,
        "stance_foot_vel": stance_foot_vel,
        "base_progress": base_progress,
        "heading": heading,
        "upright": upright,
        "base_height": base_height,
        "alive": torch.ones(env.num_envs, device=env.device),
        "action_rate": ((env.actions - env.last_actions) ** 2).sum(-1),
        "torque": (torque ** 2).sum(-1),
        "joint_vel": (state.joint_vel ** 2).sum(-1),
        "termination": fall.float(),
    }


TERMS = dict.fromkeys(REWARD_TERMS)

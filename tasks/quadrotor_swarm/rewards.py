"""Reward terms of ``quadrotor-swarm``; each returns an unweighted ``[N]`` tensor (one row per drone).

The env multiplies each term by its weight from ``rewards`` and by the control period, except the
:data:`EVENT_TERMS`, which are paid once per new contact; :data:`SCHEDULED_PENALTIES` are also multiplied by the
curriculum's collision-penalty scale (annealed in, as in Huang et al. 2024).
"""

from __future__ import annotations

import torch

from sim2real.sim.rotations import quat_to_rotmat
from sim2real.tasks.quadrotor_swarm.world import min_column_clearance

TERMS_PLACEHOLDER = True
REWARD_TERMS = ("distance", "goal", "proximity", "obstacle_proximity", "collision_drone", "collision_obstacle",
                "collision_floor", "speed_limit", "lin_vel", "ang_vel", "tilt", "action_rate")
EVENT_TERMS = ("collision_drone", "collision_obstacle", "collision_floor")
SCHEDULED_PENALTIES = ("proximity", "obstacle_proximity", "collision_drone", "collision_obstacle", "collision_floor")


def compute(env, state, pos_err: torch.Tensor, new_drone: torch.Tensor, new_obstacle: torch.Tensor,
            new_boundary: torch.Tensor) -> dict[str, torch.Tensor]:
    """Unweighted reward terms ``{name: [N]}`` of the current step.

    Args:
        env: the :class:`~sim2real.tasks.quadrotor_swarm.env.QuadrotorSwarmEnv`.
        state: its :class:`RobotState`.
        pos_err: ``[N]`` distance to the goal [m].
        new_drone, new_obstacle, new_boundary: ``[N]`` new contacts this step (drone-drone count, column, floor /
            wall / ceiling).
    """
    w = env.cfg["rewards"]["params"]
    pos = env.room_view(state.base_pos_w)
    d = torch.cdist(pos, pos)
    m = pos.shape[1]
    d = d + torch.eye(m, device=d.device) * 1e3
    near = (1.0 - d / w["proximity_radius"]).clamp_min(0.0).sum(-1).reshape(-1)
    clearance = min_column_clearance(pos, env.centers, env.occupied, env.room).reshape(-1)
    r_zz = quat_to_rotmat(state.base_quat_w)[:, 2, 2]
    speed = torch.linalg.vector_norm(state.base_lin_vel_w, dim=-1)
    return {
        "distance": pos_err,
        "goal": torch.exp(-pos_err / w["goal_scale"]),
        "proximity": near,
        "obstacle_proximity": (1.0 - clearance / w["obstacle_margin"]).clamp(0.0, 1.0),
        "collision_drone": new_drone,
        "collision_obstacle": new_obstacle,
        "collision_floor": new_boundary,
        "speed_limit": (speed - w["max_speed"]).clamp_min(0.0).square(),
        "lin_vel": torch.sum(torch.square(state.base_lin_vel_w), dim=-1),
        "ang_vel": torch.sum(torch.square(state.base_ang_vel_b), dim=-1),
        "tilt": 1.0 - r_zz,
        "action_rate": torch.sum(torch.square(env.actions - env.last_actions), dim=-1),
    }


TERMS = dict.fromkeys(REWARD_TERMS)

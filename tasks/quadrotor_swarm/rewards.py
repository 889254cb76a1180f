"""Reward terms of ``quadrotor-swarm``, plain functions of :class:`SwarmRewardInputs` and ``rewards.params``; each
returns an unweighted ``[N]`` tensor (one row per drone).

The env multiplies each term by its weight from ``rewards.weights`` and by the control period, except the
:data:`EVENT_TERMS`, which are paid once per new contact; :data:`SCHEDULED_PENALTIES` are also multiplied by the
curriculum's collision-penalty scale (annealed in, as in Huang et al. 2024).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sim2real.tasks.rewards import action_rate_l2, ang_vel_l2, compute_terms, lin_vel_l2, tilt

TERMS_PLACEHOLDER = True
EVENT_TERMS = ("collision_drone", "collision_obstacle", "collision_floor")
SCHEDULED_PENALTIES = ("proximity", "obstacle_proximity", "collision_drone", "collision_obstacle", "collision_floor")


@dataclass
class SwarmRewardInputs:
    """What the swarm's reward terms read; one row per drone, ``[N]`` = rooms x drones per room.

    Attributes:
        state: the drones' robot states after the step (world frame).
        room_pos_w: ``[R, M, 3]`` drone positions per room [m] (the rows of ``state`` grouped by room).
        clearance: ``[N]`` surface-to-surface distance to the nearest column [m].
        actions, last_actions: ``[N, A]`` this and the previous action.
        pos_err: ``[N]`` distance to the goal [m].
        new_drone, new_obstacle, new_boundary: ``[N]`` new contacts this step (drone-drone count, column, floor /
            wall / ceiling).
    """

    state: object
    room_pos_w: torch.Tensor
    clearance: torch.Tensor
    actions: torch.Tensor
    last_actions: torch.Tensor
    pos_err: torch.Tensor
    new_drone: torch.Tensor
    new_obstacle: torch.Tensor
    new_boundary: torch.Tensor


def distance(x: SwarmRewardInputs, p: dict) -> torch.Tensor:
    """``|p - goal|`` [m]."""
    return x.pos_err


def goal(x: SwarmRewardInputs, p: dict) -> torch.Tensor:
    """``exp(-|p - goal| / goal_scale)``."""
    return torch.exp(-x.pos_err / p["goal_scale"])


def proximity(x: SwarmRewardInputs, p: dict) -> torch.Tensor:
    """Sum over the drones of the room closer than ``proximity_radius`` of ``1 - d / proximity_radius``."""
    d = torch.cdist(x.room_pos_w, x.room_pos_w)
    m = x.room_pos_w.shape[1]
    d = d + torch.eye(m, device=d.device) * 1e3
    return (1.0 - d / p["proximity_radius"]).clamp_min(0.0).sum(-1).reshape(-1)


def obstacle_proximity(x: SwarmRewardInputs, p: dict) -> torch.Tensor:
    """``max(0, 1 - clearance / obstacle_margin)`` to the nearest column."""
    return (1.0 - x.clearance / p["obstacle_margin"]).clamp(0.0, 1.0)


def collision_drone(x: SwarmRewardInputs, p: dict) -> torch.Tensor:
    """New drone-drone contacts this step (paid once each)."""
    return x.new_drone


def collision_obstacle(x: SwarmRewardInputs, p: dict) -> torch.Tensor:
    """New column contacts this step."""
    return x.new_obstacle


def collision_floor(x: SwarmRewardInputs, p: dict) -> torch.Tensor:
    """New floor, wall or ceiling contacts this step."""
    return x.new_boundary


def speed_limit(x: SwarmRewardInputs, p: dict) -> torch.Tensor:
    """``max(0, |v| - max_speed)^2`` [m^2/s^2]."""
    speed = torch.linalg.vector_norm(x.state.base_lin_vel_w, dim=-1)
    return (speed - p["max_speed"]).clamp_min(0.0).square()


TERMS = {"distance": distance, "goal": goal, "proximity": proximity, "obstacle_proximity": obstacle_proximity,
         "collision_drone": collision_drone, "collision_obstacle": collision_obstacle,
         "collision_floor": collision_floor, "speed_limit": speed_limit, "lin_vel": lin_vel_l2,
         "ang_vel": ang_vel_l2, "tilt": tilt, "action_rate": action_rate_l2}


def compute(x: SwarmRewardInputs, params: dict) -> dict[str, torch.Tensor]:
    """Every term of :data:`TERMS` ``{name: [N]}`` (unweighted)."""
    return compute_terms(TERMS, x, params)

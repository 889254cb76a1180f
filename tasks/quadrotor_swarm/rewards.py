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

EVENT_TERMS = ("collision_drone", "collision_obstacle", "collision_floor")
SCHEDULED_PENALTIES = ("proximity", "obstacle_proximity", "approach_drone", "approach_obstacle", "collision_drone",
                       "collision_obstacle", "collision_floor")


@dataclass
class SwarmRewardInputs:
    """What the swarm's reward terms read; one row per drone, ``[N]`` = rooms x drones per room.

    Attributes:
        state: the drones' robot states after the step (world frame).
        room_pos_w: ``[R, M, 3]`` drone positions per room [m] (the rows of ``state`` grouped by room).
        clearance: ``[N]`` surface-to-surface distance to the nearest column [m].
        room_vel_w: ``[R, M, 3]`` drone velocities per room [m/s], world frame.
        column_normal: ``[N, 2]`` unit horizontal direction from the nearest column's axis to the drone.
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
    room_vel_w: torch.Tensor | None = None
    column_normal: torch.Tensor | None = None


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


def approach_drone(x: SwarmRewardInputs, p: dict) -> torch.Tensor:
    """Sum over the drones of the room closer than ``proximity_radius`` of ``max(0, closing speed) * (1 - d /
    proximity_radius)`` [m/s]: closing speed ``-(v_i - v_j) . (p_i - p_j) / d``. Unlike :func:`proximity` it sees a
    collision coming (two drones passing each other at 0.3 m pay nothing; two closing at 1 m/s pay before they
    touch) and is zero for drones holding still side by side (a formation)."""
    rel = x.room_pos_w.unsqueeze(2) - x.room_pos_w.unsqueeze(1)  # [R, i, j, 3]: i relative to j
    d = torch.linalg.vector_norm(rel, dim=-1)
    m = x.room_pos_w.shape[1]
    d = d + torch.eye(m, device=d.device) * 1e3
    rel_vel = x.room_vel_w.unsqueeze(2) - x.room_vel_w.unsqueeze(1)
    closing = (-(rel_vel * rel).sum(-1) / d).clamp_min(0.0)
    return (closing * (1.0 - d / p["proximity_radius"]).clamp_min(0.0)).sum(-1).reshape(-1)


def approach_obstacle(x: SwarmRewardInputs, p: dict) -> torch.Tensor:
    """``max(0, speed towards the nearest column) * max(0, 1 - clearance / obstacle_margin)`` [m/s] (horizontal
    speed along the direction to the column's axis)."""
    toward = (-(x.state.base_lin_vel_w[:, :2] * x.column_normal).sum(-1)).clamp_min(0.0)
    return toward * (1.0 - x.clearance / p["obstacle_margin"]).clamp(0.0, 1.0)


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
         "approach_drone": approach_drone, "approach_obstacle": approach_obstacle,
         "collision_drone": collision_drone, "collision_obstacle": collision_obstacle,
         "collision_floor": collision_floor, "speed_limit": speed_limit, "lin_vel": lin_vel_l2,
         "ang_vel": ang_vel_l2, "tilt": tilt, "action_rate": action_rate_l2}


def compute(x: SwarmRewardInputs, params: dict) -> dict[str, torch.Tensor]:
    """Every term of :data:`TERMS` ``{name: [N]}`` (unweighted)."""
    return compute_terms(TERMS, x, params)

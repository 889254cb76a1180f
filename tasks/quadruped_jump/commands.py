"""Jump commands per curriculum stage (Atanassov et al.: in-place -> forward/diagonal -> over obstacles).

A command is ``[dx, dy, dyaw, obstacle_height, obstacle_length]``: the landing target relative to the start
position in the robot's start heading frame [m], the landing yaw change [rad], and the obstacle's height and
length along the jump [m] (zeros when there is none). The obstacle stands across the jump direction, its near face
``command.obstacle_near_edge`` ahead of the start (clear of the robot's front at the reset; configs saved before
that key existed placed it midway along the jump).
"""

from __future__ import annotations

import math

import torch


def entry_distance_min(cfg: dict) -> float:
    """Stage 2's lower distance bound [m] at level 0: ``distance_min_start``, or ``distance_min`` when that is null
    (a fixed lower bound, as before the key existed)."""
    start = cfg.get("distance_min_start")
    return float(cfg["distance_min"] if start is None else start)


def sample_commands(stage: torch.Tensor, level: torch.Tensor, cfg: dict) -> torch.Tensor:
    """Commands ``[M, 5]`` for envs at 0-based ``stage`` ``[M]`` (0 in place, 1 distance, 2 obstacle) and
    ``level`` ``[M]`` in [0, 1] (``cfg``: the task's ``command`` section). A distance jump's commanded distance
    [m] is uniform between a lower bound growing from ``distance_min_start`` to ``distance_min`` and an upper bound
    growing from ``distance_start`` to ``distance_max`` with the level."""
    m, dev = stage.shape[0], stage.device
    u = lambda lo, hi: lo + (hi - lo) * torch.rand(m, device=dev)  # noqa: E731
    cmd = torch.zeros(m, 5, device=dev)
    # Stage 2: both distance bounds grow with the level (lower: distance_min_start -> distance_min, upper:
    # distance_start -> distance_max); direction up to diagonal; yaw change grows too.
    entry = entry_distance_min(cfg)
    low = entry + (cfg["distance_min"] - entry) * level
    reach = cfg["distance_start"] + (cfg["distance_max"] - cfg["distance_start"]) * level
    dist = low + (reach - low).clamp_min(0.0) * torch.rand(m, device=dev)
    lo, hi = cfg["obstacle_distance"]
    dist = torch.where(stage == 2, u(lo, hi), dist)
    direction = u(-1.0, 1.0) * cfg["diagonal_max"] * torch.where(stage == 2, 0.0, 1.0)
    jumping = stage >= 1
    cmd[:, 0] = torch.where(jumping, dist * torch.cos(direction), 0.0)
    cmd[:, 1] = torch.where(jumping, dist * torch.sin(direction), 0.0)
    cmd[:, 2] = torch.where(stage == 1, u(-1.0, 1.0) * cfg["yaw_max"] * level, 0.0)
    obstacle = stage == 2
    lo, hi = cfg["obstacle_length"]
    cmd[:, 3] = torch.where(obstacle, cfg["obstacle_height_max"] * level, 0.0)
    cmd[:, 4] = torch.where(obstacle & (cmd[:, 3] > 0), u(lo, hi), 0.0)
    return cmd


def landing_commands(params: torch.Tensor) -> torch.Tensor:
    """Commands ``[M, 5]`` of stage-2 jumps chosen directly: ``params`` ``[M, 2]`` = (distance [m], direction off
    the heading [rad]); no yaw change, no obstacle."""
    cmd = torch.zeros(params.shape[0], 5, device=params.device)
    cmd[:, 0] = params[:, 0] * torch.cos(params[:, 1])
    cmd[:, 1] = params[:, 0] * torch.sin(params[:, 1])
    return cmd


def target_world(start_xy: torch.Tensor, start_yaw: torch.Tensor, cmd: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """Landing target xy ``[M, 2]`` [m] and yaw ``[M]`` [rad] in the world frame of commands ``[M, 5]`` issued at
    ``start_xy`` ``[M, 2]`` with heading ``start_yaw`` ``[M]``."""
    c, s = torch.cos(start_yaw), torch.sin(start_yaw)
    dx, dy = cmd[:, 0], cmd[:, 1]
    xy = start_xy + torch.stack((c * dx - s * dy, s * dx + c * dy), dim=-1)
    return xy, start_yaw + cmd[:, 2]


def obstacle_box(start_xy: torch.Tensor, start_yaw: torch.Tensor, cmd: torch.Tensor, width: float,
                 near_edge: float | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Centre ``[M, 3]``, half sizes ``[M, 3]`` and yaw ``[M]`` of each command's obstacle box (world frame): its
    length along the jump direction, ``width`` across it, half height 0 when absent. Its near face lies
    ``near_edge`` [m] ahead of ``start_xy`` along the jump; ``None``: the box is centred midway along the jump
    (how configs saved before ``command.obstacle_near_edge`` existed placed it)."""
    target, _ = target_world(start_xy, start_yaw, cmd)
    delta = target - start_xy
    direction = torch.atan2(delta[:, 1], delta[:, 0])
    if near_edge is None:
        mid = start_xy + 0.5 * delta
    else:
        along = float(near_edge) + 0.5 * cmd[:, 4]
        mid = start_xy + along.unsqueeze(-1) * torch.stack((torch.cos(direction), torch.sin(direction)), dim=-1)
    h = cmd[:, 3]
    centre = torch.cat((mid, (0.5 * h).unsqueeze(-1)), dim=-1)
    half = torch.stack((0.5 * cmd[:, 4], torch.full_like(h, 0.5 * width), 0.5 * h), dim=-1)
    return centre, half, direction


def max_distance_bins(cfg: dict, width: float = 0.1) -> torch.Tensor:
    """Upper edges [m] of the commanded-distance bins used to report the longest jump that succeeds."""
    n = int(math.ceil(cfg["distance_max"] / width))
    return torch.arange(1, n + 1, dtype=torch.float32) * width


#: m/s^2, gravity of the ballistic predictions (the models' own ``opt.gravity``).
GRAVITY = 9.81


def fall_time(vz: torch.Tensor, height: torch.Tensor | float) -> torch.Tensor:
    """Time [s] until a projectile ``height`` [m] above a level, moving up at ``vz`` [m/s], falls back to it:
    ``(v_z + sqrt(v_z^2 + 2 g h)) / g`` (``g`` = :data:`GRAVITY`); ``[M]`` like ``vz``."""
    return (vz + torch.sqrt(vz.square() + 2.0 * GRAVITY * height)) / GRAVITY


def flight_start(d: torch.Tensor, stand_only: torch.Tensor, prob: float, vz_range,
                 height: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Reference-state initialisation (Olsen, Pettersen and Alexis 2025, arXiv:2510.24584): which of ``M`` new
    episodes start in flight, the command already running, on the ballistic path that lands on their target, so
    the landings of long jumps are practised before the policy can take off for them.

    Args:
        d: ``[M, 2]`` target minus start position, world frame [m]; an episode with ``|d| <= 0.05 m`` (in place)
            or ``stand_only`` ``[M]`` never starts in flight; each other one does with probability ``prob``.
        vz_range: ``(low, high)`` upward speed [m/s], uniform.
        height: base height above the spawn height at such a start [m].

    Returns:
        ``in_flight`` ``[M]`` bool; the base's linear velocity ``[M, 3]`` [m/s, world frame]: the upward speed and
        the horizontal one that covers ``d`` in the flight time back to the spawn height (:func:`fall_time`; zeros
        where not in flight); the height offset ``[M]`` [m].
    """
    m, dev = d.shape[0], d.device
    in_flight = (torch.rand(m, device=dev) < prob) & ~stand_only & (torch.linalg.vector_norm(d, dim=-1) > 0.05)
    lo, hi = vz_range
    vz = lo + (hi - lo) * torch.rand(m, device=dev)
    t_flight = fall_time(vz, height)
    vel = torch.cat((d / t_flight.unsqueeze(-1), vz.unsqueeze(-1)), dim=-1) * in_flight.unsqueeze(-1)
    return in_flight, vel, height * in_flight.float()

"""Start positions and goals of a swarm episode (config section ``goals``), batched over rooms.

Zones (world frame): starts in ``y in start_y``, goals in ``y in goal_y`` (beyond the obstacle area), ``|x| <=
x_half``, ``z in z_range``. Scenarios, drawn per room with ``scenario_weights``:
  * ``random``: starts and goals uniform in their zones, every pair at least ``min_separation`` apart;
  * ``formation``: goals are the ``M`` points of a lattice of spacing ``formation_spacing`` nearest to a random
    centre in the goal zone (a compact block formation), assigned to the drones in random order;
  * ``swap``: half of the drones start in each zone; each flies to the point mirrored through the room's centre
    (``x -> -x``, the start zone's depth mapped onto the goal zone's, edge nearest the obstacles to edge nearest
    the obstacles), so the two groups cross in the middle.
"""

from __future__ import annotations

import torch

from sim2real.tasks.quadrotor_swarm.world import free_positions

SCENARIOS = ("random", "formation", "swap")


def _zone(g: dict, which: str, device) -> tuple[torch.Tensor, torch.Tensor]:
    y = g["start_y"] if which == "start" else g["goal_y"]
    lo = torch.tensor([-g["x_half"], y[0], g["z_range"][0]], dtype=torch.float32, device=device)
    hi = torch.tensor([g["x_half"], y[1], g["z_range"][1]], dtype=torch.float32, device=device)
    return lo, hi


def _mirror(p: torch.Tensor, g: dict, to: str) -> torch.Tensor:
    """Mirror positions ``[..., 3]`` from one zone into the other (``to`` = "goal" or "start")."""
    src, dst = (g["start_y"], g["goal_y"]) if to == "goal" else (g["goal_y"], g["start_y"])
    out = p.clone()
    out[..., 0] = -p[..., 0]
    frac = (p[..., 1] - src[0]) / (src[1] - src[0])  # 0 at the zone's low edge
    out[..., 1] = dst[1] - frac * (dst[1] - dst[0])
    return out


def formation_goals(g: dict, num_rooms: int, num_drones: int, device) -> torch.Tensor:
    """Compact lattice formations ``[R, M, 3]`` in the goal zone (see the module docstring)."""
    lo, hi = _zone(g, "goal", device)
    s = float(g["formation_spacing"])
    axes = [torch.arange(float(lo[i]), float(hi[i]) + 1e-6, s, device=device) for i in range(3)]
    lattice = torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=-1).reshape(-1, 3)  # [L, 3]
    if lattice.shape[0] < num_drones:
        raise ValueError(f"the goal zone holds {lattice.shape[0]} formation points at {s} m spacing, fewer than "
                         f"{num_drones} drones")
    centre = lo + (hi - lo) * torch.rand(num_rooms, 3, device=device)
    d = torch.cdist(centre.unsqueeze(1), lattice.unsqueeze(0)).squeeze(1)  # [R, L]
    nearest = d.topk(num_drones, dim=-1, largest=False).indices  # [R, M]
    goals = lattice[nearest]
    perm = torch.rand(num_rooms, num_drones, device=device).argsort(dim=-1)
    return torch.gather(goals, 1, perm.unsqueeze(-1).expand(-1, -1, 3))


def sample_starts_and_goals(g: dict, num_rooms: int, num_drones: int,
                            device: str | torch.device = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """Starts and goals ``[R, M, 3]`` [m], world frame, one scenario per room (see the module docstring).

    Raises:
        ValueError: a zone cannot hold ``M`` drones at ``min_separation``.
    """
    r, m = num_rooms, num_drones
    sep = float(g["min_separation"])
    s_lo, s_hi = _zone(g, "start", device)
    g_lo, g_hi = _zone(g, "goal", device)
    weights = torch.tensor([float(g["scenario_weights"].get(k, 0.0)) for k in SCENARIOS], device=device)
    scenario = torch.multinomial(weights / weights.sum(), r, replacement=True)

    starts = free_positions(s_lo, s_hi, r, m, sep)
    goals = free_positions(g_lo, g_hi, r, m, sep)  # random
    form = scenario == 1
    if form.any():
        goals[form] = formation_goals(g, int(form.sum()), m, device)
    swap = scenario == 2
    if swap.any():
        b = int(swap.sum())
        half = m // 2
        a_starts = free_positions(s_lo, s_hi, b, m - half, sep)
        b_starts = free_positions(g_lo, g_hi, b, half, sep) if half > 0 else a_starts[:, :0]
        s_all = torch.cat((a_starts, b_starts), dim=1)
        g_all = torch.cat((_mirror(a_starts, g, "goal"), _mirror(b_starts, g, "start")), dim=1)
        perm = torch.rand(b, m, device=device).argsort(dim=-1).unsqueeze(-1).expand(-1, -1, 3)
        starts[swap] = torch.gather(s_all, 1, perm)
        goals[swap] = torch.gather(g_all, 1, perm)
    return starts, goals

"""Per-drone observations of ``quadrotor-swarm``: own state, K nearest neighbours with a mask, local obstacle map.

One source of truth for the layout: the training env and the ROS 2 deploy node both call
:class:`SwarmObservation.build` (the deploy node with the drones it hears on their odometry topics and the column
positions it was given), and the exported metadata records :meth:`SwarmObservation.layout`.

Flat policy observation of one drone (``[D]``, float32), in this order:
  1. the self terms named in ``observations.policy`` (:mod:`sim2real.tasks.observations`: goal-relative position,
     attitude, velocities, last action, height above the floor);
  2. ``neighbor_rel`` ``[K * 6]``: for slot ``k`` (nearest first) the neighbour's position and velocity relative
     to the drone, ``p_j - p_i`` [m] and ``v_j - v_i`` [m/s], world frame; zeros in empty slots;
  3. ``obstacle_sdf`` ``[G]``: signed distance [m] to the nearest column surface or wall at a ``size x size`` grid
     of points around the drone (world axes, :func:`~sim2real.tasks.quadrotor_swarm.world.obstacle_sdf`);
  4. ``neighbor_mask`` ``[K]``: 1 where slot ``k`` holds a neighbour, 0 where it is empty (fewer than K visible).

The critic observation is the noise-free policy observation followed by privileged terms, so the blocks of 2-4
sit at the same offsets in both (:meth:`SwarmObservation.model_layout`).
"""

from __future__ import annotations

import torch

from sim2real.tasks.observations import OBS_TERMS, ObservationBuilder
from sim2real.tasks.quadrotor_swarm.world import RoomSpec, obstacle_sdf, sdf_offsets
from sim2real.tasks.state import RobotState

NEIGHBOR_FEATURES = 6  # relative position (3) and relative velocity (3)


def nearest_neighbors(pos_w: torch.Tensor, vel_w: torch.Tensor, k: int, num_visible: torch.Tensor | int,
                      known: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` nearest other drones of every drone, nearest first.

    Args:
        pos_w, vel_w: ``[R, M, 3]`` positions [m] and velocities [m/s], world frame.
        k: number of neighbour slots.
        num_visible: how many of the slots may be filled, an int or ``[R]`` long (curriculum), at most ``k``.
        known: ``[R, M]`` bool, drones whose state is known (deploy: fresh odometry); unknown drones are neither
            neighbours nor counted. Default: all.

    Returns:
        (features ``[R, M, k, 6]`` = ``(p_j - p_i, v_j - v_i)``, zero in empty slots; mask ``[R, M, k]`` float,
        1 for a filled slot). Ties in distance are broken by drone index.
    """
    r, m, _ = pos_w.shape
    dev = pos_w.device
    d = torch.cdist(pos_w, pos_w)  # [R, M, M]
    invalid = torch.eye(m, dtype=torch.bool, device=dev).expand(r, m, m)
    if known is not None:
        invalid = invalid | ~known.unsqueeze(1)
    d = torch.where(invalid, torch.full_like(d, float("inf")), d)
    kk = min(k, max(m - 1, 0))
    feats = torch.zeros(r, m, k, NEIGHBOR_FEATURES, device=dev)
    mask = torch.zeros(r, m, k, device=dev)
    if kk == 0:
        return feats, mask
    dist, idx = torch.topk(d, kk, dim=-1, largest=False, sorted=True)  # [R, M, kk]
    rows = torch.arange(r, device=dev).view(r, 1, 1)
    rel_p = pos_w[rows, idx] - pos_w.unsqueeze(2)
    rel_v = vel_w[rows, idx] - vel_w.unsqueeze(2)
    if isinstance(num_visible, int):
        num_visible = torch.full((r,), num_visible, dtype=torch.long, device=dev)
    slot = torch.arange(kk, device=dev).view(1, 1, kk)
    filled = torch.isfinite(dist) & (slot < num_visible.view(r, 1, 1).clamp(0, k))
    feats[:, :, :kk] = torch.cat((rel_p, rel_v), dim=-1) * filled.unsqueeze(-1)
    mask[:, :, :kk] = filled.float()
    return feats, mask


class SwarmObservation:
    """Builds the flat per-drone observation (see the module docstring).

    Args:
        self_terms: names of the self terms (``observations.policy``), each registered in
            :data:`sim2real.tasks.observations.OBS_TERMS`.
        num_actions: action size (for ``last_action``).
        num_neighbors: K, the fixed number of neighbour slots.
        room: the room geometry (walls and column radius for the obstacle map).
        sdf_size, sdf_resolution: obstacle-map grid (``size x size`` points, spacing [m]).
        sdf_clip: obstacle-map values are clipped to ``[-clip, clip]`` [m].
    """

    def __init__(self, self_terms: list[str], num_actions: int, num_neighbors: int, room: RoomSpec,
                 sdf_size: int, sdf_resolution: float, sdf_clip: float):
        self.self_builder = ObservationBuilder([{"name": n} for n in self_terms], num_actions)
        self.num_neighbors = int(num_neighbors)
        self.room = room
        self.sdf_size = int(sdf_size)
        self.sdf_resolution = float(sdf_resolution)
        self.sdf_clip = float(sdf_clip)
        self._offsets: dict[str, torch.Tensor] = {}

    @staticmethod
    def from_metadata(swarm: dict, num_actions: int) -> "SwarmObservation":
        """Rebuild the builder from an exported policy's ``metadata["swarm"]`` (see :meth:`metadata`)."""
        sdf = swarm["sdf"]
        return SwarmObservation(list(swarm["self_terms"]), num_actions, int(swarm["num_neighbors"]),
                                RoomSpec(**swarm["room"]), int(sdf["size"]), float(sdf["resolution"]),
                                float(sdf["clip"]))

    def metadata(self) -> dict:
        """What an exported policy records so the deploy side can rebuild this builder."""
        return {
            "self_terms": [d["name"] for d in self.self_builder.layout()],
            "num_neighbors": self.num_neighbors,
            "room": dict(vars(self.room)),
            "sdf": {"size": self.sdf_size, "resolution": self.sdf_resolution, "clip": self.sdf_clip},
            "model_layout": self.model_layout(),
        }

    @property
    def num_sdf(self) -> int:
        return self.sdf_size**2

    @property
    def self_dim(self) -> int:
        return self.self_builder.dim

    @property
    def dim(self) -> int:
        return self.self_dim + self.num_neighbors * (NEIGHBOR_FEATURES + 1) + self.num_sdf

    def offsets(self, device: torch.device | str) -> torch.Tensor:
        key = str(device)
        if key not in self._offsets:
            self._offsets[key] = sdf_offsets(self.sdf_size, self.sdf_resolution, device)
        return self._offsets[key]

    def build(self, state: RobotState, num_rooms: int, centers: torch.Tensor, occupied: torch.Tensor,
              num_visible: torch.Tensor | int, known: torch.Tensor | None = None,
              ego: torch.Tensor | None = None) -> torch.Tensor:
        """Observations ``[R * M, D]`` (drone-major within each room: row ``r * M + i``) of every drone.

        Args:
            state: :class:`RobotState` of all ``R * M`` drones (``command[:, :3]`` = each drone's goal [m]).
            num_rooms: R.
            centers: ``[C, 2]`` or ``[R, C, 2]`` column centres [m]; occupied: ``[R, C]`` bool.
            num_visible: neighbour slots that may be filled (int or ``[R]``).
            known: ``[R, M]`` bool, drones whose state is known (default: all).
            ego: ``[R * M]`` bool; when given, only those rows are computed and returned (``[E, D]``) — the deploy
                node builds the observation of its own drones only. Neighbours still come from all known drones.
        """
        n = state.base_pos_w.shape[0]
        r = num_rooms
        m = n // r
        own = self.self_builder.build(state)
        pos = state.base_pos_w.view(r, m, 3)
        vel = state.base_lin_vel_w.view(r, m, 3)
        feats, mask = nearest_neighbors(pos, vel, self.num_neighbors, num_visible, known)
        sdf = obstacle_sdf(pos, centers, occupied, self.room, self.offsets(pos.device), self.sdf_clip)
        out = torch.cat((own, feats.reshape(n, -1), sdf.reshape(n, -1), mask.reshape(n, -1)), dim=-1)
        return out if ego is None else out[ego]

    def layout(self) -> list[dict]:
        """The policy observation's terms in order: ``{"name", "offset", "size", "scale", "unit", "frame",
        "description"}`` (the swarm blocks' sizes come from K and the obstacle-map grid)."""
        out = self.self_builder.layout()
        offset = self.self_dim
        for name, size in (("neighbor_rel", self.num_neighbors * NEIGHBOR_FEATURES), ("obstacle_sdf", self.num_sdf),
                           ("neighbor_mask", self.num_neighbors)):
            reg = OBS_TERMS[name]
            out.append({"name": name, "offset": offset, "size": size, "scale": 1.0, "unit": reg.unit,
                        "frame": reg.frame, "description": reg.description})
            offset += size
        return out

    def block_sizes(self) -> dict[str, int]:
        """Sizes of the terms registered with a task-dependent size (checked against exported metadata)."""
        return {"neighbor_rel": self.num_neighbors * NEIGHBOR_FEATURES, "obstacle_sdf": self.num_sdf,
                "neighbor_mask": self.num_neighbors}

    def model_layout(self) -> dict:
        """Offsets of the neighbour, obstacle and mask blocks for :class:`sim2real.policies.attention.
        SwarmAttentionModel` (the same in the policy and critic observations)."""
        start = self.self_dim
        k = self.num_neighbors
        return {
            "neighbors": [start, k, NEIGHBOR_FEATURES],
            "obstacles": [start + k * NEIGHBOR_FEATURES, self.num_sdf],
            "mask": [start + k * NEIGHBOR_FEATURES + self.num_sdf, k],
        }

"""The swarm's world: a walled room with a grid of vertical column obstacles, and collision geometry.

Frames and units: world frame, z up, SI units. The room spans ``|x|, |y| <= room_half`` and ``0 <= z <=
room_height``; obstacles are infinite vertical cylinders (floor to ceiling) of radius ``obstacle_radius`` at the
centres of the cells of a square grid covering ``|x|, |y| <= obstacle_area / 2`` (cell size ``obstacle_cell``).
The *density* of a room is the fraction of grid cells holding a column (Huang et al., "Collision avoidance and
navigation for a quadrotor swarm using end-to-end deep RL", 2024, use the same parameterisation).

Everything is batched over rooms ``R`` and drones per room ``M`` and shared by the training env, the ROS 2 deploy
node (which rebuilds each drone's obstacle observation from the published column positions) and the stand-in swarm
(which applies the same collision model).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

#: A large finite distance [m] used for "no obstacle" so that min() and comparisons stay finite.
FAR = 1.0e3


@dataclass(frozen=True)
class RoomSpec:
    """Room and obstacle-grid geometry (see the module docstring). All lengths in metres.

    Args:
        room_half: half side of the square room [m].
        room_height: ceiling height [m].
        obstacle_area: side of the square area holding the obstacle grid, centred on the origin [m].
        obstacle_cell: grid cell size [m]; columns stand at cell centres.
        obstacle_radius: column radius [m].
        drone_radius: collision radius of one drone [m] (two drones collide below twice this distance).
    """

    room_half: float
    room_height: float
    obstacle_area: float
    obstacle_cell: float
    obstacle_radius: float
    drone_radius: float

    @staticmethod
    def from_config(world: dict) -> "RoomSpec":
        """From the ``world`` section of a ``quadrotor-swarm`` config."""
        return RoomSpec(*(float(world[k]) for k in (
            "room_half", "room_height", "obstacle_area", "obstacle_cell", "obstacle_radius", "drone_radius")))

    @property
    def cells_per_side(self) -> int:
        return int(round(self.obstacle_area / self.obstacle_cell))

    @property
    def num_cells(self) -> int:
        return self.cells_per_side**2

    def cell_centers(self, device: str | torch.device = "cpu") -> torch.Tensor:
        """Centres ``[C, 2]`` (x, y) [m] of the obstacle grid's cells, row-major in y then x."""
        n = self.cells_per_side
        coords = (torch.arange(n, dtype=torch.float32, device=device) + 0.5) * self.obstacle_cell
        coords = coords - self.obstacle_area / 2.0
        yy, xx = torch.meshgrid(coords, coords, indexing="ij")
        return torch.stack((xx.reshape(-1), yy.reshape(-1)), dim=-1)


def sample_occupancy(density: torch.Tensor, num_cells: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """Occupied cells ``[R, C]`` (bool) with exactly ``round(density * C)`` columns per room, uniformly placed.

    Args:
        density: ``[R]`` fraction of cells in [0, 1].
    """
    r = density.shape[0]
    count = torch.round(density.clamp(0.0, 1.0) * num_cells).long()
    keys = torch.rand(r, num_cells, generator=generator, device=density.device)
    rank = keys.argsort(dim=-1).argsort(dim=-1)
    return rank < count.unsqueeze(-1)


def sdf_offsets(size: int, resolution: float, device: str | torch.device = "cpu") -> torch.Tensor:
    """Offsets ``[size*size, 2]`` [m] (x, y; world axes) of the signed-distance samples around a drone:
    a ``size x size`` grid of spacing ``resolution`` centred on the drone, row-major in y then x."""
    c = (torch.arange(size, dtype=torch.float32, device=device) - (size - 1) / 2.0) * resolution
    yy, xx = torch.meshgrid(c, c, indexing="ij")
    return torch.stack((xx.reshape(-1), yy.reshape(-1)), dim=-1)


def column_distance(points_xy: torch.Tensor, centers: torch.Tensor, occupied: torch.Tensor) -> torch.Tensor:
    """Horizontal distance from points to their nearest column centre.

    Args:
        points_xy: ``[R, P, 2]`` m, world frame.
        centers: ``[C, 2]`` column centres (shared by all rooms) or ``[R, C, 2]``.
        occupied: ``[R, C]`` bool.

    Returns:
        (distance ``[R, P]`` m (``FAR`` when the room has no column), index ``[R, P]`` of the nearest column).
    """
    if centers.dim() == 2:
        centers = centers.unsqueeze(0)
    d = torch.cdist(points_xy, centers.expand(points_xy.shape[0], -1, -1))  # [R, P, C]
    d = torch.where(occupied.unsqueeze(1), d, torch.full_like(d, FAR))
    if d.shape[-1] == 0:
        z = torch.full(points_xy.shape[:2], FAR, device=points_xy.device)
        return z, torch.zeros_like(z, dtype=torch.long)
    dist, idx = d.min(dim=-1)
    return dist, idx


def obstacle_sdf(pos_w: torch.Tensor, centers: torch.Tensor, occupied: torch.Tensor, room: RoomSpec,
                 offsets: torch.Tensor, clip: float) -> torch.Tensor:
    """Signed distance [m] from sample points around each drone to the nearest column surface or wall.

    ``sdf(p) = min(|p_xy - c| - obstacle_radius over occupied columns c, room_half - |p_x|, room_half - |p_y|)``,
    clipped to ``[-clip, clip]`` (negative inside a column or beyond a wall).

    Args:
        pos_w: drone positions ``[R, M, 3]`` m, world frame.
        centers: ``[C, 2]`` or ``[R, C, 2]`` column centres.
        occupied: ``[R, C]`` bool.
        offsets: ``[G, 2]`` sample offsets from :func:`sdf_offsets` (world axes).

    Returns:
        ``[R, M, G]``.
    """
    r, m, _ = pos_w.shape
    g = offsets.shape[0]
    pts = pos_w[..., :2].unsqueeze(2) + offsets.view(1, 1, g, 2)  # [R, M, G, 2]
    dist, _ = column_distance(pts.reshape(r, m * g, 2), centers, occupied)
    sdf = dist.view(r, m, g) - room.obstacle_radius
    wall = room.room_half - pts.abs().amax(dim=-1)
    return torch.minimum(sdf, wall).clamp(-clip, clip)


@dataclass
class Contacts:
    """Contacts found by :func:`resolve_collisions` (all ``[R, M]`` bool unless stated)."""

    drone_pairs: torch.Tensor  # [R, M, M] bool, symmetric: drones i and j overlap
    drone: torch.Tensor  # the drone overlaps at least one other drone
    obstacle: torch.Tensor  # the drone overlaps a column
    floor: torch.Tensor  # the drone touched the floor
    wall: torch.Tensor  # the drone touched a wall or the ceiling


def drone_overlaps(pos_w: torch.Tensor, drone_radius: float, active: torch.Tensor | None = None) -> torch.Tensor:
    """Pairs of drones closer than ``2 * drone_radius``: ``[R, M, M]`` bool, symmetric, false on the diagonal.

    Args:
        pos_w: ``[R, M, 3]`` m. active: ``[R, M]`` bool, drones taking part (default: all).
    """
    d = torch.cdist(pos_w, pos_w)
    m = pos_w.shape[1]
    pair = (d < 2.0 * drone_radius) & ~torch.eye(m, dtype=torch.bool, device=pos_w.device)
    if active is not None:
        pair &= active.unsqueeze(-1) & active.unsqueeze(-2)
    return pair


def resolve_collisions(pos_w: torch.Tensor, vel_w: torch.Tensor, centers: torch.Tensor, occupied: torch.Tensor,
                       room: RoomSpec, restitution: float) -> tuple[torch.Tensor, torch.Tensor, Contacts]:
    """Detect contacts and apply the collision model: drones bounce off each other, columns, walls, ceiling and
    floor.

    Model (per contact, along the contact normal ``n``): overlapping bodies are pushed apart to touching
    distance, and an approaching normal velocity ``v_n < 0`` is replaced by ``-restitution * v_n`` (drone-drone:
    equal masses, each drone receives half of the relative-velocity impulse ``(1 + e) v_rel,n / 2``). Drone-drone
    contacts are resolved with the positions of the previous overlap test (one Jacobi pass), obstacles and walls
    after them, so a drone always ends inside the room and outside every column.

    Args:
        pos_w, vel_w: ``[R, M, 3]`` positions [m] and velocities [m/s], world frame.
        centers, occupied: the column grid (see :func:`obstacle_sdf`).
        restitution: coefficient of restitution in [0, 1].

    Returns:
        (new positions, new velocities, :class:`Contacts`).
    """
    e = float(restitution)
    r_d = room.drone_radius
    pos, vel = pos_w.clone(), vel_w.clone()

    # Drone-drone.
    pairs = drone_overlaps(pos, r_d)
    if pairs.any():
        diff = pos.unsqueeze(2) - pos.unsqueeze(1)  # [R, M, M, 3]: p_i - p_j
        dist = torch.linalg.vector_norm(diff, dim=-1, keepdim=True)
        # Coincident drones: separate along x (a fixed, deterministic direction).
        fallback = torch.zeros_like(diff)
        fallback[..., 0] = 1.0
        n = torch.where(dist > 1e-6, diff / dist.clamp_min(1e-6), fallback)
        pf = pairs.unsqueeze(-1).float()
        overlap = (2.0 * r_d - dist).clamp_min(0.0)
        pos = pos + (0.5 * overlap * n * pf).sum(dim=2)
        v_rel_n = ((vel.unsqueeze(2) - vel.unsqueeze(1)) * n).sum(-1, keepdim=True)  # [R, M, M, 1]
        approaching = (v_rel_n < 0).float() * pf
        vel = vel - (0.5 * (1.0 + e) * v_rel_n * n * approaching).sum(dim=2)

    # Columns.
    if centers.shape[-2] == 0:  # an empty grid: no column to hit
        obstacle = torch.zeros(pos.shape[:2], dtype=torch.bool, device=pos.device)
        return _walls(pos, vel, room, e, pairs, obstacle)
    dist, idx = column_distance(pos[..., :2], centers, occupied)
    c = centers if centers.dim() == 3 else centers.unsqueeze(0).expand(pos.shape[0], -1, -1)
    nearest = torch.gather(c, 1, idx.unsqueeze(-1).expand(-1, -1, 2))  # [R, M, 2]
    obstacle = dist < room.obstacle_radius + r_d
    if obstacle.any():
        d_xy = pos[..., :2] - nearest
        norm = torch.linalg.vector_norm(d_xy, dim=-1, keepdim=True)
        fallback = torch.zeros_like(d_xy)
        fallback[..., 0] = 1.0
        n = torch.where(norm > 1e-6, d_xy / norm.clamp_min(1e-6), fallback)
        target = nearest + n * (room.obstacle_radius + r_d)
        mask = obstacle.unsqueeze(-1)
        pos = torch.cat((torch.where(mask, target, pos[..., :2]), pos[..., 2:]), dim=-1)
        v_n = (vel[..., :2] * n).sum(-1, keepdim=True)
        bounce = mask & (v_n < 0)
        v_xy = torch.where(bounce, vel[..., :2] - (1.0 + e) * v_n * n, vel[..., :2])
        vel = torch.cat((v_xy, vel[..., 2:]), dim=-1)

    return _walls(pos, vel, room, e, pairs, obstacle)


def _walls(pos: torch.Tensor, vel: torch.Tensor, room: RoomSpec, e: float, pairs: torch.Tensor,
           obstacle: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, Contacts]:
    """Walls, ceiling and floor of :func:`resolve_collisions`, and its :class:`Contacts`."""
    r_d = room.drone_radius
    lo = torch.tensor([-room.room_half + r_d, -room.room_half + r_d, r_d], device=pos.device)
    hi = torch.tensor([room.room_half - r_d, room.room_half - r_d, room.room_height - r_d], device=pos.device)
    below, above = pos < lo, pos > hi
    pos = torch.maximum(torch.minimum(pos, hi), lo)
    vel = torch.where(below & (vel < 0), -e * vel, vel)
    vel = torch.where(above & (vel > 0), -e * vel, vel)
    floor = below[..., 2]
    wall = below[..., :2].any(-1) | above.any(-1)
    contacts = Contacts(drone_pairs=pairs, drone=pairs.any(-1), obstacle=obstacle, floor=floor, wall=wall)
    return pos, vel, contacts


def min_column_clearance(pos_w: torch.Tensor, centers: torch.Tensor, occupied: torch.Tensor,
                         room: RoomSpec) -> torch.Tensor:
    """Horizontal clearance ``[R, M]`` [m] between each drone's surface and the nearest column's surface."""
    return nearest_column(pos_w, centers, occupied, room)[0]


def nearest_column(pos_w: torch.Tensor, centers: torch.Tensor, occupied: torch.Tensor,
                   room: RoomSpec) -> tuple[torch.Tensor, torch.Tensor]:
    """Horizontal clearance ``[R, M]`` [m] to the nearest column (surface to drone surface; huge without columns)
    and the unit horizontal direction ``[R, M, 2]`` from that column's axis to the drone (world frame)."""
    dist, idx = column_distance(pos_w[..., :2], centers, occupied)
    c = centers.unsqueeze(0).expand(pos_w.shape[0], -1, -1) if centers.dim() == 2 else centers
    if c.shape[1] == 0:
        return dist - room.obstacle_radius - room.drone_radius, torch.zeros_like(pos_w[..., :2])
    nearest = torch.gather(c, 1, idx.unsqueeze(-1).expand(-1, -1, 2))
    away = pos_w[..., :2] - nearest
    normal = away / torch.linalg.vector_norm(away, dim=-1, keepdim=True).clamp_min(1e-9)
    return dist - room.obstacle_radius - room.drone_radius, normal


def free_positions(zone_lo: torch.Tensor, zone_hi: torch.Tensor, num_rooms: int, num_drones: int,
                   min_separation: float, generator: torch.Generator | None = None,
                   max_tries: int = 64) -> torch.Tensor:
    """Uniform positions ``[R, M, 3]`` in the box ``[zone_lo, zone_hi]`` (``[3]`` or ``[R, 3]``) with every pair at
    least ``min_separation`` apart, by vectorised rejection (redraws the drones that violate it).

    Raises:
        ValueError: the box cannot hold ``num_drones`` at that separation (checked by area, and after
            ``max_tries`` redraws).
    """
    dev = zone_lo.device
    lo = zone_lo.expand(num_rooms, 3) if zone_lo.dim() == 1 else zone_lo
    hi = zone_hi.expand(num_rooms, 3) if zone_hi.dim() == 1 else zone_hi
    extent = (hi - lo)[0].clamp_min(min_separation)
    if num_drones * min_separation**3 > 0.4 * float(extent.prod()):
        raise ValueError(f"a {extent[0]:.2f} x {extent[1]:.2f} x {extent[2]:.2f} m zone cannot hold {num_drones} "
                         f"drones {min_separation} m apart")
    pos = lo.unsqueeze(1) + (hi - lo).unsqueeze(1) * torch.rand(num_rooms, num_drones, 3, generator=generator,
                                                                device=dev)
    for _ in range(max_tries):
        d = torch.cdist(pos, pos) + torch.eye(num_drones, device=dev) * FAR
        # Of each violating pair, redraw the higher-index drone.
        bad = (torch.triu(d < min_separation, diagonal=1)).any(dim=1)  # [R, M]: j violates with some i < j
        if not bad.any():
            return pos
        fresh = lo.unsqueeze(1) + (hi - lo).unsqueeze(1) * torch.rand(num_rooms, num_drones, 3, generator=generator,
                                                                      device=dev)
        pos = torch.where(bad.unsqueeze(-1), fresh, pos)
    raise ValueError(f"could not place {num_drones} drones {min_separation} m apart in the zone after {max_tries} "
                     f"redraws; enlarge the zone or lower the separation")

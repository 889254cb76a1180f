"""Swarm world geometry: collisions on hand-placed configurations, signed distances, occupancy, start sampling."""

from __future__ import annotations

import math

import pytest
import torch

from sim2real.tasks.quadrotor_swarm.world import (
    RoomSpec, column_distance, drone_overlaps, free_positions, obstacle_sdf, resolve_collisions, sample_occupancy,
    sdf_offsets,
)

ROOM = RoomSpec(room_half=5.0, room_height=3.0, obstacle_area=6.0, obstacle_cell=1.0, obstacle_radius=0.2,
                drone_radius=0.065)
CENTERS = ROOM.cell_centers()


def _occupied(*cells):
    occ = torch.zeros(1, ROOM.num_cells, dtype=torch.bool)
    for c in cells:
        occ[0, c] = True
    return occ


def test_cell_grid_covers_the_obstacle_area():
    assert ROOM.num_cells == 36
    assert CENTERS.min().item() == pytest.approx(-2.5) and CENTERS.max().item() == pytest.approx(2.5)
    # Row-major in y then x: cell 1 is one cell further along x.
    assert CENTERS[1, 0] - CENTERS[0, 0] == pytest.approx(1.0) and CENTERS[1, 1] == CENTERS[0, 1]


def test_occupancy_has_exact_column_counts():
    occ = sample_occupancy(torch.tensor([0.0, 0.2, 0.5, 0.8, 1.0]), ROOM.num_cells)
    assert occ.sum(-1).tolist() == [0, round(0.2 * 36), 18, round(0.8 * 36), 36]


def test_two_drones_closer_than_two_radii_overlap_and_no_more():
    pos = torch.tensor([[[0.0, 0.0, 1.0], [0.12, 0.0, 1.0], [0.0, 0.14, 1.0], [3.0, 3.0, 1.0]]])
    pairs = drone_overlaps(pos, ROOM.drone_radius)
    # 0-1 at 0.12 m < 0.13 m overlap; 0-2 at 0.14 m does not; 1-2 at 0.184 m does not.
    expected = torch.zeros(1, 4, 4, dtype=torch.bool)
    expected[0, 0, 1] = expected[0, 1, 0] = True
    assert torch.equal(pairs, expected)


def test_head_on_drones_bounce_with_restitution_and_separate():
    pos = torch.tensor([[[0.0, 0.0, 1.0], [0.1, 0.0, 1.0]]])
    vel = torch.tensor([[[1.0, 0.0, 0.0], [-1.0, 0.0, 0.0]]])
    new_pos, new_vel, c = resolve_collisions(pos, vel, CENTERS, _occupied(), ROOM, restitution=0.5)
    assert c.drone.tolist() == [[True, True]] and not c.obstacle.any()
    # Relative normal velocity -2 m/s becomes +1 m/s (e = 0.5), shared equally.
    torch.testing.assert_close(new_vel[0, :, 0], torch.tensor([-0.5, 0.5]))
    assert torch.linalg.vector_norm(new_pos[0, 1] - new_pos[0, 0]) == pytest.approx(2 * ROOM.drone_radius, abs=1e-6)


def test_separating_drones_keep_their_velocity():
    pos = torch.tensor([[[0.0, 0.0, 1.0], [0.1, 0.0, 1.0]]])
    vel = torch.tensor([[[-1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]])
    _, new_vel, c = resolve_collisions(pos, vel, CENTERS, _occupied(), ROOM, restitution=0.5)
    assert c.drone.all()
    torch.testing.assert_close(new_vel, vel)


def test_drone_driven_into_a_column_is_pushed_out_and_bounces():
    cell = 14  # a column at CENTERS[14]
    cx, cy = CENTERS[cell].tolist()
    pos = torch.tensor([[[cx - 0.2, cy, 1.5]]])  # inside radius + drone radius (0.265 m)
    vel = torch.tensor([[[2.0, 0.3, 0.0]]])
    new_pos, new_vel, c = resolve_collisions(pos, vel, CENTERS, _occupied(cell), ROOM, restitution=0.5)
    assert c.obstacle.tolist() == [[True]]
    assert new_pos[0, 0, 0].item() == pytest.approx(cx - 0.265, abs=1e-5)
    torch.testing.assert_close(new_vel[0, 0], torch.tensor([-1.0, 0.3, 0.0]))  # normal reversed x e, tangent kept
    # The same drone with the column absent: no contact, unchanged.
    p2, v2, c2 = resolve_collisions(pos, vel, CENTERS, _occupied(), ROOM, restitution=0.5)
    assert not c2.obstacle.any() and torch.equal(p2, pos) and torch.equal(v2, vel)


def test_floor_and_walls_clamp_and_bounce():
    pos = torch.tensor([[[0.0, 0.0, 0.01], [4.99, 0.0, 1.0], [0.0, 0.0, 2.99]]])
    vel = torch.tensor([[[0.0, 0.0, -2.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]])
    new_pos, new_vel, c = resolve_collisions(pos, vel, CENTERS, _occupied(), ROOM, restitution=0.5)
    assert c.floor.tolist() == [[True, False, False]] and c.wall.tolist() == [[False, True, True]]
    assert new_pos[0, 0, 2].item() == pytest.approx(ROOM.drone_radius)
    assert new_pos[0, 1, 0].item() == pytest.approx(5.0 - ROOM.drone_radius)
    torch.testing.assert_close(new_vel[0, :, :], torch.tensor([[0.0, 0.0, 1.0], [-0.5, 0.0, 0.0], [0.0, 0.0, -0.5]]))


def test_sdf_matches_hand_computed_distances():
    cell = 14
    cx, cy = CENTERS[cell].tolist()
    offsets = sdf_offsets(3, 0.3)
    assert offsets.shape == (9, 2) and offsets[4].abs().max() == 0  # centre sample is the drone itself
    pos = torch.tensor([[[cx - 0.6, cy, 1.0]]])
    sdf = obstacle_sdf(pos, CENTERS, _occupied(cell), ROOM, offsets, clip=2.0)[0, 0]
    for g in range(9):
        px, py = cx - 0.6 + offsets[g, 0].item(), cy + offsets[g, 1].item()
        expected = min(math.hypot(px - cx, py - cy) - 0.2, 5.0 - abs(px), 5.0 - abs(py), 2.0)
        assert sdf[g].item() == pytest.approx(expected, abs=1e-5)
    # No columns: the walls only (clipped).
    far = obstacle_sdf(torch.tensor([[[4.5, 0.0, 1.0]]]), CENTERS, _occupied(), ROOM, offsets, clip=2.0)[0, 0]
    assert far[4].item() == pytest.approx(0.5) and far[5].item() == pytest.approx(0.2)  # +x sample at 4.8 m


def test_column_distance_without_columns_is_far():
    d, _ = column_distance(torch.zeros(1, 2, 2), CENTERS, _occupied())
    assert (d >= 100).all()


def test_free_positions_keep_their_separation_and_zone():
    lo, hi = torch.tensor([-3.5, -4.6, 0.8]), torch.tensor([3.5, -3.4, 2.2])
    pos = free_positions(lo, hi, 20, 32, 0.4)
    d = torch.cdist(pos, pos) + torch.eye(32) * 10
    assert d.min() >= 0.4
    assert ((pos >= lo) & (pos <= hi)).all()
    with pytest.raises(ValueError, match="cannot hold"):
        free_positions(lo, hi, 1, 500, 0.4)


def test_an_empty_column_grid_is_handled():
    pos = torch.tensor([[[0.0, 0.0, 0.01]]])
    vel = torch.tensor([[[0.0, 0.0, -1.0]]])
    new_pos, new_vel, c = resolve_collisions(pos, vel, torch.zeros(0, 2), torch.zeros(1, 0, dtype=torch.bool), ROOM,
                                             restitution=0.5)
    assert not c.obstacle.any() and c.floor.all()
    assert new_vel[0, 0, 2].item() == pytest.approx(0.5)

"""The swarm's collision-anticipating reward terms against hand-computed values: closing speed towards neighbours
and towards the nearest column, and the nearest column's direction."""

from __future__ import annotations

import math
from types import SimpleNamespace

import torch

from sim2real.tasks.quadrotor_swarm import rewards as rew
from sim2real.tasks.quadrotor_swarm.world import RoomSpec, nearest_column

P = {"proximity_radius": 0.5, "obstacle_margin": 0.3}


def _inputs(pos, vel, clearance=None, normal=None):
    pos = torch.tensor(pos, dtype=torch.float32)
    vel = torch.tensor(vel, dtype=torch.float32)
    n = pos.shape[0]
    return rew.SwarmRewardInputs(SimpleNamespace(base_lin_vel_w=vel), pos.unsqueeze(0),
                                 torch.full((n,), 10.0) if clearance is None else torch.tensor(clearance),
                                 None, None, None, None, None, None, room_vel_w=vel.unsqueeze(0),
                                 column_normal=None if normal is None else torch.tensor(normal))


def test_approach_drone_pays_closing_speed_only():
    # 0.3 m apart on x, closing at 1 m/s (each at 0.5 m/s): 1 m/s x (1 - 0.3 / 0.5) = 0.4 each
    x = _inputs([[0.0, 0.0, 1.0], [0.3, 0.0, 1.0]], [[0.5, 0.0, 0.0], [-0.5, 0.0, 0.0]])
    torch.testing.assert_close(rew.approach_drone(x, P), torch.tensor([0.4, 0.4]))
    # moving apart, side by side at rest, or passing across the line joining them: nothing
    for vel in ([[-0.5, 0.0, 0.0], [0.5, 0.0, 0.0]], [[0.0] * 3] * 2, [[0.0, 1.0, 0.0], [0.0, -1.0, 0.0]]):
        x = _inputs([[0.0, 0.0, 1.0], [0.3, 0.0, 1.0]], vel)
        assert (rew.approach_drone(x, P) == 0).all()
    # beyond the radius: nothing
    x = _inputs([[0.0, 0.0, 1.0], [0.6, 0.0, 1.0]], [[1.0, 0.0, 0.0], [-1.0, 0.0, 0.0]])
    assert (rew.approach_drone(x, P) == 0).all()


def test_approach_obstacle_pays_speed_towards_the_column_inside_the_margin():
    # clearance 0.15 m (half the 0.3 m margin), column at -x of the drone (normal +x), flying at -x 2 m/s, 45 deg
    x = _inputs([[0.0, 0.0, 1.0]] * 3, [[-2.0, 0.0, 0.0], [2.0, 0.0, 0.0], [-1.0, -1.0, 0.0]],
                clearance=[0.15, 0.15, 0.15], normal=[[1.0, 0.0]] * 3)
    torch.testing.assert_close(rew.approach_obstacle(x, P), torch.tensor([1.0, 0.0, 0.5]))
    x.clearance = torch.tensor([0.3, 0.4, -0.1])  # at or beyond the margin: nothing; inside the column: capped at 1
    torch.testing.assert_close(rew.approach_obstacle(x, P), torch.tensor([0.0, 0.0, 1.0]))


def test_nearest_column_direction_and_clearance():
    room = RoomSpec(room_half=5.0, room_height=3.0, obstacle_area=6.0, obstacle_cell=1.0, obstacle_radius=0.2,
                    drone_radius=0.065)
    centers = torch.tensor([[0.0, 0.0], [2.0, 0.0]])
    occupied = torch.tensor([[True, True]])
    pos = torch.tensor([[[0.5, 0.5, 1.0], [1.2, 0.0, 1.0]]])
    clearance, normal = nearest_column(pos, centers, occupied, room)
    h = math.sqrt(0.5)
    torch.testing.assert_close(clearance[0], torch.tensor([h - 0.265, 0.8 - 0.265]))
    torch.testing.assert_close(normal[0], torch.tensor([[h, h], [-1.0, 0.0]]))

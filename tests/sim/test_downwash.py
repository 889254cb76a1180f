"""The downwash model (Neural-Swarm's measurements, quad-swarm-rl's cylinder) against hand-computed values, and its
effect through the shared dynamics: a drone hovering below another sinks, one beside it does not."""

from __future__ import annotations

import math

import pytest
import torch

from sim2real.sim.quadrotor import QuadrotorDynamics, QuadrotorParams, apply_downwash, downwash_acceleration
from sim2real.configs import load_robot

G = 9.81
UP = torch.tensor([0.0, 0.0, 1.0])


def _accel(positions, axes=None):
    pos = torch.tensor(positions, dtype=torch.float32).unsqueeze(0)
    axis = UP.expand_as(pos) if axes is None else torch.tensor(axes, dtype=torch.float32).unsqueeze(0)
    return downwash_acceleration(pos, axis, G)[0]


def test_the_drone_below_feels_the_measured_force_and_the_one_above_nothing():
    # 0.2 m below: 10 g-force on 34 g -> 10/34 g; 0.5 m: 4/34 g (Shi et al. 2020, Fig. 3)
    for depth, grams in ((0.2, 10.0), (0.5, 4.0), (0.3, 8.0)):
        a = _accel([[0.0, 0.0, 1.0], [0.05, 0.0, 1.0 - depth]])
        torch.testing.assert_close(a[1], torch.tensor([0.0, 0.0, -grams / 34.0 * G]), rtol=1e-5, atol=1e-5)
        assert (a[0] == 0).all()


@pytest.mark.parametrize("offset", [[0.11, 0.0, -0.3], [0.0, 0.0, -0.71], [0.0, 0.0, 0.3]])
def test_outside_the_cylinder_there_is_none(offset):
    a = _accel([[0.0, 0.0, 1.5], [offset[0], offset[1], 1.5 + offset[2]]])
    assert (a[1] == 0).all()  # beside, too far below, or above


def test_it_follows_the_upper_drone_s_thrust_axis_and_adds_up():
    tilt = 0.3
    axis = [math.sin(tilt), 0.0, math.cos(tilt)]
    below = [-0.3 * axis[0], 0.0, 2.0 - 0.3 * axis[2]]  # 0.3 m down the tilted axis
    a = _accel([[0.0, 0.0, 2.0], below], axes=[axis, [0.0, 0.0, 1.0]])
    torch.testing.assert_close(a[1], -8.0 / 34.0 * G * torch.tensor(axis), rtol=1e-5, atol=1e-5)
    # two drones stacked above: 0.2 m and 0.4 m -> (10 + 6) g-force / 34 g
    a = _accel([[0.0, 0.0, 1.0], [0.0, 0.0, 1.2], [0.0, 0.0, 1.4]])
    assert float(a[0, 2]) == pytest.approx(-(10.0 + 6.0) / 34.0 * G, rel=1e-5)


def test_a_drone_hovering_below_another_sinks_through_the_dynamics():
    robot = load_robot("crazyflie2")
    params = QuadrotorParams.from_robot(robot, 3)
    dyn = QuadrotorDynamics(params, 0.01, motor_lag=False)
    dyn.pos_w[:] = torch.tensor([[0.0, 0.0, 1.5], [0.0, 0.0, 1.2], [0.5, 0.0, 1.2]])
    hover = (params.mass * params.gravity / 4.0).unsqueeze(-1).expand(3, 4)
    for _ in range(50):  # 0.5 s
        apply_downwash(dyn, 1)  # one room of three drones
        dyn.step(hover)
    dz = dyn.pos_w[:, 2] - torch.tensor([1.5, 1.2, 1.2])
    assert abs(float(dz[0])) < 1e-4 and abs(float(dz[2])) < 1e-4  # the upper one and the one beside it hover
    assert float(dz[1]) < -0.05  # ~0.24 g down: 0.5 * 2.3 * 0.5^2 = 0.29 m, less as it sinks out of the strongest part

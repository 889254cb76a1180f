"""Rotation helpers against hand computations."""

from __future__ import annotations

import torch

from sim2real.sim.rotations import quat_from_axis_angle, quat_from_yaw, quat_mul, tilt_from_quat


def test_tilt_is_the_angle_of_the_body_z_axis_from_vertical_whatever_the_heading():
    angles = torch.tensor([0.0, 0.3, 1.0, 2.5, 3.0])  # (float32 acos is coarse right at pi)
    for axis in ([1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.6, 0.8, 0.0]):
        tilted = quat_from_axis_angle(torch.tensor([axis] * 5), angles)
        turned = quat_mul(quat_from_yaw(torch.full((5,), 1.2)), tilted)   # a yaw does not tilt
        torch.testing.assert_close(tilt_from_quat(turned), angles, atol=1e-4, rtol=0)

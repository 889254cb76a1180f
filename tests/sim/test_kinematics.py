"""Foot points by forward kinematics (``sim2real.sim.kinematics``, the deploy node's feet): from a base pose and the
joint positions alone they equal the MuJoCo backend's ``foot_pos_w`` / ``foot_yaw_w`` of the same worlds (JVRC-1's
foot bodies; Go2's foot geoms), on a model compiled separately with other solver settings, welded joints and no
terrain boxes."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sim2real.configs import load_robot
from sim2real.sim.kinematics import FootKinematics, foot_yaw_from_xmat
from sim2real.sim.mujoco_backend import MujocoBackend
from sim2real.sim.mujoco_model import build_model
from sim2real.sim.rotations import quat_from_yaw, quat_mul

FAST = {"fidelity": "fast", "fast": {"timestep": 0.005, "cone": "pyramidal", "iterations": 4, "ls_iterations": 8},
        "control_dt": 0.025, "nthread": 1}


def test_foot_yaw_is_the_heading_of_the_x_axis():
    yaw = np.array([0.0, 0.7, -2.5, math.pi / 2])
    c, s = np.cos(yaw), np.sin(yaw)
    xmat = np.zeros((4, 9))
    xmat[:, 0], xmat[:, 1], xmat[:, 3], xmat[:, 4], xmat[:, 8] = c, -s, s, c, 1.0  # R_z(yaw)
    np.testing.assert_allclose(foot_yaw_from_xmat(xmat), yaw, atol=1e-12)


@pytest.mark.parametrize("name", ["jvrc1", "go2"])
def test_forward_kinematics_equals_the_backends_foot_points(name):
    robot = load_robot(name)
    n = 4
    sim_cfg = dict(FAST, weld_joints=[".*_SHOULDER_.*", ".*_ELBOW_.*"] if name == "jvrc1" else [])
    sim = MujocoBackend(robot, n, sim_cfg, terrain_boxes=2)
    g = torch.Generator().manual_seed(0)
    tilt = torch.nn.functional.normalize(torch.cat((torch.ones(n, 1), 0.2 * torch.randn(n, 3, generator=g)), -1),
                                         dim=-1)
    quat = quat_mul(quat_from_yaw(torch.rand(n, generator=g) * 6.0 - 3.0), tilt)
    pos = torch.randn(n, 3, generator=g)
    joints = sim.default_joint_pos + 0.3 * torch.randn(n, len(sim.default_joint_pos), generator=g)
    sim.reset(torch.arange(n), pos, quat, joints)  # (a reset leaves exact kinematics)
    state = sim.state()
    model, index = build_model(robot, {"fidelity": "full"})
    fk = FootKinematics(model, index)
    assert fk.num_feet == state["foot_pos_w"].shape[1]
    for i in range(n):
        q, b = sim._qpos[i], sim.index.base_qpos  # (the welded model's qpos layout)
        foot_pos, foot_yaw = fk(q[b:b + 3], q[b + 3:b + 7], q[sim.index.joint_qpos])
        np.testing.assert_allclose(foot_pos, state["foot_pos_w"][i].numpy(), atol=1e-5, rtol=0)
        np.testing.assert_allclose(foot_yaw, state["foot_yaw_w"][i].numpy(), atol=1e-5, rtol=0)
        assert np.abs(foot_pos - pos[i].numpy()).max() > 0.1  # the feet, not the base

"""The project's own Go2-class MJCF (``sim/models/go2``): names, published figures, and passive standing under PD.

Expected values are the published Unitree Go2 figures, written out here independently of the model file.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from sim2real.configs import load_robot
from sim2real.sim.robot import resolve_mjcf

mujoco = pytest.importorskip("mujoco")

LEGS = ("FL", "FR", "RL", "RR")
PARTS = ("hip", "thigh", "calf")
MOTOR_ORDER = ("FR", "FL", "RR", "RL")  # the real Go2's motor order
THIGH, CALF = 0.213, 0.213  # m
FOOT_RADIUS = 0.022  # m
HOME = {"hip": 0.0, "thigh": 0.9, "calf": -1.8}  # rad
RANGES = {  # rad
    "hip": (-1.0472, 1.0472),
    "front_thigh": (-1.5708, 3.4907),
    "rear_thigh": (-0.5236, 4.5379),
    "calf": (-2.7227, -0.83776),
}
TORQUE = {"hip": 23.7, "thigh": 23.7, "calf": 45.43}  # N m
KP, KD = 30.0, 0.8


@pytest.fixture(scope="module")
def model():
    return mujoco.MjModel.from_xml_path(str(resolve_mjcf(load_robot("go2")["mjcf"])))


def _pd_indices(m):
    """Per actuator (model order): qpos address, dof address and home target of the driven joint."""
    qadr, dadr, q0 = [], [], []
    for a in range(m.nu):
        j = m.actuator_trnid[a, 0]
        qadr.append(m.jnt_qposadr[j])
        dadr.append(m.jnt_dofadr[j])
        q0.append(HOME[m.joint(j).name.split("_")[1]])
    return np.array(qadr), np.array(dadr), np.array(q0)


def _run_pd(m, d, seconds, target):
    qadr, dadr, _ = _pd_indices(m)
    lo, hi = m.actuator_ctrlrange[:, 0], m.actuator_ctrlrange[:, 1]
    heights = []
    for _ in range(round(seconds / m.opt.timestep)):
        u = KP * (target(d.time) - d.qpos[qadr]) - KD * d.qvel[dadr]
        d.ctrl[:] = np.clip(u, lo, hi)
        mujoco.mj_step(m, d)
        heights.append(d.qpos[2])
    return np.array(heights)


def test_names_frames_and_actuator_order(model):
    m = model
    base = m.body("base")
    assert m.jnt_type[base.jntadr[0]] == mujoco.mjtJoint.mjJNT_FREE
    imu = m.site("imu")
    assert imu.bodyid[0] == base.id
    np.testing.assert_allclose(imu.quat, [1, 0, 0, 0])
    assert m.geom("floor").type[0] == mujoco.mjtGeom.mjGEOM_PLANE
    axes = {"hip": [1, 0, 0], "thigh": [0, 1, 0], "calf": [0, 1, 0]}
    for leg in LEGS:
        for part in PARTS:
            body = m.body(f"{leg}_{part}")
            joint = m.joint(f"{leg}_{part}_joint")
            assert joint.bodyid[0] == body.id
            np.testing.assert_allclose(joint.axis, axes[part])
        foot = m.geom(leg)
        assert foot.type[0] == mujoco.mjtGeom.mjGEOM_SPHERE
        assert foot.size[0] == pytest.approx(FOOT_RADIUS)
        assert foot.bodyid[0] == m.body(f"{leg}_calf").id
        np.testing.assert_allclose(foot.pos, [0, 0, -CALF])
    # Joints (qpos order) are FL, FR, RL, RR; actuators follow the real robot's FR, FL, RR, RL.
    joint_order = [m.joint(j).name for j in range(1, m.njnt)]
    act_joints = [m.joint(m.actuator_trnid[a, 0]).name for a in range(m.nu)]
    assert joint_order == [f"{leg}_{p}_joint" for leg in LEGS for p in PARTS]
    assert act_joints == [f"{leg}_{p}_joint" for leg in MOTOR_ORDER for p in PARTS]
    assert act_joints != joint_order and sorted(act_joints) == sorted(joint_order)
    for a in range(m.nu):
        assert m.actuator(a).name == act_joints[a].removesuffix("_joint")
        limit = TORQUE[act_joints[a].split("_")[1]]
        np.testing.assert_allclose(m.actuator_ctrlrange[a], [-limit, limit])
        assert m.actuator_gear[a, 0] == 1.0


def test_published_figures(model):
    m = model
    assert 14.0 <= m.body_subtreemass[m.body("base").id] <= 16.0
    for leg in LEGS:
        front = leg.startswith("F")
        np.testing.assert_allclose(m.joint(f"{leg}_hip_joint").range, RANGES["hip"])
        np.testing.assert_allclose(m.joint(f"{leg}_thigh_joint").range,
                                   RANGES["front_thigh" if front else "rear_thigh"])
        np.testing.assert_allclose(m.joint(f"{leg}_calf_joint").range, RANGES["calf"])
        sx, sy = 1 if front else -1, 1 if leg.endswith("L") else -1
        np.testing.assert_allclose(m.body(f"{leg}_hip").pos, [sx * 0.1934, sy * 0.0465, 0])
        np.testing.assert_allclose(m.body(f"{leg}_thigh").pos, [0, sy * 0.0955, 0])
        np.testing.assert_allclose(m.body(f"{leg}_calf").pos, [0, 0, -THIGH])
        assert m.body(f"{leg}_hip").mass[0] == pytest.approx(0.678)
        assert m.body(f"{leg}_thigh").mass[0] == pytest.approx(1.152)
        assert m.body(f"{leg}_calf").mass[0] == pytest.approx(0.241, abs=0.01)


def test_home_keyframe_feet_touch_floor(model):
    m = model
    d = mujoco.MjData(m)
    mujoco.mj_resetDataKeyframe(m, d, m.key("home").id)
    mujoco.mj_forward(m, d)
    # Planar two-link leg: foot centre 2 * L * cos(thigh) below the thigh joint when calf = -2 * thigh.
    drop = THIGH * math.cos(HOME["thigh"]) + CALF * math.cos(HOME["thigh"] + HOME["calf"])
    assert drop == pytest.approx(0.2648, abs=1e-4)
    for leg in LEGS:
        hip = d.xpos[m.body(f"{leg}_hip").id]
        foot = d.geom_xpos[m.geom(leg).id]
        assert hip[2] - foot[2] == pytest.approx(drop, abs=1e-6)
        assert foot[2] - FOOT_RADIUS == pytest.approx(0.0, abs=1e-3)  # just touching
    qadr, _, q0 = _pd_indices(m)
    np.testing.assert_allclose(d.qpos[qadr], q0)


def test_stands_under_pd(model):
    m = model
    d = mujoco.MjData(m)
    mujoco.mj_resetDataKeyframe(m, d, m.key("home").id)
    _, _, q0 = _pd_indices(m)
    h = _run_pd(m, d, 1.0, lambda t: q0)
    xy_1s = d.qpos[:2].copy()
    h = np.concatenate([h, _run_pd(m, d, 1.0, lambda t: q0)])
    assert np.all((h > 0.20) & (h < 0.32)), (h.min(), h.max())
    assert np.ptp(h[len(h) // 2:]) < 0.005  # settled
    assert np.linalg.norm(d.qpos[:2] - xy_1s) < 0.01  # no walking off in the second second
    assert np.linalg.norm(d.qpos[:2]) < 0.1  # the settling sag shifts the base a few cm at most
    assert d.qpos[3] > 0.99  # upright: quaternion w = cos(tilt / 2)
    foot_ids = {m.geom(leg).id for leg in LEGS}
    touching = {g for c in d.contact[: d.ncon] for g in (c.geom1, c.geom2)} & foot_ids
    assert touching == foot_ids
    body_geoms = {g for c in d.contact[: d.ncon] for g in (c.geom1, c.geom2)} - foot_ids - {m.geom("floor").id}
    assert not body_geoms  # only the feet touch the floor


def test_crouch_oscillation_is_stable(model):
    m = model
    d = mujoco.MjData(m)
    mujoco.mj_resetDataKeyframe(m, d, m.key("home").id)
    _, _, q0 = _pd_indices(m)
    pattern = np.array([{"hip": 0.0, "thigh": 1.0, "calf": -2.0}[m.joint(m.actuator_trnid[a, 0]).name.split("_")[1]]
                        for a in range(m.nu)])
    h = _run_pd(m, d, 2.0, lambda t: q0 + 0.25 * math.sin(2 * math.pi * t) * pattern)
    assert np.all(np.isfinite(d.qpos)) and np.all(np.isfinite(d.qvel))
    assert np.abs(d.qvel).max() < 20.0
    assert 0.1 < h.min() and h.max() < 0.35
    assert d.qpos[3] > 0.98


def test_an_imu_behind_a_joint_is_refused_and_one_on_the_base_is_accepted(tmp_path):
    """The IMU reads as the base: a site behind a joint (a torso IMU behind a waist) is refused at load, naming the
    joint; the shipped models' IMUs on their base bodies build."""
    import shutil

    from sim2real.configs import ConfigError
    from sim2real.sim.mujoco_model import build_model

    robot = load_robot("go2")
    _, index = build_model(robot)  # accepted: the IMU site sits on the base body
    assert index.imu_site >= 0
    src = resolve_mjcf(robot["mjcf"]).parent
    for f in src.glob("*.xml"):
        shutil.copy(f, tmp_path / f.name)
    go2 = (tmp_path / "go2.xml").read_text()
    site = '<site name="imu" pos="-0.02557 0 0.04232" size="0.01"/>'
    assert site in go2
    thigh = '<body name="FL_thigh" pos="0 0.0955 0">'
    (tmp_path / "go2.xml").write_text(go2.replace(site, "").replace(thigh, thigh + site))
    moved = {**robot, "mjcf": str(tmp_path / resolve_mjcf(robot["mjcf"]).name)}
    with pytest.raises(ConfigError, match=r"robot.imu_site: site 'imu' is on body 'FL_thigh', which moves relative "
                                          r"to the base body 'base' \(joint 'FL_thigh_joint'\)"):
        build_model(moved)

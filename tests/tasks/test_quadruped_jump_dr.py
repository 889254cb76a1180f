"""quadruped-jump domain randomisation really changes the simulated physics, per world (issue acceptance (d)).

Physics checks run the MuJoCo backend on Menagerie's real Go2 with chosen per-world values and compare with answers
written out here: Coulomb friction (a sliding robot loses ``mu g`` of speed per second), weight (the feet carry
``(M s + m_added) g`` with ``M`` summed from a plain ``MjModel``), the base centre of mass (front/rear load split
and moment balance about the simulated centre of mass), PD gains and motor strength (MuJoCo's own actuator force
against ``s (kp (q* - q) - kd dq)`` clamped at ``s`` times the motor limit), and pushes. Env checks build the task
from its config and verify that what ``LeggedDomainRandomization.randomise`` samples lands in each world's model, in
the privileged critic observation, and that pushes and action latency act as configured.
"""

from __future__ import annotations

import os

import copy
from pathlib import Path

import numpy as np
import pytest
import torch

from sim2real.configs import load_robot
from sim2real.sim.mujoco_backend import MujocoBackend
from sim2real.tasks import make_env, task_config

mujoco = pytest.importorskip("mujoco")

SHARED = Path(os.environ.get("SIM2REAL_SHARED") or Path(__file__).resolve().parents[2].parent / "shared")
GO2_SCENE = SHARED / "robots" / "unitree_go2" / "scene.xml"
needs_menagerie = pytest.mark.skipif(not GO2_SCENE.is_file(),
                                 reason=f"Menagerie's Go2 is not at {GO2_SCENE} (set SIM2REAL_SHARED)")
FAST = {"fidelity": "fast", "fast": {"timestep": 0.005, "cone": "pyramidal", "iterations": 4, "ls_iterations": 8},
        "control_dt": 0.02, "nthread": 1}
FULL = {"fidelity": "full", "control_dt": 0.02, "nthread": 1}
G = 9.81  # m/s^2, MuJoCo's default gravity (Menagerie's Go2 keeps it)
KP, KD = 40.0, 1.0  # go2.yaml's PD gains
TORQUE_LIMIT = np.tile([23.7, 23.7, 45.43], 4)  # N m, hip/thigh/calf, policy order
IDENTITY = (1.0, 0.0, 0.0, 0.0)


def _backend(n: int, sim_cfg=FAST) -> MujocoBackend:
    robot = copy.deepcopy(load_robot("go2"))
    robot["mjcf"] = str(GO2_SCENE)
    return MujocoBackend(robot, n, sim_cfg)


@pytest.fixture(scope="module")
def plain():
    return mujoco.MjModel.from_xml_path(str(GO2_SCENE))


def _stand(sim: MujocoBackend, seconds: float, z: float | None = None, **kw) -> torch.Tensor:
    """Reset every world to the default pose at height ``z`` (standing height) and hold it for ``seconds``."""
    n = sim.num_envs
    q0 = sim.default_joint_pos.expand(n, -1)
    z = sim.standing_height() if z is None else z
    sim.reset(torch.arange(n), torch.tensor([[0.0, 0.0, z]] * n), torch.tensor([IDENTITY] * n), q0, **kw)
    for _ in range(round(seconds / sim.control_dt)):
        sim.step(q0)
    return q0


# --- friction -----------------------------------------------------------------------------------------------------
@needs_menagerie
@pytest.mark.parametrize("fidelity, rel_tol", [("full", 0.05), ("fast", 0.4)])
def test_friction_changes_how_far_a_sliding_robot_goes(fidelity, rel_tol):
    """Both worlds stand, then get 1.5 m/s forward. While sliding, Coulomb friction removes mu g T of speed."""
    mu = torch.tensor([0.2, 1.0])
    sim = _backend(2, FULL if fidelity == "full" else FAST)
    sim.set_friction(torch.arange(2), mu)
    q0 = _stand(sim, 0.5)
    x0 = sim.state()["base_pos_w"][:, 0].clone()
    v0 = 1.5
    sim.push(torch.arange(2), torch.tensor([[v0, 0.0, 0.0]] * 2))
    steps = 15  # 0.3 s: the low-friction world is still sliding (it needs v0 / (mu g) = 0.76 s to stop)
    for _ in range(steps):
        sim.step(q0)
    lost = v0 - sim.state()["base_lin_vel_w"][:, 0]
    t = steps * sim.control_dt
    assert lost[0] == pytest.approx(float(mu[0]) * G * t, rel=rel_tol)
    assert lost[1] > 2.0 * lost[0]  # the grippy world brakes much harder
    for _ in range(35):  # 1 s in all: both have stopped
        sim.step(q0)
    slid = sim.state()["base_pos_w"][:, 0] - x0
    assert slid[0] > 3.0 * slid[1]
    assert slid[0] == pytest.approx(v0 ** 2 / (2 * float(mu[0]) * G), rel=0.3)  # 0.57 m


# --- mass ---------------------------------------------------------------------------------------------------------
@needs_menagerie
def test_mass_randomisation_changes_the_weight_on_the_feet(plain):
    scale = torch.tensor([0.8, 1.0, 1.2])
    added = torch.tensor([0.0, 1.5, -0.5])  # kg on the base
    sim = _backend(3)
    sim.set_body_mass(torch.arange(3), scale, added, torch.zeros(3, 3))
    _stand(sim, 1.0)
    total = float(plain.body_mass.sum())  # 15.2 kg
    expected = (total * scale + added) * G
    weight_on_feet = sim.state()["foot_contact"].sum(-1)
    torch.testing.assert_close(weight_on_feet, expected.float(), rtol=0.02, atol=0.0)
    base = plain.body("base").id
    for i in range(3):
        m = sim.batch.get_model(i)
        want = plain.body_mass * float(scale[i])
        want[base] += float(added[i])
        np.testing.assert_allclose(m.body_mass, want, rtol=1e-12)
        ratio = np.divide(want, plain.body_mass, out=np.ones_like(want), where=plain.body_mass > 0)
        np.testing.assert_allclose(m.body_inertia, plain.body_inertia * ratio[:, None], rtol=1e-12)
        assert m.body_subtreemass[base] == pytest.approx(total * float(scale[i]) + float(added[i]), rel=1e-12)


@needs_menagerie
def test_base_com_offset_moves_the_load_between_front_and_rear_feet(plain):
    offset = torch.tensor([[0.0, 0.0, 0.0], [0.03, 0.0, 0.0], [-0.03, 0.0, 0.0]])
    sim = _backend(3)
    sim.set_body_mass(torch.tensor([1, 2]), torch.ones(2), torch.zeros(2), offset[1:])
    base = plain.body("base").id
    for i in range(3):  # only the base's centre of mass of that world moves
        want = plain.body_ipos.copy()
        want[base] += offset[i].double().numpy()
        np.testing.assert_allclose(sim.batch.get_model(i).body_ipos, want, rtol=0, atol=1e-12)
    _stand(sim, 1.0)
    force = sim.state()["foot_contact"].double()  # FL, FR, RL, RR
    front = force[:, :2].sum(-1)
    # Static estimate of the shift: m_base g dx / (front-rear foot spacing, 0.38 m) = 5.4 N; the robot also
    # leans into it, so at least half of that.
    shift = float(plain.body_mass[base]) * G * 0.03 / 0.38
    assert front[1] - front[0] > 0.5 * shift
    assert front[0] - front[2] > 0.5 * shift
    feet = [sim.model.geom(name).id for name in ("FL", "FR", "RL", "RR")]
    for i in range(3):  # moment balance of the foot forces about the whole robot's simulated centre of mass
        model, data = sim.batch.get_model(i), sim.batch.get_data(i)
        mujoco.mj_forward(model, data)
        arm = torch.from_numpy(data.geom_xpos[feet, 0] - data.subtree_com[base, 0])
        assert abs(float((force[i] * arm).sum())) < 0.01 * float(force[i].sum()) * 0.38


# --- PD gains and motor strength ----------------------------------------------------------------------------------
@needs_menagerie
def test_pd_gains_and_motor_strength_change_the_torque(plain):
    names = load_robot("go2")["joint_names"]
    jids = [plain.joint(name).id for name in names]
    qadr, dadr = plain.jnt_qposadr[jids], plain.jnt_dofadr[jids]
    acts = [int(np.flatnonzero(plain.actuator_trnid[:, 0] == j)[0]) for j in jids]
    kp_s = torch.tensor([1.0, 1.5, 1.0, 1.0])
    kd_s = torch.tensor([1.0, 1.0, 2.0, 1.0])
    strength = torch.tensor([1.0, 1.0, 1.0, 0.5])
    # One physics step per control step: the joints are still far from far-off targets after it.
    sim = _backend(4, {**FAST, "control_dt": 0.005})
    sim.set_pd(torch.arange(4), kp_s, kd_s, strength)
    q0 = _stand(sim, 0.0, z=1.0, joint_vel=torch.full((4, 12), 2.0))  # in the air, joints moving
    far = q0.clone()
    far[:, 1::3] += 1.5  # thighs: 60 N m and more asked, far over the 23.7 N m limit
    forces = []
    for targets in (q0 + 0.1, far):
        sim.step(targets)
        tau = sim.joint_torque()
        forces.append([])
        for i in range(4):
            model, data = sim.batch.get_model(i), sim.batch.get_data(i)
            mujoco.mj_forward(model, data)
            q, dq = data.qpos[qadr], data.qvel[dadr]
            s = float(strength[i])
            want = np.clip(s * (KP * float(kp_s[i]) * (targets[i].numpy() - q) - KD * float(kd_s[i]) * dq),
                           -s * TORQUE_LIMIT, s * TORQUE_LIMIT)
            np.testing.assert_allclose(data.actuator_force[acts], want, rtol=1e-6, atol=1e-6)
            np.testing.assert_allclose(tau[i].numpy(), want, rtol=1e-4, atol=1e-4)
            forces[-1].append(data.actuator_force[acts])
    near, sat = forces
    # The four worlds really differ (stiffer, more damped, weaker)...
    assert min(np.abs(near[0] - f).max() for f in near[1:]) > 0.5
    # ...and the thighs saturate at the strength-scaled limit: 23.7 N m, or 11.85 N m at half strength.
    for i in range(4):
        np.testing.assert_allclose(sat[i][1::3], float(strength[i]) * 23.7, rtol=1e-9)


# --- pushes -------------------------------------------------------------------------------------------------------
@needs_menagerie
def test_push_adds_the_pushed_velocity_to_that_world_only():
    sim = _backend(3)
    q0 = _stand(sim, 0.4)
    before = sim.state()
    x0 = before["base_pos_w"][:, 0].clone()
    sim.push(torch.tensor([1]), torch.tensor([[0.8, -0.3, 0.0]]))
    after = sim.state()
    torch.testing.assert_close(after["base_lin_vel_w"][1] - before["base_lin_vel_w"][1],
                               torch.tensor([0.8, -0.3, 0.0]), rtol=0, atol=1e-6)
    for k in after:
        torch.testing.assert_close(after[k][[0, 2]], before[k][[0, 2]], rtol=0, atol=0)
    sim.step(q0)
    moved = sim.state()["base_pos_w"][:, 0] - x0
    assert moved[1] - moved[0] == pytest.approx(0.8 * sim.control_dt, rel=0.5)
    assert moved[0] == pytest.approx(float(moved[2]), abs=1e-6)


# --- through the task env -----------------------------------------------------------------------------------------
def _env(n: int, *overrides: str, seed: int = 0, **kw):
    torch.manual_seed(seed)
    cfg = task_config("quadruped-jump", ["sim.nthread=1", f"env.num_envs={n}", "domain_rand.push_prob=0.0",
                                         *overrides])
    return make_env(cfg, **kw), cfg


def test_sampled_parameters_land_in_each_world():
    env, cfg = _env(6, "domain_rand.friction=[0.3,1.3]", "domain_rand.mass_scale=[0.7,1.3]",
                    "domain_rand.base_added_mass=[-1.0,2.0]", "domain_rand.base_com_offset=0.05",
                    "domain_rand.kp_scale=[0.5,1.5]", "domain_rand.kd_scale=[0.5,1.5]",
                    "domain_rand.motor_strength=[0.6,1.0]", "domain_rand.latency_steps=[0,1]")
    plain = mujoco.MjModel.from_xml_path(str(_project_model()))
    p, dr = env.dr.params, cfg["domain_rand"]
    for key in ("friction", "mass_scale", "base_added_mass", "kp_scale", "kd_scale", "motor_strength"):
        lo, hi = dr[key]
        assert ((p[key] >= lo) & (p[key] <= hi)).all(), key
        assert p[key].std() > 0.05 * (hi - lo), f"{key} is not sampled per env"
    assert (env.dr.com_offset.abs() <= 0.05).all() and env.dr.com_offset.std() > 0.005
    idx = env.sim.index
    base = idx.base_body
    # Geom ids by name in the env's own model (its obstacle is a world geom: the robot's geom ids shift).
    floor = env.sim.model.geom("floor").id
    feet = [env.sim.model.geom(name).id for name in cfg["robot"]["foot_geoms"]]
    strength = p["motor_strength"].double()
    for i in range(6):
        m = env.sim.batch.get_model(i)
        np.testing.assert_allclose(m.geom_friction[[floor, *feet], 0], float(p["friction"][i]), rtol=1e-6)
        robot_bodies = slice(1, plain.nbody)
        want = plain.body_mass[robot_bodies] * float(p["mass_scale"][i])
        want[base - 1] += float(p["base_added_mass"][i])
        np.testing.assert_allclose(m.body_mass[robot_bodies], want, rtol=1e-6)
        np.testing.assert_allclose(m.body_ipos[base], plain.body_ipos[base] + env.dr.com_offset[i].double().numpy(),
                                   atol=1e-7)
        s = float(strength[i])
        kp = KP * float(p["kp_scale"][i]) * s
        kd = KD * float(p["kd_scale"][i]) * s
        a = idx.actuator_ids
        np.testing.assert_allclose(m.actuator_gainprm[a, 0], kp, rtol=1e-6)
        np.testing.assert_allclose(m.actuator_biasprm[a, 1], -kp, rtol=1e-6)
        np.testing.assert_allclose(m.actuator_biasprm[a, 2], -kd, rtol=1e-6)
        np.testing.assert_allclose(m.actuator_forcerange[a, 1], s * TORQUE_LIMIT, rtol=1e-6)
    # The privileged critic observation carries them (last 10 columns).
    priv = env.get_observations()["critic"][:, -10:]
    want = torch.cat((p["friction"][:, None], p["mass_scale"][:, None] - 1, p["base_added_mass"][:, None],
                      env.dr.com_offset * 10, p["motor_strength"][:, None] - 1, p["kp_scale"][:, None] - 1,
                      p["kd_scale"][:, None] - 1, env.dr.latency[:, None].float()), dim=-1)
    torch.testing.assert_close(priv, want)


def _project_model() -> Path:
    from sim2real.sim.robot import resolve_mjcf

    return resolve_mjcf(load_robot("go2")["mjcf"])


def test_disabled_randomisation_keeps_the_nominal_model():
    env, _ = _env(3, "domain_rand.enabled=false")
    plain = mujoco.MjModel.from_xml_path(str(_project_model()))
    for i in range(3):
        m = env.sim.batch.get_model(i)
        np.testing.assert_allclose(m.body_mass[: plain.nbody], plain.body_mass)
        np.testing.assert_allclose(m.body_ipos[: plain.nbody], plain.body_ipos)
        np.testing.assert_allclose(m.actuator_gainprm[env.sim.index.actuator_ids, 0], KP)
    assert (env.dr.latency == 0).all() and env.dr.action_history.shape[1] == 1


def test_env_pushes_within_the_configured_velocity():
    env, _ = _env(16, "domain_rand.push_prob=1.0", "domain_rand.push_velocity=0.3")
    v0 = env.sim.state()["base_lin_vel_w"]
    env.dr.maybe_push()
    dv = env.sim.state()["base_lin_vel_w"] - v0
    assert (dv[:, 2] == 0).all()
    assert (dv[:, :2].abs() <= 0.3 + 1e-6).all()
    assert (dv[:, :2].abs() > 0).all() and dv[:, 0].std() > 0.05  # every env pushed, each its own way

    quiet, _ = _env(4, "domain_rand.push_prob=0.0", "domain_rand.push_velocity=0.3")
    v0 = quiet.sim.state()["base_lin_vel_w"]
    quiet.dr.maybe_push()
    torch.testing.assert_close(quiet.sim.state()["base_lin_vel_w"], v0, rtol=0, atol=0)


@pytest.mark.parametrize("latency", [0, 1])
def test_action_latency_delays_the_targets(latency):
    env, cfg = _env(2, f"domain_rand.latency_steps=[{latency},{latency}]")
    a = cfg["robot"]["action_scale"]
    ctrl = env.sim.batch.bind("ctrl")
    targets = lambda: torch.from_numpy(ctrl[:, env.sim.index.actuator_ids].copy()).float()
    q0 = env.default_joint_pos
    a1 = torch.full((2, 12), 0.5)
    a2 = torch.full((2, 12), -0.5)
    env.step(a1)
    first = targets()
    env.step(a2)
    second = targets()
    if latency == 0:
        torch.testing.assert_close(first, q0 + a * a1)
        torch.testing.assert_close(second, q0 + a * a2)
    else:
        torch.testing.assert_close(first, q0)
        torch.testing.assert_close(second, q0 + a * a1)

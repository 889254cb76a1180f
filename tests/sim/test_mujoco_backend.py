"""MuJoCo legged backend (``sim2real.sim.mujoco_backend``) on Menagerie's real Go2 (actuators FR, FL, RR, RL;
joints FL, FR, RL, RR): joints mapped by name, PD servos inside MuJoCo, control-step timing per fidelity, standing
height, partial resets, unstable-world detection and robot-config errors.

Right answers come from a plain ``mujoco.MjModel`` of the same MJCF (names looked up there), from MuJoCo's own
``actuator_force`` on a plain ``MjData`` copied out of the batch, and from the PD law written out here.
"""

from __future__ import annotations

import os

import copy
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from sim2real.configs import ConfigError, load_robot
from sim2real.sim.mujoco_backend import MujocoBackend

mujoco = pytest.importorskip("mujoco")

SHARED = Path(os.environ.get("SIM2REAL_SHARED") or Path(__file__).resolve().parents[2].parent / "shared")
MENAGERIE = SHARED / "robots"
GO2_SCENE = MENAGERIE / "unitree_go2" / "scene.xml"
pytestmark = pytest.mark.skipif(not GO2_SCENE.is_file(),
                                 reason=f"Menagerie's Go2 is not at {GO2_SCENE} (set SIM2REAL_SHARED)")

FAST = {"fidelity": "fast", "fast": {"timestep": 0.005, "cone": "pyramidal", "iterations": 4, "ls_iterations": 8},
        "control_dt": 0.02, "nthread": 1}
FULL = {"fidelity": "full", "control_dt": 0.02, "nthread": 1}
KP, KD = 40.0, 1.0  # go2.yaml's stiffness / damping, written out
TORQUE_LIMIT = {"hip": 23.7, "thigh": 23.7, "calf": 45.43}  # N m, the Go2's motor limits (Menagerie ctrlrange)
IDENTITY = (1.0, 0.0, 0.0, 0.0)


def _robot(**changes) -> dict:
    robot = copy.deepcopy(load_robot("go2"))
    robot["mjcf"] = str(GO2_SCENE)
    robot.update(changes)
    return robot


@pytest.fixture(scope="module")
def plain():
    """Menagerie's Go2 as MuJoCo compiles it, untouched by sim2real."""
    return mujoco.MjModel.from_xml_path(str(GO2_SCENE))


def _backend(n: int, sim_cfg=FAST, **changes) -> MujocoBackend:
    return MujocoBackend(_robot(**changes), n, sim_cfg)


def _place(sim: MujocoBackend, z: float, joint_pos: torch.Tensor | None = None, **kw) -> None:
    n = sim.num_envs
    q = sim.default_joint_pos.expand(n, -1) if joint_pos is None else joint_pos
    sim.reset(torch.arange(n), torch.tensor([[0.0, 0.0, z]] * n), torch.tensor([IDENTITY] * n), q, **kw)


def _joint_addresses(plain, names):
    ids = [mujoco.mj_name2id(plain, mujoco.mjtObj.mjOBJ_JOINT, n) for n in names]
    assert min(ids) >= 0
    return plain.jnt_qposadr[ids], plain.jnt_dofadr[ids], ids


def _actuator_of(plain, joint_id: int) -> int:
    acts = np.flatnonzero(plain.actuator_trnid[:, 0] == joint_id)
    assert len(acts) == 1
    return int(acts[0])


def _mujoco_forces(sim: MujocoBackend, world: int) -> np.ndarray:
    """MuJoCo's own actuator_force of one world, evaluated on a plain MjData at the world's current state."""
    model, data = sim.batch.get_model(world), sim.batch.get_data(world)
    mujoco.mj_forward(model, data)
    return data.actuator_force.copy()


# --- joint mapping ------------------------------------------------------------------------------------------------
def test_target_on_fr_calf_moves_only_that_joint(plain):
    names = load_robot("go2")["joint_names"]
    fr_calf = names.index("FR_calf_joint")
    assert plain.actuator(_actuator_of(plain, plain.joint("FR_calf_joint").id)).name == "FR_calf"  # actuator 2
    sim = _backend(2)
    _place(sim, 1.5)  # in the air: nothing but the commanded joint has a reason to move
    targets = sim.default_joint_pos.expand(2, -1).clone()
    for _ in range(3):
        sim.step(targets)
    before = sim.state()["joint_pos"].clone()
    targets[:, fr_calf] += 0.4
    for _ in range(5):
        sim.step(targets)
    moved = sim.state()["joint_pos"] - before
    assert (moved[:, fr_calf] > 0.2).all()
    others = torch.ones(12, dtype=torch.bool)
    others[fr_calf] = False
    assert moved[:, others].abs().max() < 0.01

    # state()["joint_pos"] / ["joint_vel"] columns are the named joints' qpos / qvel in MuJoCo's own layout.
    qadr, dadr, _ = _joint_addresses(plain, names)
    state = sim.state()
    for world in range(2):
        data = sim.batch.get_data(world)
        np.testing.assert_allclose(state["joint_pos"][world].numpy(), data.qpos[qadr], rtol=0, atol=1e-6)
        np.testing.assert_allclose(state["joint_vel"][world].numpy(), data.qvel[dadr], rtol=1e-6, atol=1e-5)
        np.testing.assert_allclose(state["base_pos_w"][world].numpy(), data.qpos[:3], rtol=0, atol=1e-6)
        np.testing.assert_allclose(state["base_quat_w"][world].numpy(), data.qpos[3:7], rtol=0, atol=1e-6)
    # ...and the MuJoCo control of FR_calf's own actuator holds the FR_calf target.
    ctrl = sim.batch.get_data(0).ctrl
    assert ctrl[_actuator_of(plain, plain.joint("FR_calf_joint").id)] == pytest.approx(-1.8 + 0.4, abs=1e-6)
    assert ctrl[_actuator_of(plain, plain.joint("FL_calf_joint").id)] == pytest.approx(-1.8, abs=1e-6)


# --- PD servos ----------------------------------------------------------------------------------------------------
def test_pd_torque_matches_law_and_mujoco_actuator_force(plain):
    names = load_robot("go2")["joint_names"]
    qadr, dadr, jids = _joint_addresses(plain, names)
    acts = [_actuator_of(plain, j) for j in jids]
    sim = _backend(2)
    _place(sim, sim.standing_height())
    targets = sim.default_joint_pos.expand(2, -1).clone()
    targets += torch.linspace(-0.3, 0.3, 12)  # every joint off its target; the joints are moving after the steps
    for _ in range(3):
        sim.step(targets)
    tau = sim.joint_torque()
    for world in range(2):
        data = sim.batch.get_data(world)
        q, dq = data.qpos[qadr], data.qvel[dadr]
        assert np.abs(dq).max() > 0.1  # the damping term is exercised
        limit = np.array([TORQUE_LIMIT[n.split("_")[1]] for n in names])
        expected = np.clip(KP * (targets[world].numpy() - q) - KD * dq, -limit, limit)
        np.testing.assert_allclose(tau[world].numpy(), expected, rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(_mujoco_forces(sim, world)[acts], expected, rtol=1e-6, atol=1e-6)


def test_pd_torque_saturates_at_the_motor_limit(plain):
    names = load_robot("go2")["joint_names"]
    _, _, jids = _joint_addresses(plain, names)
    acts = [_actuator_of(plain, j) for j in jids]
    # One physics step per control step, so the joints have no time to reach the targets.
    sim = _backend(1, {**FAST, "control_dt": 0.005}, stiffness={".*": 200.0})
    assert sim.decimation == 1
    _place(sim, 1.0)
    far = sim.default_joint_pos.unsqueeze(0).clone()
    far[:, 0::3] += 0.8    # hips: 160 N m asked
    far[:, 1::3] += 1.5    # thighs: 300 N m asked
    far[:, 2::3] -= 0.8    # calves: -160 N m asked
    sim.step(far)
    limit = np.array([TORQUE_LIMIT[n.split("_")[1]] for n in names])
    sign = np.tile([1.0, 1.0, -1.0], 4)
    np.testing.assert_allclose(sim.joint_torque()[0].numpy(), sign * limit, rtol=1e-6)
    np.testing.assert_allclose(_mujoco_forces(sim, 0)[acts], sign * limit, rtol=1e-9)
    # The model's own ctrl limits of the motors are the limits the servos got.
    np.testing.assert_allclose(plain.actuator_ctrlrange[acts, 1], limit)


def test_targets_are_clamped_to_the_joint_ranges(plain):
    names = load_robot("go2")["joint_names"]
    _, _, jids = _joint_addresses(plain, names)
    sim = _backend(1)
    _place(sim, 1.0)
    sim.step(torch.full((1, 12), 10.0))
    ctrl = sim.batch.get_data(0).ctrl
    np.testing.assert_allclose(ctrl[[_actuator_of(plain, j) for j in jids]], plain.jnt_range[jids, 1], atol=1e-6)


# --- timing and fidelity ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fidelity", ["fast", "full"])
def test_one_step_is_one_control_period(plain, fidelity):
    sim_cfg = FAST if fidelity == "fast" else FULL
    sim = _backend(2, sim_cfg)
    opt = sim.model.opt
    if fidelity == "fast":
        assert (opt.timestep, opt.cone, opt.iterations, opt.ls_iterations) == (
            0.005, mujoco.mjtCone.mjCONE_PYRAMIDAL, 4, 8)
        assert sim.decimation == 4
    else:  # the model's own: Menagerie's Go2 is elliptic with impratio 100 at MuJoCo's default 2 ms
        assert opt.timestep == plain.opt.timestep == 0.002
        assert opt.cone == plain.opt.cone == mujoco.mjtCone.mjCONE_ELLIPTIC
        assert opt.impratio == plain.opt.impratio == 100.0
        assert opt.iterations == plain.opt.iterations and opt.ls_iterations == plain.opt.ls_iterations
        assert sim.decimation == 10
    _place(sim, sim.standing_height())
    t0 = np.array([sim.batch.get_data(i).time for i in range(2)])
    np.testing.assert_array_equal(t0, 0.0)
    q0 = sim.default_joint_pos.expand(2, -1)
    for k in range(1, 4):
        sim.step(q0)
        for i in range(2):
            assert sim.batch.get_data(i).time == pytest.approx(k * 0.02, abs=1e-12)


def test_control_period_not_a_whole_number_of_timesteps():
    with pytest.raises(ConfigError, match="sim.control_dt"):
        _backend(1, {**FAST, "control_dt": 0.021})


@pytest.mark.parametrize("sim_cfg, key", [
    ({**FAST, "fidelity": "medium"}, "sim.fidelity"),
    ({**FAST, "fast": {"cone": "round"}}, "sim.fast.cone"),
    ({**FAST, "fast": {"substeps": 3}}, "sim.fast.substeps"),
])
def test_bad_solver_settings_name_the_key(sim_cfg, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        _backend(1, sim_cfg)


# --- standing height ----------------------------------------------------------------------------------------------
def test_standing_height_puts_the_lowest_foot_on_the_ground(plain):
    sim = _backend(1)
    h = sim.standing_height()
    robot = load_robot("go2")
    qadr, _, _ = _joint_addresses(plain, robot["joint_names"])
    data = mujoco.MjData(plain)
    data.qpos[:7] = [0.0, 0.0, h, *IDENTITY]
    data.qpos[qadr] = np.tile([0.0, 0.9, -1.8], 4)
    mujoco.mj_forward(plain, data)
    feet = [plain.geom(name).id for name in robot["foot_geoms"]]
    bottoms = data.geom_xpos[feet, 2] - plain.geom_size[feet, 0]
    assert bottoms.min() == pytest.approx(0.0, abs=1e-9)
    # MuJoCo's collision agrees: the lowest foot touches the floor at zero penetration.
    floor = plain.geom("floor").id
    dists = [data.contact[c].dist for c in range(data.ncon)
             if {data.contact[c].geom1, data.contact[c].geom2} & set(feet) and floor in data.contact[c].geom]
    assert dists and min(abs(d) for d in dists) < 1e-6
    assert 0.25 < h < 0.32  # the Go2's home pose stands about 0.27-0.29 m tall


def test_settled_height_is_where_the_batch_settles():
    """settled_height() (one plain MjData) agrees with a batch world standing 1 s from the standing height."""
    sim = _backend(2)
    _place(sim, sim.standing_height())
    q0 = sim.default_joint_pos.expand(2, -1)
    for _ in range(50):
        sim.step(q0)
    z = sim.state()["base_pos_w"][:, 2]
    settled = sim.settled_height()
    torch.testing.assert_close(z, torch.full((2,), settled), rtol=0, atol=1e-5)
    assert 0.15 < settled < sim.standing_height() - 0.01  # the servos sag under the weight


# --- partial reset ------------------------------------------------------------------------------------------------
def test_reset_of_a_subset_leaves_the_other_worlds_untouched():
    sim = _backend(3)
    _place(sim, sim.standing_height())
    targets = sim.default_joint_pos.expand(3, -1).clone()
    targets[:, 1::3] += torch.tensor([[0.2], [-0.1], [0.3]])  # the three worlds move differently
    for _ in range(5):
        sim.step(targets)
    keep = [0, 2]
    before = {k: sim.batch.bind(k)[keep].copy() for k in ("qpos", "qvel", "ctrl", "act", "time")}
    state_before = {k: v[keep].clone() for k, v in sim.state().items()}
    joint_pos = sim.default_joint_pos.unsqueeze(0) + 0.05
    sim.reset(torch.tensor([1]), torch.tensor([[0.5, -0.5, 0.4]]), torch.tensor([[0.0, 0.0, 0.0, 1.0]]), joint_pos,
              base_lin_vel_w=torch.tensor([[0.1, 0.2, 0.3]]))
    for k, v in before.items():
        np.testing.assert_array_equal(sim.batch.bind(k)[keep], v, err_msg=k)
    state = sim.state()
    for k, v in state_before.items():
        torch.testing.assert_close(state[k][keep], v, rtol=0, atol=0)
    torch.testing.assert_close(state["base_pos_w"][1], torch.tensor([0.5, -0.5, 0.4]))
    torch.testing.assert_close(state["base_quat_w"][1], torch.tensor([0.0, 0.0, 0.0, 1.0]))
    torch.testing.assert_close(state["base_lin_vel_w"][1], torch.tensor([0.1, 0.2, 0.3]))
    torch.testing.assert_close(state["joint_pos"][1], joint_pos[0])
    assert (state["joint_vel"][1] == 0).all() and sim.batch.get_data(1).time == 0.0
    # The reset world's targets are its new joint positions (it holds that pose).
    torch.testing.assert_close(sim.joint_torque()[1], torch.zeros(12), rtol=0, atol=1e-4)


# --- unstable worlds ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [float("nan"), 1e12])
def test_unstable_world_is_flagged_alone(bad):
    sim = _backend(3)
    _place(sim, sim.standing_height())
    q0 = sim.default_joint_pos.expand(3, -1)
    for _ in range(3):
        sim.step(q0)
    assert not sim.unstable.any() and sim.num_unstable == 0
    sim.batch.bind("qvel")[1, 0] = bad  # DOF 0: base x velocity
    sim.step(q0)
    assert sim.unstable.tolist() == [False, True, False]
    assert sim.num_unstable == 1
    state = sim.state()
    for k in ("base_pos_w", "base_lin_vel_w", "joint_pos", "joint_vel"):
        assert torch.isfinite(state[k][[0, 2]]).all(), k
    sim.step(q0)  # flagged once, after the step that broke it
    assert not sim.unstable.any() and sim.num_unstable == 1
    # The task resets a flagged world; when it breaks again (same DOF) it is flagged and counted again.
    _place(sim, sim.standing_height())
    sim.batch.bind("qvel")[1, 0] = bad
    sim.batch.bind("qvel")[2, 0] = bad
    sim.step(q0)
    assert sim.unstable.tolist() == [False, True, True] and sim.num_unstable == 3


def test_a_world_moving_implausibly_fast_is_flagged_before_mujoco_would():
    """A finite base velocity of 2e3 m/s (upwards, away from every contact: MuJoCo's own checks start at 1e10 and
    the world goes on stepping, as worlds on a compliant floor were seen to with joints at 1e7 rad/s) flags the world
    (MAX_PLAUSIBLE_VELOCITY, 1e3); 5 m/s, a jump's take-off speed, does not."""
    from sim2real.sim.robot import MAX_PLAUSIBLE_VELOCITY

    assert MAX_PLAUSIBLE_VELOCITY == 1e3
    sim = _backend(3)
    _place(sim, sim.standing_height())
    q0 = sim.default_joint_pos.expand(3, -1)
    sim.step(q0)
    sim.batch.bind("qvel")[1, 2] = 2e3  # DOF 2: base z velocity
    sim.batch.bind("qvel")[2, 2] = 5.0
    sim.step(q0)
    assert sim.unstable.tolist() == [False, True, False] and sim.num_unstable == 1
    assert float(sim.state()["base_lin_vel_w"][1, 2]) > MAX_PLAUSIBLE_VELOCITY  # not reset by MuJoCo: the task must


def test_reset_clears_the_unstable_flag():
    sim = _backend(2)
    _place(sim, sim.standing_height())
    q0 = sim.default_joint_pos.expand(2, -1)
    sim.batch.bind("qvel")[0, 0] = float("nan")
    sim.step(q0)
    assert sim.unstable.tolist() == [True, False]
    sim.reset(torch.tensor([0]), torch.tensor([[0.0, 0.0, sim.standing_height()]]), torch.tensor([IDENTITY]),
              q0[:1])
    assert not sim.unstable.any()
    sim.step(q0)
    assert not sim.unstable.any() and sim.num_unstable == 1
    assert torch.isfinite(sim.state()["base_lin_vel_w"]).all()


# --- robot config errors ------------------------------------------------------------------------------------------
def _rename(key: str, old: str, new: str) -> dict:
    values = list(load_robot("go2")[key])
    values[values.index(old)] = new
    return {key: values}


@pytest.mark.parametrize("changes, key, name", [
    (_rename("joint_names", "FR_calf_joint", "FX_calf_joint"), "robot.joint_names", "FX_calf_joint"),
    (_rename("foot_geoms", "RL", "RL_foot"), "robot.foot_geoms", "RL_foot"),
    ({"imu_site": "imu_link"}, "robot.imu_site", "imu_link"),
    ({"base_body": "trunk"}, "robot.base_body", "trunk"),
    ({"termination_contact_bodies": ["base", "FL_knee"]}, "robot.termination_contact_bodies", "FL_knee"),
    ({"mjcf": "/nonexistent/unitree_go2/scene.xml"}, "robot.mjcf", "/nonexistent/unitree_go2/scene.xml"),
    ({"actuation": "torque"}, "robot.actuation", "position"),
])
def test_bad_robot_config_names_the_item(changes, key, name):
    with pytest.raises(ConfigError) as info:
        _backend(1, **changes)
    assert key in str(info.value) and name in str(info.value)


def test_non_legged_robot_is_refused():
    with pytest.raises(ConfigError, match="not a legged robot"):
        MujocoBackend(load_robot("crazyflie2"), 1, FAST)


def test_menagerie_path_through_menagerie_root(monkeypatch, plain):
    monkeypatch.setenv("MENAGERIE_ROOT", str(MENAGERIE))
    sim = _backend(1, mjcf="menagerie:unitree_go2/scene.xml")
    assert (sim.model.nq, sim.model.nv, sim.model.nu) == (plain.nq, plain.nv, plain.nu) == (19, 18, 12)
    np.testing.assert_allclose(sim.model.body_mass, plain.body_mass)


def test_menagerie_path_without_menagerie_fails_clearly(monkeypatch, tmp_path):
    monkeypatch.delenv("MENAGERIE_ROOT", raising=False)
    monkeypatch.setitem(sys.modules, "mujoco_menagerie", None)  # no package either
    with pytest.raises(ConfigError, match="MENAGERIE_ROOT") as info:
        _backend(1, mjcf="menagerie:unitree_go2/scene.xml")
    assert "robot.mjcf" in str(info.value)
    monkeypatch.setenv("MENAGERIE_ROOT", str(tmp_path))  # a root that lacks the robot
    with pytest.raises(ConfigError, match="model file not found") as info:
        _backend(1, mjcf="menagerie:unitree_go2/scene.xml")
    assert str(tmp_path / "unitree_go2" / "scene.xml") in str(info.value)


def test_an_mjcf_folder_is_refused_naming_its_files(tmp_path):
    from sim2real.sim.robot import resolve_mjcf

    (tmp_path / "scene.xml").write_text("<mujoco/>")
    (tmp_path / "go2.xml").write_text("<mujoco/>")
    with pytest.raises(ConfigError, match=r"is a folder; name the MJCF file in it \(go2.xml, scene.xml\)$"):
        resolve_mjcf(str(tmp_path))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ConfigError, match=r"holds no .xml file"):
        resolve_mjcf(str(empty))
    assert resolve_mjcf(str(tmp_path / "scene.xml")) == tmp_path / "scene.xml"


# --- terrain ------------------------------------------------------------------------------------------------------
def test_robots_stand_on_their_terrain_tiles():
    """Per-env terrain levels: every world shares one tiled heightfield; a robot reset at a tile's spawn origin
    stands on that tile at the tile's height plus its flat-ground settled height."""
    from sim2real.sim.terrain import generate_terrain

    terrain = generate_terrain({"num_rows": 2, "num_cols": 2, "tile_size": 4.0, "types": {"flat": 1, "stairs_down": 1},
                                "max_step_height": 0.1, "platform_size": 1.0}, seed=0)
    robot = load_robot("go2")
    # The fast settings' 4 solver iterations do not converge on heightfield contacts (the robot sits 1-2 cm low):
    # terrain tasks need the model's own solver settings or more iterations.
    sim = MujocoBackend(robot, 3, FULL, terrain=terrain)
    flat = MujocoBackend(robot, 1, FULL)
    tiles = [(0, 0), (1, 1), (1, 0)]  # flat level 0, stairs_down level 1 (raised platform), flat level 1
    origins = torch.tensor(np.stack([terrain.tile_origins[r, c] for r, c in tiles]), dtype=torch.float32)
    assert origins[1, 2] > 0.05  # the raised platform of a level-1 stairs_down tile
    pos = origins.clone()
    pos[:, 2] += sim.standing_height() + 0.01
    quat = torch.tensor([[1.0, 0.0, 0.0, 0.0]]).repeat(3, 1)
    sim.reset(torch.arange(3), pos, quat, sim.default_joint_pos.repeat(3, 1))
    for _ in range(50):
        sim.step(sim.default_joint_pos.repeat(3, 1))
    height = sim.state()["base_pos_w"][:, 2]
    expected = origins[:, 2] + flat.settled_height()
    torch.testing.assert_close(height, expected, atol=0.005, rtol=0)
    np.testing.assert_allclose(sim.state()["foot_contact"].sum(1).numpy(),
                               float(sim.model.body_subtreemass[1]) * 9.81, rtol=0.05)


def test_a_model_without_ground_is_refused_by_name():
    robot = dict(load_robot("go2"), mjcf=str(GO2_SCENE.parent / "go2.xml"))  # the bare robot file, no floor
    with pytest.raises(ConfigError, match="robot.mjcf: go2.xml has no ground"):
        MujocoBackend(robot, 1, FAST)


def test_obstacle_and_terrain_box_yaw_is_honoured_per_world():
    """Each world's obstacle and terrain boxes stand at their own yaw in the batch's collision geometry (a ray
    along x at y = 0.3 meets a 0.1 x 1.0 m box across its path only when it is not turned by 90 degrees)."""
    import numpy as np

    from sim2real.sim.backends import make_legged_backend
    from sim2real.tasks import task_config

    cfg = task_config("quadruped-jump", ["sim.nthread=1"])
    sim = make_legged_backend(cfg["robot"], 2, cfg["sim"], obstacle=True, terrain_boxes=1)
    ids = torch.tensor([0, 1])
    sim.set_obstacle(ids, torch.tensor([[1.0, 0.0, 0.1]] * 2), torch.tensor([[0.05, 0.5, 0.1]] * 2),
                     torch.tensor([0.0, math.pi / 2]))
    sim.set_terrain_boxes(ids, torch.tensor([[[3.0, 0.0, 0.1]]] * 2), torch.tensor([[[0.05, 0.5, 0.1]]] * 2),
                          torch.tensor([[[1.0, 0.0, 0.0, 0.0]], [[math.cos(math.pi / 4), 0.0, 0.0, math.sin(math.pi / 4)]]]))
    dist, geom = sim.batch.ray(np.array([[-5.0, 0.3, 0.1]]), np.array([[1.0, 0.0, 0.0]]))
    assert dist[0, 0] == pytest.approx(5.95) and geom[0, 0] == sim.index.obstacle_geom  # across: hit at x = 0.95
    assert geom[1, 0] == -1  # both turned along the ray: it passes beside them (y = 0.3 > 0.05)


def test_moved_boxes_carry_the_robot():
    """Terrain boxes and the obstacle moved at run time are solid, not only seen by rays (the world body's BVH is
    refitted; before, the midphase culled them at their parked compile-time bounds and robots stood in them). A
    Go2 dropped onto a 0.2 m box (turned 30 degrees) or onto the obstacle stays 0.2 m higher than one dropped on
    the floor beside a long box turned 90 degrees, at a point where the unturned box would carry all four feet.
    The masses are randomised first, as an env's reset does: ``mj_setConst`` with the boxes parked unturned made the
    physics ignore their later yaw (every turned box stood axis-aligned in the first episode of each world)."""
    from sim2real.sim.backends import make_legged_backend
    from sim2real.tasks import task_config

    cfg = task_config("quadruped-jump", ["sim.nthread=1"])
    sim = make_legged_backend(cfg["robot"], 3, cfg["sim"], obstacle=True, terrain_boxes=1)
    ids = torch.arange(3)
    sim.set_body_mass(ids, torch.ones(3), torch.zeros(3), torch.zeros(3, 3))  # mj_setConst, boxes still parked
    def yaw_quat(deg):
        return [math.cos(math.radians(deg) / 2), 0.0, 0.0, math.sin(math.radians(deg) / 2)]
    far = [60.0, 60.0, 0.1]
    # World 0: the terrain box under the robot; world 1: the obstacle there instead; world 2: a 3.0 x 0.6 m box
    # turned 90 degrees (along y: x in [-0.3, 0.3]), the robot at x = 0.7 beside it.
    sim.set_terrain_boxes(ids, torch.tensor([[[0.0, 0.0, 0.1]], [far], [[0.0, 0.0, 0.1]]]),
                          torch.tensor([[[0.6, 0.4, 0.1]], [[0.6, 0.4, 0.1]], [[1.5, 0.3, 0.1]]]),
                          torch.tensor([[yaw_quat(30)], [yaw_quat(0)], [yaw_quat(90)]]))
    sim.set_obstacle(ids, torch.tensor([far, [0.0, 0.0, 0.1], far]), torch.tensor([[0.6, 0.4, 0.1]] * 3),
                     torch.tensor([0.0, math.radians(30), 0.0]))
    stand = sim.standing_height()
    pos = torch.tensor([[0.0, 0.0, stand + 0.22], [0.0, 0.0, stand + 0.22], [0.7, 0.0, stand + 0.22]])
    q = sim.default_joint_pos.expand(3, -1).clone()
    sim.reset(ids, pos, torch.tensor([[1.0, 0.0, 0.0, 0.0]] * 3), q)
    for _ in range(int(round(0.8 / sim.control_dt))):
        sim.step(q)
    z = sim.state()["base_pos_w"][:, 2]
    assert z[2] < stand, z                                              # on the floor
    assert abs(z[0] - z[2] - 0.2) < 0.03 and abs(z[1] - z[2] - 0.2) < 0.03, z   # on the box, on the obstacle

"""``sim.weld_joints``: a reduced simulation model with the held joints welded to their bodies at the held pose
(``sim2real.sim.weld``).

Checked on the project's JVRC-1-class model (``sim/models/jvrc1``, through the humanoid-footsteps task config) and
on the real JVRC-1 MJCF under ``<shared>/robots`` (skipped when absent), both compiled with and without welding:

* kinematics: the same base pose and random leg angles, the full model's held joints at their held values (and
  its mimic finger joints where their equality constraints put them) give every body the same world pose (1e-9),
  also for random held values; a toy model covers euler / axisangle orientations, a ``frame``, a nonzero ``ref``,
  a slide joint and two joints on one body;
* mass properties: total mass and the base's subtree centre of mass in the held pose;
* degrees of freedom: 38 -> 18 (own model), 50 -> 18 (real: 22 actuated joints and 10 mimic finger joints welded);
* dynamics: standing 1 s on the floor under the leg servos, upper body held stiffly by PD vs welded: the base
  heights agree within a few mm; the task env steps with domain randomisation on the reduced model, and so does
  MuJoCo Warp (marked ``warp``);
* the stand-in robot keeps the full model; errors (a policy joint, a pattern matching nothing, the free joint, a
  mimic joint apart from the joint it follows, the isaaclab backend, bad config values) are one-line ConfigErrors.
"""

from __future__ import annotations

import json

import mujoco
import numpy as np
import pytest
import torch

from sim2real.configs import ConfigError
from sim2real.sim.mujoco_model import build_model
from sim2real.sim.weld import weld_joints
from sim2real.tasks import make_env, task_config

#: Every non-leg joint of both JVRC-1 models (the alternation keeps one pattern matching in the model without hands).
WELD = ["WAIST_.*", "NECK_.*", ".*_SHOULDER_.*", ".*_ELBOW_.*", ".*_WRIST_.*|.*_(U|L)(THUMB|INDEX|LITTLE)"]
NV = {"own": (38, 18), "real": (50, 18)}


def _cfg(mjcf: str | None, *extra: str) -> dict:
    over = ["env.num_envs=4", "sim.nthread=1"] + ([f"robot.mjcf={mjcf}"] if mjcf else []) + list(extra)
    return task_config("humanoid-footsteps", over)


def _weld(patterns=WELD) -> str:
    return f"sim.weld_joints={json.dumps(patterns)}"


@pytest.fixture(scope="module", params=["own", "real"])
def jvrc1(request):
    """``(kind, mjcf)``: the project's model (mjcf None: the robot config's) or the real JVRC-1 MJCF."""
    if request.param == "own":
        return "own", None
    return "real", str(request.getfixturevalue("shared_robots") / "jvrc1" / "xml" / "scene.xml")


def _pair(mjcf: str | None, held: dict | None = None):
    """``(full, full_index, reduced, reduced_index)`` with the task's (fast) solver settings; ``held``: other
    ``robot.held_joints`` (with uniform held gains)."""
    full_cfg, reduced_cfg = _cfg(mjcf), _cfg(mjcf, _weld())
    assert full_cfg["sim"]["weld_joints"] == []
    out = []
    for cfg in (full_cfg, reduced_cfg):
        if held is not None:
            cfg["robot"].update(held_joints=held, held_stiffness=100.0, held_damping=5.0)
        out += build_model(cfg["robot"], cfg["sim"])
    return tuple(out)


def _held_pose(model: mujoco.MjModel, index, data: mujoco.MjData) -> None:
    """The full model's held joints at their held values, then each mimic joint where its (active) joint equality
    puts it: ``q1 = ref1 + poly(q2 - ref2)``."""
    adr = model.jnt_qposadr
    data.qpos[adr[[model.joint(n).id for n in index.held_joint_names]]] = index.held_joint_pos
    for e in range(model.neq):
        if model.eq_type[e] == mujoco.mjtEq.mjEQ_JOINT and model.eq_active0[e]:
            j1, j2 = int(model.eq_obj1id[e]), int(model.eq_obj2id[e])
            x = data.qpos[adr[j2]] - model.qpos0[adr[j2]] if j2 >= 0 else 0.0
            data.qpos[adr[j1]] = model.qpos0[adr[j1]] + np.polyval(model.eq_data[e, 4::-1], x)


def _pose_both(full, fi, reduced, ri, seed: int):
    """MjData of both models in the same random base pose and leg angles, held joints in the held pose, after
    mj_kinematics."""
    rng = np.random.default_rng(seed)
    quat = rng.normal(size=4)
    base = np.concatenate((rng.uniform(-1, 1, 3), quat / np.linalg.norm(quat)))
    lo, hi = fi.joint_range[:, 0], fi.joint_range[:, 1]
    legs = rng.uniform(lo, hi)
    datas = []
    for model, index in ((full, fi), (reduced, ri)):
        data = mujoco.MjData(model)
        data.qpos[index.base_qpos:index.base_qpos + 7] = base
        data.qpos[index.joint_qpos] = legs
        _held_pose(model, index, data)                          # those left in the reduced model too
        mujoco.mj_kinematics(model, data)
        datas.append(data)
    return datas


def _assert_same_body_poses(full, reduced, df, dr, tol=1e-9):
    assert full.nbody == reduced.nbody
    for b in range(full.nbody):
        name = full.body(b).name
        r = reduced.body(name).id
        np.testing.assert_allclose(dr.xpos[r], df.xpos[b], atol=tol, rtol=0, err_msg=name)
        np.testing.assert_allclose(dr.xmat[r], df.xmat[b], atol=tol, rtol=0, err_msg=name)
        sign = np.sign(np.dot(dr.xquat[r], df.xquat[b])) or 1.0
        np.testing.assert_allclose(sign * dr.xquat[r], df.xquat[b], atol=tol, rtol=0, err_msg=name)


def test_welded_bodies_keep_their_world_pose(jvrc1):
    kind, mjcf = jvrc1
    full, fi, reduced, ri = _pair(mjcf)
    assert (full.nv, reduced.nv) == NV[kind]
    assert ri.held_joint_names == [] and len(ri.held_actuator_ids) == 0
    assert set(ri.welded_joint_names) >= set(fi.held_joint_names)
    for seed in range(3):
        _assert_same_body_poses(full, reduced, *_pose_both(full, fi, reduced, ri, seed))


def test_random_held_values_weld_at_those_values(jvrc1):
    # Every held joint at its own random angle (the config's pose has most of them at 0).
    _, mjcf = jvrc1
    full, fi, _, _ = _pair(mjcf)
    rng = np.random.default_rng(7)
    rng_of = {n: full.jnt_range[full.joint(n).id] for n in fi.held_joint_names}
    values = {n: float(rng.uniform(lo, hi) * 0.8) for n, (lo, hi) in rng_of.items()}
    full, fi, reduced, ri = _pair(mjcf, held=values)
    assert fi.held_joint_pos.tolist() == list(values.values())
    for seed in range(3):
        _assert_same_body_poses(full, reduced, *_pose_both(full, fi, reduced, ri, seed))


def test_a_partial_weld_keeps_the_other_held_joints_with_their_own_gains():
    # WAIST_.* is the only held_stiffness / held_damping entry of the waist: it covers welded joints only.
    full_cfg, cfg = _cfg(None), _cfg(None, _weld(["WAIST_.*", ".*_WRIST_.*"]))
    full, fi = build_model(full_cfg["robot"], full_cfg["sim"])
    reduced, ri = build_model(cfg["robot"], cfg["sim"])
    assert ri.welded_joint_names == ["WAIST_Y", "WAIST_P", "WAIST_R", "R_WRIST_R", "R_WRIST_Y", "L_WRIST_R",
                                     "L_WRIST_Y"]
    assert reduced.nv == full.nv - 7 and reduced.nu == full.nu - 7
    keep = [k for k, n in enumerate(fi.held_joint_names) if n not in ri.welded_joint_names]
    assert ri.held_joint_names == [fi.held_joint_names[k] for k in keep]
    for key in ("held_joint_pos", "held_stiffness", "held_damping", "held_torque_limit"):
        np.testing.assert_array_equal(getattr(ri, key), getattr(fi, key)[keep], err_msg=key)
    assert [reduced.actuator(a).name for a in ri.held_actuator_ids] == [
        full.actuator(int(a)).name for a in fi.held_actuator_ids[keep]]
    for seed in range(2):
        _assert_same_body_poses(full, reduced, *_pose_both(full, fi, reduced, ri, seed))


def test_mass_and_centre_of_mass_are_unchanged(jvrc1):
    _, mjcf = jvrc1
    full, fi, reduced, ri = _pair(mjcf)
    assert float(reduced.body_mass.sum()) == pytest.approx(float(full.body_mass.sum()), rel=1e-12)
    df, dr = _pose_both(full, fi, reduced, ri, seed=0)
    for model, data in ((full, df), (reduced, dr)):
        mujoco.mj_comPos(model, data)
    base = fi.base_body
    assert reduced.body_subtreemass[ri.base_body] == pytest.approx(full.body_subtreemass[base], rel=1e-12)
    np.testing.assert_allclose(dr.subtree_com[ri.base_body], df.subtree_com[base], atol=1e-9, rtol=0)


def test_standing_height_under_pd_and_welded_agree(jvrc1):
    from sim2real.sim.mujoco_backend import MujocoBackend

    _, mjcf = jvrc1
    heights = {}
    for name, extra in (("full", ()), ("reduced", (_weld(),))):
        cfg = _cfg(mjcf, *extra)
        backend = MujocoBackend(cfg["robot"], 1, dict(cfg["sim"], nthread=1))
        heights[name] = backend.settled_height(1.0)
    # JVRC-1's own hold gains (configs/robots/jvrc1.yaml): 0.5 mm on the real model, 0.1 mm on the project's; the
    # softer hold used before sagged 0.9 mm.
    assert abs(heights["reduced"] - heights["full"]) < 0.002, heights


def test_env_steps_with_domain_randomisation_on_the_reduced_model():
    torch.manual_seed(0)
    env = make_env(_cfg(None, _weld()), num_envs=4)
    assert env.sim.model.nv == 18 and env.cfg["domain_rand"]["enabled"]
    for _ in range(10):
        obs, reward, done, _ = env.step(torch.zeros(4, env.num_actions))
        assert torch.isfinite(obs["policy"] if isinstance(obs, dict) else obs).all()
    assert env.sim.num_unstable == 0
    assert (env._state["foot_contact"].sum(-1) > 0).all()


@pytest.mark.warp
def test_the_reduced_model_stands_on_mujoco_warp_with_domain_randomisation():
    pytest.importorskip("mujoco_warp")
    from sim2real.sim.mujoco_warp_backend import MujocoWarpBackend

    cfg = _cfg(None, _weld())
    backend = MujocoWarpBackend(cfg["robot"], 2, cfg["sim"])
    assert backend.model.nv == NV["own"][1]
    height, quat, joints = backend.settled_state()
    ids = torch.arange(2)
    backend.reset(ids, torch.tensor([[0.0, 0.0, height + 0.005]] * 2), torch.tensor(quat).float().expand(2, 4),
                  torch.tensor(joints).float().expand(2, -1))
    backend.set_body_mass(ids, torch.tensor([0.9, 1.1]), torch.tensor([0.0, 1.0]), torch.zeros(2, 3))
    backend.set_pd(ids, torch.tensor([0.9, 1.1]), torch.tensor([1.0, 1.0]), torch.tensor([1.0, 0.9]))
    for _ in range(40):                                         # 1 s holding the default pose
        backend.step(torch.tensor(backend.legged.default_pose).float().expand(2, -1))
    assert backend.num_unstable == 0
    np.testing.assert_allclose(backend.state()["base_pos_w"][:, 2].cpu().numpy(), height, atol=0.01)


def test_standin_keeps_the_full_model_with_the_held_joints_held(ros_ctx, namespace):
    # The stand-in simulates the robot as it is: it builds from the robot config alone, never a task's sim section.
    from sim2real.hardware.standins.legged import SimLeggedNode

    cfg = _cfg(None, _weld())
    node = SimLeggedNode(cfg["robot"], namespace=namespace, context=ros_ctx, initial_pose="default")
    try:
        assert node.model.nv == NV["own"][0] and node.index.welded_joint_names == []
        assert len(node.index.held_joint_names) == 20
        q = node.data.qpos[node._held_qpos]
        np.testing.assert_allclose(q, node.index.held_joint_pos, atol=0.06)
    finally:
        node.destroy_node()


# --- the transform on a toy model: orientations, frames, refs, slides, two joints on a body ----------------------
TOY = """
<mujoco>
  <compiler angle="degree" eulerseq="zyx"/>
  <worldbody>
    <body name="base" pos="0.1 0.2 1.0">
      <freejoint name="root"/>
      <geom type="box" size="0.1 0.1 0.1" mass="2"/>
      <body name="a" pos="0.2 0 0.1" euler="20 -30 45">
        <joint name="a_hinge" type="hinge" axis="1 1 0" pos="0.05 -0.02 0.03" ref="15"/>
        <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03" mass="1"/>
        <frame pos="0.3 0.01 0" axisangle="0 1 1 40">
          <body name="b" pos="0.05 0 0" xyaxes="0 1 0 -1 0 0">
            <joint name="b_slide" type="slide" axis="0 0.6 0.8" ref="0.02"/>
            <joint name="b_hinge" type="hinge" axis="0 0 1" pos="0.02 0.01 0"/>
            <geom type="sphere" size="0.04" pos="0.1 0 0" mass="0.5"/>
            <body name="c" zaxis="1 0 1">
              <joint name="c_ball" type="ball"/>
              <geom type="sphere" size="0.02" pos="0 0 0.1" mass="0.2"/>
            </body>
          </body>
        </frame>
      </body>
    </body>
  </worldbody>
  <actuator><motor name="m_a" joint="a_hinge"/><motor name="m_b" joint="b_hinge"/></actuator>
  <sensor><jointpos name="s_a" joint="a_hinge"/><actuatorfrc name="s_m_a" actuator="m_a"/></sensor>
  <keyframe><key name="k" qpos="0 0 1 1 0 0 0  0.3  0.01 0.2  1 0 0 0" ctrl="0.5 0.7"/></keyframe>
</mujoco>
"""


def test_weld_transform_with_orientations_frames_refs_and_slides():
    spec = mujoco.MjSpec.from_string(TOY)
    full = spec.compile()
    positions = {"a_hinge": 0.7, "b_slide": -0.05, "c_ball": 0.0}  # b_hinge stays: b's leading joint is welded
    weld_joints(spec, full, positions, "toy")
    reduced = spec.compile()
    assert (full.nv, reduced.nv) == (12, 7)
    assert [reduced.actuator(a).name for a in range(reduced.nu)] == ["m_b"] and reduced.nsensor == 0
    assert list(reduced.key_qpos[0]) == [0, 0, 1, 1, 0, 0, 0, 0.2] and list(reduced.key_ctrl[0]) == [0.7]
    for seed in range(3):
        rng = np.random.default_rng(seed)
        quat = rng.normal(size=4)
        base = np.concatenate((rng.uniform(-1, 1, 3), quat / np.linalg.norm(quat)))
        kept = rng.uniform(-2, 2)
        df, dr = mujoco.MjData(full), mujoco.MjData(reduced)
        df.qpos[:7], dr.qpos[:7] = base, base
        df.qpos[7:10] = [positions["a_hinge"], positions["b_slide"], kept]
        df.qpos[10:14] = [1, 0, 0, 0]
        dr.qpos[7] = kept
        mujoco.mj_kinematics(full, df)
        mujoco.mj_kinematics(reduced, dr)
        _assert_same_body_poses(full, reduced, df, dr)


def test_a_kept_joint_before_a_welded_one_is_refused():
    spec = mujoco.MjSpec.from_string(TOY)
    with pytest.raises(ConfigError, match="b_hinge.*follows the kept joint 'b_slide'"):
        weld_joints(spec, spec.compile(), {"b_hinge": 0.1}, "toy")
    spec = mujoco.MjSpec.from_string(TOY)
    with pytest.raises(ConfigError, match="ball joint 'c_ball'"):
        weld_joints(spec, spec.compile(), {"c_ball": 0.1}, "toy")


# --- errors ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("patterns,match", [
    (["WAIST_.*", "L_KNEE"], "policy joint 'L_KNEE'"),
    (["WAIST_.*", "TAIL_.*"], r"\['TAIL_\.\*'\] match no joint"),
    (["root"], "free joint 'root'"),
])
def test_bad_weld_patterns_are_one_line_errors(patterns, match):
    cfg = _cfg(None, _weld(patterns))
    with pytest.raises(ConfigError, match=match) as err:
        build_model(cfg["robot"], cfg["sim"])
    assert "\n" not in str(err.value)


def test_a_mimic_joint_is_welded_with_the_joint_it_follows(shared_robots):
    mjcf = str(shared_robots / "jvrc1" / "xml" / "scene.xml")
    cfg = _cfg(mjcf, _weld(["R_UTHUMB"]))
    with pytest.raises(ConfigError, match="ties the welded joint 'R_UTHUMB' to 'R_LTHUMB'"):
        build_model(cfg["robot"], cfg["sim"])
    cfg = _cfg(mjcf, _weld(["R_LTHUMB"]))
    with pytest.raises(ConfigError, match="'R_LTHUMB' is not a held joint"):
        build_model(cfg["robot"], cfg["sim"])


def test_config_values_and_the_isaaclab_backend_are_checked():
    with pytest.raises(ConfigError, match="sim.weld_joints"):
        task_config("humanoid-footsteps", ["sim.weld_joints=[1, 2]"])
    with pytest.raises(ConfigError, match="not a regular expression"):
        task_config("humanoid-footsteps", ['sim.weld_joints=["WAIST_("]'])
    with pytest.raises(ConfigError, match="isaaclab"):
        task_config("humanoid-footsteps", ["sim.backend=isaaclab", _weld()])
    from sim2real.sim.isaaclab_backend import IsaacLabBackend

    cfg = _cfg(None, _weld())
    with pytest.raises(ConfigError, match="sim.weld_joints: the isaaclab backend"):
        IsaacLabBackend(cfg["robot"], 1, cfg["sim"])


def test_the_robot_configs_hold_keeps_the_upper_body_near_its_welded_pose_through_a_landing():
    # What the deploy side runs (the unreduced model, the upper body held by the robot config's servos) stays close to
    # what training welds: a standing JVRC-1-class robot hit by a landing (0.5 m/s down, 1 rad/s of roll) moves no
    # held joint by more than 0.03 rad in 0.5 s under JVRC-1's own gains (0.010 rad measured); the softer hold used
    # before (waist 400, the rest 100 N m/rad) let a shoulder swing 0.075 rad, and a policy trained welded fell on
    # 10 cm stairs in half of the episodes instead of one in ten.
    from sim2real.sim.mujoco_backend import MujocoBackend

    cfg = _cfg(None)
    backend = MujocoBackend(cfg["robot"], 1, dict(cfg["sim"], nthread=1))
    m, i = backend.model, backend.index
    height, quat, joints = backend.settled_state()
    ids = torch.arange(1)
    backend.reset(ids, torch.tensor([[0.0, 0.0, height]]), torch.tensor(quat).float()[None],
                  torch.tensor(joints).float()[None], base_lin_vel_w=torch.tensor([[0.0, 0.0, -0.5]]),
                  base_ang_vel_b=torch.tensor([[1.0, 0.0, 0.0]]))        # a landing: 0.5 m/s down, 1 rad/s roll
    held_q = m.jnt_qposadr[[m.joint(n).id for n in i.held_joint_names]]
    qpos = backend.batch.bind("qpos")
    worst = 0.0
    for _ in range(int(round(0.5 / backend.control_dt))):  # holding the default pose
        backend.step(torch.tensor(backend.legged.default_pose).float()[None])
        worst = max(worst, float(np.abs(qpos[0, held_q] - i.held_joint_pos).max()))
    assert backend.num_unstable == 0
    assert worst < 0.03, worst

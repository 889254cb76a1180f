"""Mirror symmetry of humanoid-footsteps (issue 21): the joint map from names and axes, the observation and action
mirrors (involutions, one frame at a time), an independent physical check (the env's own observations of a mirrored
state equal the mirrored observations), and the wiring into rsl-rl-lib's Symmetry extension (training, checkpoints,
resume, export).

The mirrored states here are built by this file's own name rule (``L_`` <-> ``R_``, roll and yaw joints negated),
not by the module under test, whose joint signs come from the MJCF axes.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from tensordict import TensorDict

from sim2real.configs import ConfigError
from sim2real.sim.rotations import quat_from_yaw, quat_mul, yaw_from_quat
from sim2real.tasks import make_env, task_config
from sim2real.tasks.humanoid_footsteps.symmetry import augment, env_mirror, privileged_layout
from sim2real.tasks.observations import OBS_TERMS, ObservationBuilder
from sim2real.tasks.state import RobotState
from sim2real.tasks.symmetry import (
    TERM_MIRRORS, SymmetryError, group_mirror, joint_mirror, mirror_name, unmirrored_terms,
)

JOINTS = ["L_HIP_P", "L_HIP_R", "L_HIP_Y", "L_KNEE", "L_ANKLE_R", "L_ANKLE_P",
          "R_HIP_P", "R_HIP_R", "R_HIP_Y", "R_KNEE", "R_ANKLE_R", "R_ANKLE_P"]
FLIPPED = ("_HIP_R", "_HIP_Y", "_ANKLE_R")  # roll and yaw joints


# --- this file's own mirror of a state (by name) ------------------------------------------------------------------
def mirror_joints(q: torch.Tensor, names=JOINTS) -> torch.Tensor:
    """``q`` ``[..., J]`` of the mirrored robot: left and right swapped by name, roll and yaw joints negated."""
    out = torch.empty_like(q)
    for i, name in enumerate(names):
        other = "R_" + name[2:] if name.startswith("L_") else "L_" + name[2:]
        out[..., i] = (-1.0 if name.endswith(FLIPPED) else 1.0) * q[..., names.index(other)]
    return out


def mirror_quat(q: torch.Tensor) -> torch.Tensor:
    """Body-to-world (w, x, y, z) of the mirrored base: M R M is (w, -x, y, -z) (roll and yaw negated)."""
    return q * torch.tensor([1.0, -1.0, 1.0, -1.0])


def flip_y(v: torch.Tensor) -> torch.Tensor:
    return v * torch.tensor([1.0, -1.0, 1.0])


def random_state(n: int, gen: torch.Generator) -> RobotState:
    quat = torch.nn.functional.normalize(torch.randn(n, 4, generator=gen), dim=-1)
    return RobotState(base_pos_w=torch.randn(n, 3, generator=gen), base_quat_w=quat,
                      base_lin_vel_w=torch.randn(n, 3, generator=gen), base_ang_vel_b=torch.randn(n, 3, generator=gen),
                      last_action=torch.randn(n, 12, generator=gen), command=torch.randn(n, 8, generator=gen),
                      joint_pos=torch.randn(n, 12, generator=gen), joint_vel=torch.randn(n, 12, generator=gen),
                      default_joint_pos=torch.tensor([-0.3, 0, 0, 0.75, 0, -0.45] * 2).expand(n, -1),
                      time_s=torch.rand(n, generator=gen) * 3.0,
                      phase=torch.rand(n, generator=gen))


def mirror_footstep_command(c: torch.Tensor) -> torch.Tensor:
    """The next two targets (x, y, z, yaw) x 2, world frame, mirrored: y and yaw negated."""
    return c * torch.tensor([1.0, -1.0, 1.0, -1.0] * 2)


def mirror_state(s: RobotState, command=mirror_footstep_command) -> RobotState:
    return RobotState(base_pos_w=flip_y(s.base_pos_w), base_quat_w=mirror_quat(s.base_quat_w),
                      base_lin_vel_w=flip_y(s.base_lin_vel_w), base_ang_vel_b=s.base_ang_vel_b * torch.tensor(
                          [-1.0, 1.0, -1.0]), last_action=mirror_joints(s.last_action), command=command(s.command),
                      joint_pos=mirror_joints(s.joint_pos), joint_vel=mirror_joints(s.joint_vel),
                      default_joint_pos=mirror_joints(s.default_joint_pos), time_s=s.time_s,
                      phase=torch.remainder(s.phase + 0.5, 1.0))  # the other foot's step, as far into it


@pytest.fixture(scope="module")
def robot():
    return task_config("humanoid-footsteps")["robot"]


# --- the joint map -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("model", ["own", "real"])
def test_joint_mirror_pairs_by_name_and_takes_its_signs_from_the_axes(model, robot, request):
    robot = dict(robot)
    if model == "real":
        robot["mjcf"] = str(request.getfixturevalue("shared_robots") / "jvrc1" / "xml" / "scene.xml")
    jm = joint_mirror(robot)
    assert list(jm.names) == JOINTS
    for i, name in enumerate(JOINTS):
        assert jm.names[jm.counterpart[i]] == mirror_name(name) != name
        # Axis along body x (roll) or z (yaw) flips under y -> -y; along y (pitch, knee) keeps its sign.
        assert jm.sign[i] == (-1.0 if name.endswith(FLIPPED) else 1.0), name
    q = torch.randn(5, 12)
    torch.testing.assert_close(jm.apply(q), mirror_joints(q), rtol=0, atol=0)


def test_joint_mirror_refuses_a_joint_without_counterpart_and_an_asymmetric_pose(robot):
    assert mirror_name("FL_hip_joint") == "FR_hip_joint" and mirror_name("RR_calf") == "RL_calf"
    assert mirror_name("WAIST_Y") == "WAIST_Y"
    one_sided = dict(robot, joint_names=JOINTS[:11], default_pose={".*": 0.0}, stiffness=100.0, damping=5.0,
                     torque_limits={".*": 100.0})
    with pytest.raises(SymmetryError, match="'R_ANKLE_P' is not in robot.joint_names"):
        joint_mirror(one_sided)
    leaning = dict(robot, default_pose={**robot["default_pose"], ".*_HIP_R": 0.1})  # both hips roll the same way
    with pytest.raises(SymmetryError, match=r"default_pose is not its own mirror image at joints \['L_HIP_R'"):
        joint_mirror(leaning)


# --- the mirror rules --------------------------------------------------------------------------------------------
COMMAND_MIRRORS = {  # each command-reading term's command layout, mirrored
    "footstep_targets": mirror_footstep_command,
    "pos_error_w": lambda c: torch.cat((flip_y(c[:, :3]), c[:, 3:]), -1),       # goal position (world)
    "pos_error_fine_w": lambda c: torch.cat((flip_y(c[:, :3]), c[:, 3:]), -1),
    "jump_command": lambda c: torch.cat((c[:, :1], -c[:, 1:3], c[:, 3:]), -1),  # dx, dy, dyaw, height, length
    "jump_target": lambda c: torch.cat((c[:, :1], -c[:, 1:3], c[:, 3:]), -1),
}


@pytest.mark.parametrize("name", sorted(TERM_MIRRORS))
def test_every_shared_rule_is_the_term_of_the_mirrored_state(name, robot):
    """For each term with a rule: term(mirrored state) == rule(term(state)), on random states."""
    gen = torch.Generator().manual_seed(1)
    s = random_state(64, gen)
    m = mirror_state(s, COMMAND_MIRRORS.get(name, lambda c: c))
    rule = TERM_MIRRORS[name](joint_mirror(robot))
    torch.testing.assert_close(OBS_TERMS[name].fn(m), rule(OBS_TERMS[name].fn(s)), atol=1e-5, rtol=0)


def test_terms_with_a_history_are_mirrored_frame_by_frame(robot):
    """A builder with histories fed a state sequence, and one fed its mirror image, agree through the mirror."""
    terms = [{"name": "joint_vel", "history_length": 3, "scale": 0.05}, {"name": "projected_gravity_b"},
             {"name": "gait_clock", "history_length": 2}, {"name": "last_action", "history_length": 4}]
    a, b = ObservationBuilder(terms, 12), ObservationBuilder(terms, 12)
    mirror = group_mirror(a.layout(), joint_mirror(robot))
    gen = torch.Generator().manual_seed(2)
    for _ in range(5):
        s = random_state(8, gen)
        m = mirror_state(s)
        torch.testing.assert_close(b.build(m), mirror(a.build(s)), atol=1e-5, rtol=0)
        a.advance(s)
        b.advance(m)


def test_a_term_without_a_rule_is_refused_by_name(robot):
    layout = [{"name": "joint_vel", "size": 12}, {"name": "neighbor_rel", "size": 6}]
    with pytest.raises(SymmetryError, match="'neighbor_rel' \\(group policy\\) has no mirror rule"):
        group_mirror(layout, joint_mirror(robot))
    assert unmirrored_terms(["gait_clock", "obstacle_sdf"]) == ["obstacle_sdf"]
    policy = task_config("humanoid-footsteps")["observations"]["policy"]
    with pytest.raises(ConfigError, match="observations.policy.*'neighbor_mask'"):
        task_config("humanoid-footsteps", ["train.symmetry.enabled=true",
                                           f"observations.policy=[{', '.join(policy + ['neighbor_mask'])}]"])


# --- the env's mirror --------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def env():
    torch.manual_seed(0)
    cfg = task_config("humanoid-footsteps", ["env.num_envs=2", "eval.difficulty=0.0"])
    return make_env(cfg, eval_mode=True)


def test_mirror_twice_is_the_identity_and_the_batch_keeps_its_originals_first(env):
    gen = torch.Generator().manual_seed(3)
    mirror = env_mirror(env)
    sizes = {k: v.shape[1] for k, v in env.get_observations().items()}
    obs = TensorDict({k: torch.randn(16, d, generator=gen) for k, d in sizes.items()}, batch_size=[16])
    actions = torch.randn(16, 12, generator=gen)
    twice = mirror.mirror_obs(mirror.mirror_obs(obs))
    for group in ("policy", "critic"):
        torch.testing.assert_close(twice[group], obs[group], rtol=0, atol=0)
        assert not torch.equal(mirror.mirror_obs(obs)[group], obs[group])
    torch.testing.assert_close(mirror.actions(mirror.actions(actions)), actions, rtol=0, atol=0)
    out_obs, out_act = augment(env, obs, actions)
    assert out_obs.batch_size == torch.Size([32]) and out_act.shape == (32, 12)
    torch.testing.assert_close(out_obs[:16]["critic"], obs["critic"])
    torch.testing.assert_close(out_act[16:], mirror_joints(actions))
    assert augment(env, None, actions)[0] is None and augment(env, obs, None)[1] is None
    with pytest.raises(SymmetryError, match="critic.*columns"):  # a layout that no longer fits is named
        mirror.mirror_obs(obs.set("critic", torch.zeros(16, 5)))


def _named_columns(env) -> dict[str, dict[str, slice]]:
    policy = {d["name"]: slice(d["offset"], d["offset"] + d["size"]) for d in env.obs_builder.layout()}
    critic, offset = dict(policy), env.obs_builder.dim
    for name, size, _ in privileged_layout(env.dr.privileged_layout()):
        critic[name] = slice(offset, offset + size)
        offset += size
    return {"policy": policy, "critic": critic}


def test_observations_of_the_mirrored_state_are_the_mirrored_observations():
    """Independent physical check, through the env's own code: world 1 is set to the mirror image of world 0 (base
    pose mirrored in y with roll and yaw negated, joints mirrored by name, velocities, footstep plan, last action,
    domain randomisation); the env's observations of world 1 equal the mirror of world 0's, term by term (noise
    off; the contact forces come from MuJoCo's contact solver in both worlds)."""
    torch.manual_seed(4)
    cfg = task_config("humanoid-footsteps", ["env.num_envs=2", "eval.difficulty=0.0"])
    cfg["observations"]["noise"] = {k: 0.0 for k in cfg["observations"]["noise"]}
    env = make_env(cfg, eval_mode=True)
    sim, dr, ids = env.sim, env.dr, torch.arange(2)
    gen = torch.Generator().manual_seed(5)
    # Randomised parameters: world 1 gets world 0's, with the base centre-of-mass offset mirrored.
    for key in dr.keys:
        dr.params[key][1] = dr.params[key][0]
    dr.com_offset[1] = flip_y(dr.com_offset[0])
    dr.latency[1] = dr.latency[0]
    p = dr.params
    sim.set_friction(ids, p["friction"])
    sim.set_body_mass(ids, p["mass_scale"], p["base_added_mass"], dr.com_offset)
    sim.set_pd(ids, p["kp_scale"], p["kd_scale"], p["motor_strength"])
    sim.set_joint_damping(ids, p["joint_damping"])
    # World 0: a tilted, turning, moving robot with its feet pressed 5 mm into the ground; world 1: its mirror.
    st = env._state
    tilt = torch.nn.functional.normalize(torch.tensor([1.0, 0.03, -0.04, 0.0]), dim=0)
    quat = quat_mul(quat_from_yaw(yaw_from_quat(st["base_quat_w"][:1]) + 0.3)[0], tilt)
    pos = st["base_pos_w"][0] + torch.tensor([0.3, -0.2, -0.015])
    joint_pos = st["joint_pos"][0] + 0.05 * torch.randn(12, generator=gen)
    joint_vel = torch.randn(12, generator=gen)
    lin_vel, ang_vel = torch.tensor([0.4, 0.25, -0.1]), torch.tensor([0.3, -0.2, 0.5])
    sim.reset(ids, torch.stack((pos, flip_y(pos))), torch.stack((quat, mirror_quat(quat))),
              torch.stack((joint_pos, mirror_joints(joint_pos))), torch.stack((joint_vel, mirror_joints(joint_vel))),
              torch.stack((lin_vel, flip_y(lin_vel))), torch.stack((ang_vel, ang_vel * torch.tensor([-1.0, 1, -1]))))
    env._refresh_state(ids)
    # The footstep plan (world frame), its clock and the last action.
    steps = env.tracker.steps_w[0].clone()
    steps[:, 1:3] += 0.05 * torch.randn(steps.shape[0], 2, generator=gen)
    steps[:, 4] += 0.2 * torch.randn(steps.shape[0], generator=gen)
    mirrored = steps.clone()
    mirrored[:, 0] = 1 - steps[:, 0]                  # the other foot
    mirrored[:, 2], mirrored[:, 4] = -steps[:, 2], -steps[:, 4]
    env.tracker.steps_w[:] = torch.stack((steps, mirrored))
    env.tracker.index[:], env.tracker.t_step[:] = 3, 0.17
    action = torch.randn(12, generator=gen)
    env.actions = torch.stack((action, mirror_joints(action)))
    env.difficulty[:] = 0.37

    obs = env.get_observations()
    assert float(obs["critic"][0, _named_columns(env)["critic"]["foot_contact"]].sum()) > 0.1  # feet loaded (kN)
    mirror = env_mirror(env)
    want = mirror.mirror_obs(obs[:1])
    for group, columns in _named_columns(env).items():
        for name, cols in columns.items():
            got, expected = obs[group][1, cols], want[group][0, cols]
            tol = 2e-3 if name == "foot_contact" else 1e-4  # kN: solver tolerance of two mirrored contact sets
            torch.testing.assert_close(got, expected, atol=tol, rtol=0, msg=lambda m: f"{group}/{name}: {m}")
    assert obs["critic"].shape[1] == max(c.stop for c in _named_columns(env)["critic"].values())


# --- the training wiring -----------------------------------------------------------------------------------------
TINY = ["env.num_envs=16", "train.num_steps_per_env=8", "train.eval_interval=0", "train.num_mini_batches=2",
        "train.num_learning_epochs=2", "train.save_interval=1", "train.keep_last=0",
        "train.curriculum_plot_interval=0", "curriculum.max_difficulty=0.0"]


def _losses(runner) -> list[dict]:
    seen, update = [], runner.alg.update

    def recording():
        out = update()
        seen.append(out)
        return out

    runner.alg.update = recording
    return seen


def test_a_task_without_a_mirror_function_is_refused_in_one_line():
    from sim2real.policies.runner import rsl_rl_train_cfg

    with pytest.raises(ConfigError, match="task quadrotor-hover has no mirror function") as info:
        task_config("quadrotor-hover", ["train.symmetry.enabled=true"])
    assert "\n" not in str(info.value)
    train = task_config("quadrotor-hover")["train"]
    assert "symmetry_cfg" not in rsl_rl_train_cfg(train)["algorithm"]
    with pytest.raises(ConfigError, match="train.symmetry.enabled"):
        rsl_rl_train_cfg({**train, "symmetry": {**train["symmetry"], "enabled": True}})
    with pytest.raises(ConfigError, match="train.symmetry.mirror_loss_coeff"):
        task_config("humanoid-footsteps", ["train.symmetry.mirror_loss_coeff=0.0"])


def test_training_with_augmentation_reports_the_symmetry_loss(tmp_path):
    from sim2real.policies.runner import Sim2RealRunner

    torch.manual_seed(0)
    cfg = task_config("humanoid-footsteps", TINY + ["train.symmetry.enabled=true",
                                                     "train.symmetry.data_augmentation=true",
                                                     "train.symmetry.mirror_loss=false"])
    runner = Sim2RealRunner(make_env(cfg), cfg, None, progress=False)
    assert runner.alg.symmetry.use_data_augmentation and not runner.alg.symmetry.use_mirror_loss
    losses = _losses(runner)
    runner.learn(2)
    assert len(losses) == 2 and all("symmetry" in d and math.isfinite(d["symmetry"]) for d in losses)


def test_mirror_loss_training_checkpoints_resume_and_export(tmp_path):
    """Singh et al.'s setting (the task's train.symmetry with enabled=true: mirror loss 0.4): the logged symmetry
    loss is a positive real number; the checkpoints hold no function or env (they load, resume and export as
    without symmetry) and the exported ONNX policy is the plain actor."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from sim2real.policies.artefact.export import export_policy
    from sim2real.policies.checkpoints import list_checkpoints, load_checkpoint
    from sim2real.policies.runner import Sim2RealRunner

    torch.manual_seed(0)
    cfg = task_config("humanoid-footsteps", TINY + ["train.symmetry.enabled=true"])
    assert cfg["train"]["symmetry"] == {"enabled": True, "data_augmentation": False, "mirror_loss": True,
                                        "mirror_loss_coeff": 0.4}
    run = tmp_path / "run"
    runner = Sim2RealRunner(make_env(cfg), cfg, run, progress=False)
    assert runner.alg.symmetry.use_mirror_loss and runner.alg.symmetry.mirror_loss_coeff == 0.4
    losses = _losses(runner)
    runner.learn(2)
    assert [type(d["symmetry"]) for d in losses] == [float, float]
    assert all(0.0 < d["symmetry"] < 1e3 for d in losses), losses
    acc = EventAccumulator(str(run))
    acc.Reload()
    assert "Loss/symmetry" in acc.Tags()["scalars"]

    ckpt = list_checkpoints(run)[-1]
    data = load_checkpoint(ckpt)

    def plain(x, where="checkpoint"):
        if isinstance(x, dict):
            for k, v in x.items():
                plain(v, f"{where}[{k!r}]")
        elif isinstance(x, (list, tuple)):
            for i, v in enumerate(x):
                plain(v, f"{where}[{i}]")
        else:
            assert isinstance(x, (torch.Tensor, np.ndarray, np.generic, int, float, str, bool, type(None))), where

    plain(data)
    resumed = Sim2RealRunner(make_env(cfg), cfg, None, progress=False)
    resumed.load(str(ckpt))
    assert resumed.current_learning_iteration == 2
    resumed.learn(1)

    out = export_policy(ckpt, tmp_path / "policy", "testrev")
    import onnxruntime as ort

    session = ort.InferenceSession(str(out / "policy.onnx"))
    obs = torch.randn(3, session.get_inputs()[0].shape[1])
    want = runner.alg.get_policy()({"policy": obs}).detach()
    got = session.run(None, {session.get_inputs()[0].name: obs.numpy()})[0]
    np.testing.assert_allclose(got, want.numpy(), atol=1e-4)


def test_a_saved_config_without_the_symmetry_setting_completes_disabled_without_a_note():
    """Configs saved before train.symmetry existed trained without it: the default (disabled) reproduces them, so
    completing one adds it quietly, while other missing keys are still reported."""
    from sim2real.tasks import complete_saved_config, task_config

    cfg = task_config("humanoid-footsteps")
    del cfg["train"]["symmetry"]
    del cfg["env"]["episode_s"]
    done, added = complete_saved_config(cfg)
    assert done["train"]["symmetry"]["enabled"] is False
    assert added == ["env.episode_s"]

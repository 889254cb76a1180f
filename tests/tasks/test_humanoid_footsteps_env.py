"""humanoid-footsteps: observation frames, footstep tracking and scoring, terrain that matches the plans, and the
JVRC-1 model wiring (held joints, foot bodies, torque limits)."""

from __future__ import annotations

import math

import mujoco
import numpy as np
import pytest
import torch

from sim2real.configs import ConfigError
from sim2real.sim.rotations import quat_from_yaw, quat_mul, yaw_from_quat
from sim2real.tasks import make_env, task_config
from sim2real.tasks.humanoid_footsteps.env import HumanoidFootstepsEnv
from sim2real.tasks.humanoid_footsteps.plans import LEFT, RIGHT, FootstepPlan
from sim2real.tasks.humanoid_footsteps.tracker import FootstepTracker, detect_touchdowns, score_touchdown
from sim2real.tasks.observations import OBS_TERMS
from sim2real.tasks.state import RobotState


def _state(pos, quat, command, phase=None):
    n = pos.shape[0]
    return RobotState(base_pos_w=pos, base_quat_w=quat, base_lin_vel_w=torch.zeros(n, 3),
                      base_ang_vel_b=torch.zeros(n, 3), last_action=torch.zeros(n, 12), command=command,
                      phase=phase if phase is not None else torch.zeros(n))


def _rotate_z(xy: torch.Tensor, angle: float) -> torch.Tensor:
    c, s = math.cos(angle), math.sin(angle)
    return torch.stack((c * xy[..., 0] - s * xy[..., 1], s * xy[..., 0] + c * xy[..., 1]), dim=-1)


def test_footstep_observation_is_unchanged_by_rotating_and_shifting_the_world_about_z():
    gen = torch.Generator().manual_seed(0)
    n = 32
    pos = torch.randn(n, 3, generator=gen)
    tilt = torch.nn.functional.normalize(torch.cat((torch.ones(n, 1), 0.1 * torch.randn(n, 3, generator=gen)), -1),
                                         dim=-1)
    quat = quat_mul(quat_from_yaw(torch.rand(n, generator=gen) * 6.0 - 3.0), tilt)
    targets = torch.randn(n, 2, 4, generator=gen)
    term = OBS_TERMS["footstep_targets"].fn
    before = term(_state(pos, quat, targets.reshape(n, 8)))
    for angle, shift in ((0.7, (3.0, -2.0)), (-2.9, (0.0, 5.0)), (math.pi, (-1.0, 0.5))):
        p2 = pos.clone()
        p2[:, :2] = _rotate_z(pos[:, :2], angle) + torch.tensor(shift)
        t2 = targets.clone()
        t2[..., :2] = _rotate_z(targets[..., :2], angle) + torch.tensor(shift)
        t2[..., 3] = targets[..., 3] + angle
        q2 = quat_mul(quat_from_yaw(torch.full((n,), angle)), quat)
        after = term(_state(p2, q2, t2.reshape(n, 8)))
        torch.testing.assert_close(after, before, atol=1e-4, rtol=0)


def test_footstep_observation_values_in_the_heading_frame():
    # Pelvis at (1, 2, 0.8) facing +y; the target 0.3 m ahead (world +y) and 0.1 m to its left (world -x), on a 0.1 m
    # step, turned 0.1 rad further left; the next one 0.2 m behind, to its right.
    pos = torch.tensor([[1.0, 2.0, 0.8]])
    quat = quat_from_yaw(torch.tensor([math.pi / 2]))
    command = torch.tensor([[0.9, 2.3, 0.1, math.pi / 2 + 0.1, 1.1, 1.8, 0.0, math.pi / 2 - 3.0]])
    obs = OBS_TERMS["footstep_targets"].fn(_state(pos, quat, command))
    expected = torch.tensor([[0.3, 0.1, -0.7, 0.1, -0.2, -0.1, -0.8, -3.0]])
    torch.testing.assert_close(obs, expected, atol=1e-5, rtol=0)


def test_gait_clock_runs_over_two_steps():
    phase = torch.tensor([0.0, 0.25, 0.5, 0.75])
    clock = OBS_TERMS["gait_clock"].fn(_state(torch.zeros(4, 3), torch.tensor([[1.0, 0, 0, 0]] * 4),
                                              torch.zeros(4, 8), phase))
    torch.testing.assert_close(clock, torch.tensor([[0.0, 1.0], [1.0, 0.0], [0.0, -1.0], [-1.0, 0.0]]),
                               atol=1e-6, rtol=0)


def test_tracker_advances_one_step_per_period_and_phase_names_the_swing_foot():
    tr = FootstepTracker(2, 6, step_period=0.5)
    steps = torch.zeros(2, 6, 5)
    steps[0, :, 0] = torch.tensor([LEFT, RIGHT, LEFT, RIGHT, LEFT, RIGHT])
    steps[1, :, 0] = torch.tensor([RIGHT, LEFT, RIGHT, LEFT, RIGHT, LEFT])
    steps[:, :, 1] = torch.arange(6).float() * 0.1       # x = 0.1 * index
    tr.reset(torch.arange(2), steps, torch.tensor([6, 3]))
    assert tr.target()[:, 1].tolist() == pytest.approx([0.1, 0.1])
    # env 0 swings its right foot first (phase 0.5), env 1 its left (phase 0).
    assert tr.phase().tolist() == pytest.approx([0.5, 0.0])
    for _ in range(10):                                     # 0.25 s: half a window
        tr.advance(0.025)
    assert tr.phase().tolist() == pytest.approx([0.75, 0.25])
    assert tr.index.tolist() == [1, 1]
    for _ in range(10):
        ended = tr.advance(0.025)
    assert ended.tolist() == [True, True] and tr.index.tolist() == [2, 2]
    torch.testing.assert_close(tr.command()[:, [0, 4]], torch.tensor([[0.2, 0.3], [0.2, 0.3]]))
    assert tr.support()[:, 1].tolist() == pytest.approx([0.1, 0.1])
    for _ in range(20):
        tr.advance(0.025)
    assert tr.finished().tolist() == [False, True] and tr.in_plan().tolist() == [True, False]


def test_touchdown_needs_a_swing_and_scores_by_distance_and_yaw():
    contact = torch.tensor([[True, True], [True, False], [True, True]])
    was = torch.tensor([[False, True], [False, False], [True, True]])
    air = torch.tensor([[0.3, 0.0], [0.05, 0.4], [0.0, 0.0]])
    landed = detect_touchdowns(contact, was, air, min_swing_s=0.1)
    assert landed.tolist() == [[True, False], [False, False], [False, False]]
    # A foot that only shuffled (rose 1 cm) did not step; one that rose 4 cm did.
    lift = torch.tensor([[0.01, 0.0], [0.05, 0.05], [0.0, 0.0]])
    assert detect_touchdowns(contact, was, air, 0.1, lift, 0.03).tolist() == [[False, False], [False, False],
                                                                              [False, False]]
    lift[0, 0] = 0.04
    assert detect_touchdowns(contact, was, air, 0.1, lift, 0.03)[0, 0]
    target = torch.tensor([[LEFT, 1.0, 1.0, 0.0, 0.5]] * 3)
    foot_xy = torch.tensor([[1.03, 1.04], [1.0, 1.12], [1.0, 1.0]])     # 0.05 m, 0.12 m, 0 m off
    foot_yaw = torch.tensor([0.6, 0.5, 0.5 + 0.25])                    # 0.1, 0, 0.25 rad off
    score, hit = score_touchdown(foot_xy, foot_yaw, target, 0.1, 0.2)
    assert hit.tolist() == [True, False, False]
    expected = [math.exp(-0.5) * math.exp(-0.5), math.exp(-1.2), math.exp(-1.25)]
    assert score.tolist() == pytest.approx(expected, rel=1e-5)


@pytest.fixture(scope="module")
def real_jvrc1(shared_robots):
    return str(shared_robots / "jvrc1" / "xml" / "scene.xml")


def _cfg(mjcf: str | None, *extra: str) -> dict:
    over = ["env.num_envs=8", "domain_rand.enabled=false"] + ([f"robot.mjcf={mjcf}"] if mjcf else []) + list(extra)
    return task_config("humanoid-footsteps", over)


def test_spawn_heading_does_not_change_what_the_policy_sees(real_jvrc1):
    plan = FootstepPlan(np.array([LEFT, RIGHT, LEFT, RIGHT]),
                        np.array([[0, 0.096, 0, 0], [0.2, -0.096, 0, 0], [0.4, 0.096, 0, 0.1], [0.6, -0.1, 0, 0.2]]))
    torch.manual_seed(3)
    env = HumanoidFootstepsEnv(_cfg(real_jvrc1, "env.init_joint_noise=0.0"), num_envs=8, eval_mode=True,
                               plans=[plan] * 8)
    yaw = yaw_from_quat(env._state["base_quat_w"])
    assert float(yaw.max() - yaw.min()) > 1.0                  # the worlds really are rotated differently
    sl = env.obs_builder.slices()["footstep_targets"]
    obs = env.obs_builder.build(env.robot_state())[:, sl]
    torch.testing.assert_close(obs, obs[:1].expand_as(obs), atol=2e-4, rtol=0)
    # Standing feet sit on the plan's first two footsteps (plan frame origin = standing feet midpoint).
    feet = env._state["foot_pos_w"][:, :, :2]
    support = env.tracker.support()[:, 1:3]
    torch.testing.assert_close(feet[:, LEFT], support, atol=2e-3, rtol=0)


def test_stairs_in_every_world_lie_under_the_planned_footsteps(real_jvrc1):
    cfg = _cfg(real_jvrc1, "eval.modes=[stairs]", "eval.difficulty=2.0")
    env = make_env(cfg, num_envs=4, eval_mode=True)
    assert env.is_stairs.all()
    raised = 0
    for i in range(env.num_envs):
        model, data = env.sim.batch.get_model(i), env.sim.batch.get_data(i)
        data.qpos[env.sim.index.base_qpos:env.sim.index.base_qpos + 3] = [100.0, 100.0, 5.0]  # robot out of the way
        mujoco.mj_forward(model, data)
        geomgroup = np.ones(6, dtype=np.uint8)
        for step in env.tracker.steps_w[i].tolist():
            _, x, y, z, _ = step
            geomid = np.zeros(1, dtype=np.int32)
            # Cast a ray straight down from 2 m onto the world's ground and terrain boxes.
            dist = mujoco.mj_ray(model, data, np.array([x, y, 2.0]), np.array([0.0, 0.0, -1.0]), geomgroup, 1,
                                 env.sim.index.base_body, geomid)
            ground = 2.0 - dist
            assert ground == pytest.approx(z, abs=1e-4), (i, step)
            raised += z > 0.1
    assert raised >= 4                                           # at stairs difficulty 1 the steps are 0.15 m


def test_held_joints_hold_their_pose_and_feet_carry_the_weight(real_jvrc1):
    env = make_env(_cfg(real_jvrc1), num_envs=4)
    sim = env.sim
    held = sim.index.held_joint_names
    assert {"WAIST_Y", "NECK_P", "R_SHOULDER_R", "L_ELBOW_P", "R_UTHUMB"} <= set(held)
    qadr = sim.model.jnt_qposadr[[sim.model.joint(n).id for n in held]]
    for _ in range(8):                                          # 0.2 s standing with the default pose
        env.step(torch.zeros(4, 12))
    q = sim._qpos[:, qadr]
    np.testing.assert_allclose(q, np.broadcast_to(sim.index.held_joint_pos, q.shape), atol=0.06)  # PD sag
    weight = float(sim.model.body_subtreemass[sim.index.base_body]) * 9.81
    total = env._state["foot_contact"].sum(-1)
    assert total.numpy() == pytest.approx(np.full(4, weight), rel=0.2)
    assert (env._state["body_contact"] == 0).all()


def test_a_model_whose_motors_have_no_torque_limit_needs_robot_torque_limits(real_jvrc1):
    from sim2real.configs import load_robot
    from sim2real.sim.mujoco_model import build_model

    robot = load_robot("jvrc1")
    robot["mjcf"] = real_jvrc1
    del robot["torque_limits"]
    with pytest.raises(ConfigError, match="robot.torque_limits"):
        build_model(robot)


def test_unknown_plan_mode_is_refused_by_name():
    with pytest.raises(ConfigError, match="plans.modes"):
        task_config("humanoid-footsteps", ["plans.modes={forward: 1.0, moonwalk: 1.0}"])


def test_an_evaluation_difficulty_beyond_the_stages_is_refused_with_the_range_and_the_value():
    with pytest.raises(ConfigError, match=r"eval.difficulty': must lie in \[0, 2\] .* got 5"):
        task_config("humanoid-footsteps", ["eval.difficulty=5"])


# --- rsl-rl contract (the project's own JVRC-1-class model, the default) -------------------------------------------
POLICY_SIZES = {"projected_gravity_b": 3, "ang_vel_b": 3, "joint_pos_rel": 12, "joint_vel": 12, "last_action": 12,
                "gait_clock": 2, "footstep_targets": 8}
PRIVILEGED = 25  # 14 task values + 10 DR parameters + the joint-damping scale


def test_vecenv_contract_and_observation_layout():
    from rsl_rl.env import VecEnv
    from tensordict import TensorDict

    torch.manual_seed(0)
    env = make_env(_cfg(None), num_envs=6)
    assert isinstance(env, VecEnv) and env.num_actions == 12
    assert env.max_episode_length == round(10.0 / 0.025) == 400
    obs = env.get_observations()
    assert isinstance(obs, TensorDict) and obs.batch_size == torch.Size([6])
    policy = sum(POLICY_SIZES.values())
    assert [d["name"] for d in env.obs_builder.layout()] == list(POLICY_SIZES)
    assert obs["policy"].shape == (6, policy) and obs["critic"].shape == (6, policy + PRIVILEGED)
    obs, rew, dones, extras = env.step(torch.zeros(6, 12))
    assert rew.shape == (6,) and torch.isfinite(rew).all() and dones.dtype == torch.bool
    assert extras["time_outs"].shape == (6,) and "Curriculum/difficulty_mean" in extras["log"]
    # Writable episode_length_buf (rsl-rl's random episode starts): the last step times out and auto-resets.
    env.episode_length_buf = torch.tensor([0, 1, 2, 3, 4, env.max_episode_length - 1])
    _, _, dones, extras = env.step(torch.zeros(6, 12))
    assert dones[5] and extras["time_outs"][5] and env.episode_length_buf[5] == 0
    assert env.tracker.index[5] == 1 and env.tracker.t_step[5] == 0
    # Stairs episodes are logged apart: two of them end, one by a fall (the zero action never steps: no hits).
    env.is_stairs[:] = torch.tensor([True, True, False, False, False, False])
    log = {}
    env._record_outcome(torch.tensor([0, 1, 2]), torch.tensor([True, False, True]), log)
    assert log["Metrics/stairs_fall_rate"] == pytest.approx(0.5) and log["Metrics/stairs_hit_rate"] == 0.0
    assert log["Episode_Termination/fall"] == pytest.approx(2 / 3)


def test_default_pose_stands_and_never_scores_a_footstep():
    """The zero action holds the default pose: the robot stands (stiff ankles) but never steps, so every planned
    step is a miss and the footstep term pays nothing: the baseline a trained policy must beat."""
    torch.manual_seed(1)
    env = make_env(_cfg(None, "eval.modes=[forward]"), num_envs=8, eval_mode=True)
    for _ in range(80):                                          # 2 s: four step windows
        _, _, dones, _ = env.step(torch.zeros(8, 12))
        assert not dones.any()
    assert (env.episode_sums["footstep"] == 0).all()
    assert (env.steps_done == 4).all() and (env.hits == 0).all()


def test_a_plan_episode_lasts_its_own_steps_plus_one_second():
    short = FootstepPlan(np.array([LEFT, RIGHT]), np.array([[0, 0.096, 0, 0], [0.1, -0.096, 0, 0]]))
    long = FootstepPlan(np.array([LEFT, RIGHT, LEFT, RIGHT]),
                        np.array([[0, 0.096, 0, 0], [0.1, -0.096, 0, 0], [0.2, 0.096, 0, 0], [0.3, -0.096, 0, 0]]))
    env = HumanoidFootstepsEnv(_cfg(None), num_envs=2, eval_mode=True, plans=[short, long])
    # 1 and 3 step windows of 0.5 s, then 1 s, at 40 Hz.
    assert env.plan_episode_length.tolist() == [60, 100] and env.max_episode_length == 100
    env.episode_length_buf = torch.tensor([59, 59])
    _, _, dones, extras = env.step(torch.zeros(2, 12))
    assert dones.tolist() == [True, False] and extras["time_outs"][0]


def test_the_walking_recipe_file_resolves_and_builds_its_env():
    """tasks/humanoid_footsteps/walk.yaml (the documented recipe) merges over the defaults, passes the checks and
    builds a welded, mode-scheduled env with the mirror loss on."""
    from pathlib import Path

    import sim2real

    recipe = Path(sim2real.__file__).parent / "tasks" / "humanoid_footsteps" / "walk.yaml"
    cfg = task_config("humanoid-footsteps", ["sim.nthread=1"], user_file=str(recipe))
    assert cfg["train"]["symmetry"]["enabled"] and cfg["gait"]["step_period"] == 1.1
    env = make_env(cfg, num_envs=2)
    assert env.sim.model.nv == 18  # the 12 leg joints and the free base: the upper body is welded
    assert env.mode_schedule.num_stages == 4 and env.mode_schedule.stage == 0
    assert cfg["curriculum"]["teacher"] == "alp_gmm"  # the winner of issue 21's first-hour comparison
    assert type(env.curriculum.teacher).__name__ == "ALPGMMCurriculum"


def test_evaluation_pushes_each_episode_at_a_random_mid_episode_step_with_the_configured_speed():
    """eval.pushes: each evaluation episode gets exactly that many impulses of eval.push_velocity in a horizontal
    direction, at its planned steps inside 15-75% of the episode; training gets none."""
    torch.manual_seed(3)
    cfg = _cfg(None, "eval.pushes=2", "eval.push_velocity=0.3")
    env = make_env(cfg, num_envs=4, eval_mode=True)
    calls = []
    push = env.sim.push

    def spy(ids, v):
        calls.append((env.episode_length_buf[ids].clone(), ids.clone(), v.clone(), env.push_at[ids].clone()))
        push(ids, v)

    env.sim.push = spy
    steps = env.max_episode_length
    planned = env.push_at.clone()
    assert (planned >= int(0.15 * steps)).all() and (planned <= int(0.75 * steps)).all()
    assert (planned[:, 0] != planned[:, 1]).any()  # drawn per push
    pushed = {i: [] for i in range(4)}
    ended = torch.zeros(4, dtype=torch.bool)
    last = torch.full((4,), steps)   # the last step count of each env's first episode
    for k in range(steps - 1):
        calls.clear()
        _, _, dones, _ = env.step(torch.zeros(4, 12))   # (the zero action falls over after a push)
        for at, ids, v, due in calls:
            counts = (due == at.unsqueeze(-1)).sum(-1)
            assert (counts >= 1).all()
            assert torch.allclose(v[:, :2].norm(dim=-1), 0.3 * counts.float(), atol=1e-6) and (v[:, 2] == 0).all()
            pushed.update({i: pushed[i] + [t] for i, t in zip(ids.tolist(), at.tolist()) if not ended[i]})
        last[dones & ~ended] = k
        ended |= dones
    for i in range(4):  # every planned push of the first episode before it ended happened, and nothing else
        assert sorted(pushed[i]) == sorted(set(t for t in planned[i].tolist() if t <= last[i]))
    assert sum(len(p) for p in pushed.values()) >= 2  # (the zero action falls within about 3 s, pushed or not)
    assert make_env(cfg, num_envs=2).num_pushes == 0


def test_an_evaluation_push_changes_the_base_velocity_by_the_impulse():
    torch.manual_seed(4)
    env = make_env(_cfg(None, "eval.pushes=1", "eval.push_velocity=0.3"), num_envs=2, eval_mode=True)
    env.push_at[:] = 10
    for _ in range(10):
        env.step(torch.zeros(2, 12))
    v_before = env.sim.state()["base_lin_vel_w"][:, :2].clone()
    env.step(torch.zeros(2, 12))     # pushed at step 10, then one control step of physics
    dv = (env.sim.state()["base_lin_vel_w"][:, :2] - v_before).norm(dim=-1)
    assert (dv > 0.2).all() and (dv < 0.4).all()


def test_evaluation_pushes_are_refused_when_negative_or_not_whole():
    with pytest.raises(ConfigError, match="eval.pushes"):
        make_env(_cfg(None, "eval.pushes=-1"), num_envs=1)
    with pytest.raises(ConfigError, match="eval.pushes"):
        make_env(_cfg(None, "eval.pushes=1.5"), num_envs=1)

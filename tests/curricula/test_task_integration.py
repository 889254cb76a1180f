"""Automatic teachers inside the task envs: the task spaces mean what they say (start distance, agitation, jump
distance and direction), ADR's values reach the drones and its ranges move, the runner feeds teachers PPO's
advantages and writes task-space plots, and a teacher's state survives a checkpoint."""

from __future__ import annotations

import math

import pytest
import torch

from sim2real.tasks import make_env, task_config


def _hover(*overrides, n=16, eval_mode=False):
    torch.manual_seed(0)
    return make_env(task_config("quadrotor-hover", list(overrides)), num_envs=n, eval_mode=eval_mode)


def test_hover_start_space_sets_the_start_distance_and_agitation():
    env = _hover("curriculum.teacher=uniform", "curriculum.space=start")
    tasks = torch.tensor([[0.0, 0.0], [0.3, 0.0], [0.7, 0.0], [0.5, 1.0]])
    env.set_fixed_tasks(tasks)
    dist = torch.linalg.vector_norm(env.dyn.pos_w - env.goal_w, dim=-1)
    torch.testing.assert_close(dist, tasks[:, 0].repeat(4), atol=1e-5, rtol=0)
    calm = torch.arange(16) % 4 != 3
    assert env.dyn.lin_vel_w[calm].abs().max() == 0 and env.dyn.ang_vel_b[calm].abs().max() == 0
    torch.testing.assert_close(env.dyn.quat_w[calm], torch.tensor([1.0, 0, 0, 0]).expand(12, 4))
    assert env.dyn.lin_vel_w[~calm].abs().max() > 0.1  # agitation 1: up to the full initial speed
    assert env.dyn.lin_vel_w[~calm].abs().max() <= 1.0 + 1e-6


def test_hover_evaluation_in_the_start_space_covers_the_whole_box():
    env = _hover("curriculum.teacher=alp_gmm", "curriculum.space=start", n=512, eval_mode=True)
    assert env.curriculum.teacher.name == "uniform"
    p = env.curriculum.params
    assert float(p[:, 0].min()) < 0.05 and float(p[:, 0].max()) > 0.95 and float(p[:, 1].max()) > 0.95


def test_jump_landing_space_commands_the_distance_and_direction():
    torch.manual_seed(0)
    cfg = task_config("quadruped-jump", ["curriculum.teacher=variance", "curriculum.space=landing",
                                          "env.stand_prob=0.0"])
    env = make_env(cfg, num_envs=4)
    tasks = torch.tensor([[0.2, 0.0], [1.0, 0.5], [0.6, -0.785], [0.9, 0.2]])
    env.set_fixed_tasks(tasks)
    want = torch.stack((tasks[:, 0] * torch.cos(tasks[:, 1]), tasks[:, 0] * torch.sin(tasks[:, 1])), dim=-1)
    torch.testing.assert_close(env.command[:, :2], want)
    assert env.command[:, 2:].abs().max() == 0  # no yaw change, no obstacle
    space = env.task_spaces()["landing"]
    assert space.low == (0.05, -0.785) and space.high == (1.0, 0.785)  # from stage 2's entry (distance_min_start)


def test_hover_adr_values_reach_the_drones_and_ranges_grow_on_success():
    env = _hover("domain_rand.adr.enabled=true", "domain_rand.adr.boundary_prob=1.0", "domain_rand.adr.buffer_size=4",
                 "domain_rand.adr.steps_to_limit=10", n=256)
    adr = env.adr
    ratio = env.dyn.params.mass / env.nominal.mass
    torch.testing.assert_close(ratio, env.adr_values[:, 0])
    torch.testing.assert_close(env.adr_values[:, 0], torch.ones(256))  # every range starts at the nominal value
    ids, n = torch.arange(256), 256
    for _ in range(3):  # every env evaluates a bound (~26 per bound); all succeed: every bound moves out a step
        assert int(adr.boundary.bincount(minlength=10).min()) >= 4
        env._record_outcome(ids, torch.ones(n, dtype=torch.bool), torch.zeros(n, dtype=torch.bool),
                            torch.zeros(n), torch.zeros(n), {"log": {}})
        env._reset_envs(ids)
    step = 0.1 / 10  # mass_scale limits [0.95, 1.05]
    assert float(adr.high[0]) == pytest.approx(1.0 + 3 * step, abs=1e-6)
    assert float(adr.low[0]) == pytest.approx(1.0 - 3 * step, abs=1e-6)
    assert float(adr.high[4]) == pytest.approx(3 * 0.005 / 10, abs=1e-9)  # ext_force bound grows from 0 ...
    assert float(adr.low[4]) == 0.0  # ... and its low bound cannot pass the nominal 0
    ratio = env.dyn.params.mass / env.nominal.mass
    assert float(ratio.min()) >= 0.95 - 1e-6 and float(ratio.max()) <= 1.0 + 3 * step + 1e-6
    assert float(ratio.max()) > 1.0 + 1e-3
    for _ in range(2):  # all crash: every bound moves back in a step per decision
        env._record_outcome(ids, torch.zeros(n, dtype=torch.bool), torch.ones(n, dtype=torch.bool),
                            torch.zeros(n), torch.zeros(n), {"log": {}})
        env._reset_envs(ids)
    assert float(adr.high[0]) == pytest.approx(1.0 + step, abs=1e-6)
    assert float(env.curriculum_state_dict()["adr"]["high"][0]) == pytest.approx(float(adr.high[0]))


def test_runner_feeds_advantages_to_the_bandit_and_plots_the_task_space(tmp_path):
    from sim2real.policies.runner import Sim2RealRunner

    cfg = task_config("quadrotor-hover", ["curriculum.teacher=lp_bandit", "curriculum.space=start",
                                          "train.eval_interval=0", "train.curriculum_plot_interval=2",
                                          "train.num_steps_per_env=8", "env.episode_length_s=0.05"])
    torch.manual_seed(0)
    env = make_env(cfg, num_envs=64)
    runner = Sim2RealRunner(env, cfg, tmp_path, progress=False)
    runner.learn(2)
    bandit = env.curriculum.teacher
    assert env.curriculum._trace_filled == 8
    log = bandit.log()
    assert log["Curriculum/advantage_driven"] == 1.0
    # The values are exponential averages of the regions' mean |advantage| (rsl-rl normalises advantages: ~0.8).
    assert float(bandit.q.max()) > 0.1
    plots = sorted((tmp_path / "curriculum").glob("*.png"))
    assert [p.name for p in plots] == ["task_space_00002.png"]
    assert plots[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_teacher_state_survives_the_env_checkpoint():
    over = ["curriculum.teacher=alp_gmm", "curriculum.space=start", "curriculum.teachers.alp_gmm.fit_interval=20",
            "curriculum.teachers.alp_gmm.bootstrap=20"]
    env = _hover(*over, n=32)
    ids = torch.arange(32)
    for _ in range(3):
        success = torch.rand(32) < env.curriculum.params[:, 0]
        env._record_outcome(ids, success, torch.zeros(32, dtype=torch.bool), torch.zeros(32), torch.zeros(32),
                            {"log": {}})
        env._reset_envs(ids)
    state = env.curriculum_state_dict()
    other = _hover(*over, n=32)
    other.load_curriculum_state_dict(state)
    torch.manual_seed(5)
    a = env.curriculum.teacher.sample(ids)
    torch.manual_seed(5)
    b = other.curriculum.teacher.sample(ids)
    torch.testing.assert_close(a, b)
    assert env.curriculum.teacher.log()["Curriculum/alp_gmm_fits"] >= 1
    with pytest.raises(ValueError, match="teacher 'alp_gmm'"):
        _hover("curriculum.teacher=uniform", "curriculum.space=start").load_curriculum_state_dict(state)


def test_swarm_rooms_take_an_automatic_teacher_and_average_the_signal_over_drones():
    torch.manual_seed(0)
    cfg = task_config("quadrotor-swarm", ["curriculum.teacher=lp_bandit", "env.drones_per_env=4"])
    env = make_env(cfg, num_envs=3)
    env.step(torch.zeros(env.num_envs, 4))
    got = []
    env.curriculum.teacher.learning_signal = lambda params, signal: got.append((params, signal))
    signal = torch.arange(12, dtype=torch.float32).view(1, 12)  # one step, 3 rooms x 4 drones
    env.curriculum_learning_signal(signal)
    (params, room_signal), = got
    torch.testing.assert_close(room_signal, torch.tensor([1.5, 5.5, 9.5]))
    torch.testing.assert_close(params[:, 0], env.curriculum.params[:, 0])
    assert not math.isnan(float(params.sum()))


def test_hover_outcomes_carry_success_a_graded_score_and_the_return():
    env = _hover("curriculum.teacher=uniform", "curriculum.space=start", n=4)
    seen = []
    env.curriculum.teacher.update = lambda ids, params, outcome: seen.append(outcome)
    for k, sums in env.episode_sums.items():
        sums[:] = torch.tensor([1.0, 2.0, 3.0, 4.0])
    tol = env.cfg["env"]["success_pos_tol"]
    env._record_outcome(torch.tensor([0, 2, 3]), torch.tensor([True, False, False]), torch.tensor([False, False, True]),
                        torch.tensor([0.0, 2 * tol, 0.01]), torch.zeros(3), {"log": {}})
    (outcome,) = seen
    terms = len(env.episode_sums)
    torch.testing.assert_close(outcome.episode_return, torch.tensor([1.0, 3.0, 4.0]) * terms)
    torch.testing.assert_close(outcome.score, torch.tensor([1.0, math.exp(-1.0), 0.0]))  # a crash scores 0
    assert outcome.failure.tolist() == [False, False, True]


def test_checkpoints_written_before_the_curriculum_interface_still_load():
    env = _hover(n=4)
    old = {"levels": {"levels": torch.tensor([0.1, 0.2, 0.3, 0.4])}, "penalty_schedule": {"steps": 123}}
    env.load_curriculum_state_dict(old)
    torch.testing.assert_close(env.curriculum.teacher.levels, torch.tensor([0.1, 0.2, 0.3, 0.4]))
    assert env.penalty_schedule.steps == 123
    torch.manual_seed(0)
    jump = make_env(task_config("quadruped-jump", []), num_envs=2)
    jump.load_curriculum_state_dict({"stages": {"difficulty": torch.tensor([1.5, 2.5])},
                                     "bin_success": jump.bin_success, "bin_count": jump.bin_count})
    torch.testing.assert_close(jump.curriculum.teacher.difficulty, torch.tensor([1.5, 2.5]))


def test_hover_with_adr_plots_its_ranges_beside_the_teacher(tmp_path):
    env = _hover("domain_rand.adr.enabled=true", n=8)
    ids = torch.arange(8)
    env._record_outcome(ids, torch.ones(8, dtype=torch.bool), torch.zeros(8, dtype=torch.bool), torch.zeros(8),
                        torch.zeros(8), {"log": {}})
    assert env.curriculum_plot(tmp_path / "task_space_00001.png") == tmp_path / "task_space_00001.png"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["task_space_00001.png", "task_space_00001_adr.png"]

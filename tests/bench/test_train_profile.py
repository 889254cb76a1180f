"""``bench train-profile``: the split of a training run's time and its env-steps/s against the env alone."""

from __future__ import annotations

import math

import pytest

from sim2real.bench.timing import ADAPTIVE_LR_MAX, TrainingTimer
from sim2real.bench.train_profile import bench_train_profile


def test_profile_splits_the_training_time_and_counts_its_steps(tmp_path, monkeypatch):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where the profile's scratch run folder goes
    out = bench_train_profile("quadrotor-hover", overrides=["env.num_envs=64"], iterations=2)
    assert list(tmp_path.glob("sim2real-bench-*")) == []  # its run folder removed (other libraries leave their own)
    base = out["baseline"]  # the settings of 2026-12-03, profiled in the same run
    assert base is not None and base["iterations"] == 2
    assert out["speedup"] == pytest.approx(out["train_env_steps_per_s"] / base["train_env_steps_per_s"])
    assert len(out["kls"]) == 2 and all(kl >= 0.0 for kl in out["kls"]) and len(out["learning_rates"]) == 2
    assert out["iterations"] == 2 and out["num_envs"] == 64 and out["steps_per_env"] == 24
    shares = [out["share_sim"], out["share_inference"], out["share_update"]]
    assert all(s > 0 for s in shares) and math.isclose(sum(shares), 1.0, rel_tol=1e-9)
    total = out["time_sim_s"] + out["time_inference_s"] + out["time_update_s"]
    assert math.isclose(out["train_env_steps_per_s"], 64 * 24 * 2 / total, rel_tol=1e-9)
    # Training steps the same env and also runs the policy and the learner: it cannot outrun the env alone.
    assert out["train_env_steps_per_s"] < out["env_only_env_steps_per_s"]
    assert 0.0 <= out["lr_at_cap"] <= 1.0


def test_lr_at_cap_counts_iterations_at_rsl_rl_s_bound():
    class Env:
        def step(self, actions):
            return actions

    class Runner:
        def _rsl_log(self, **kw):
            return None

    env, runner = Env(), Runner()
    timer = TrainingTimer(env, runner)
    for lr in (1e-3, ADAPTIVE_LR_MAX, ADAPTIVE_LR_MAX, 5e-3):
        runner._rsl_log(collect_time=0.5, learn_time=1.5, learning_rate=lr)
    assert timer.iterations == 4 and timer.lr_at_cap() == pytest.approx(0.5)
    assert timer.update == pytest.approx(6.0) and timer.collect == pytest.approx(2.0)


def test_the_hover_baseline_is_the_morning_of_2026_12_03_whatever_the_defaults_are_now():
    """The ratio the bench prints is against the settings before issue 20: each default issue 20 changed since must
    be undone by the spec's baseline overrides (they once missed four, and the baseline drifted with the defaults)."""
    from sim2real.tasks import get_task, task_config

    label, overrides = get_task("quadrotor-hover").bench.profile_baseline
    cfg = task_config("quadrotor-hover", list(overrides))
    # the morning's settings, as docs/benchmarks.md's first train-profile table lists them
    assert cfg["env"]["num_envs"] == 1024 and cfg["env"]["action_interface"] == "motor_thrust"
    assert cfg["observations"]["policy"] == ["pos_error_w", "rot_matrix_w", "lin_vel_w", "ang_vel_b", "last_action"]
    assert cfg["observations"]["history_length"]["last_action"] == 1
    assert cfg["rewards"]["params"]["precision_scale"] == 0.02 and cfg["rewards"]["weights"]["position"] == 1.0
    assert cfg["train"]["num_learning_epochs"] == 5

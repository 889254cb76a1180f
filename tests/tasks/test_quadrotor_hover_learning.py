"""Learning signal: a short PPO run on quadrotor-hover beats the untrained and the random policy on the held-out
evaluation set (the shipped pretrained policy covers full precision; see tests/e2e)."""

from __future__ import annotations

import pytest
import torch

from sim2real.policies.evaluation import evaluate
from sim2real.policies.runner import Sim2RealRunner
from sim2real.tasks import make_env, task_config

# Relaxed success band for a 2-minute run: within 20 cm and 0.3 m/s for the last second of the episode.
RELAXED = ["env.success_pos_tol=0.2", "env.success_vel_tol=0.3", "eval.num_episodes=256"]


@pytest.mark.slow
def test_short_training_run_raises_success_and_removes_crashes():
    torch.manual_seed(1)
    cfg = task_config("quadrotor-hover", ["env.num_envs=1024", "train.eval_interval=0"] + RELAXED)
    runner = Sim2RealRunner(make_env(cfg), cfg, None, progress=False)
    policy = runner.alg.get_policy()

    def deterministic(obs):
        return policy({"policy": obs})

    before = evaluate(cfg, deterministic)
    random_policy = evaluate(cfg, lambda obs: torch.rand(obs.shape[0], 4) * 2 - 1)
    runner.learn(110)
    runner.alg.eval_mode()
    after = evaluate(cfg, deterministic)
    assert before["crash_rate"] >= 0.9 and random_policy["crash_rate"] >= 0.9
    assert before["success_rate"] == 0.0 and random_policy["success_rate"] == 0.0
    assert after["crash_rate"] <= 0.1, after
    assert after["success_rate"] >= 0.5, after
    assert after["pos_error_mean"] < 0.25 < 1.0 < random_policy["pos_error_mean"], (after, random_policy)

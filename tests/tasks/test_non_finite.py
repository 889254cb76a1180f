"""Non-finite values are contained in every task: a NaN or Inf action, or a non-finite simulator state, ends that
env's episode as terminated (counted in the logs), the env is reset, and nothing non-finite reaches the rewards, the
next observation (the action history included) or the learner; training goes on."""

from __future__ import annotations

import math

import pytest
import torch

from sim2real.policies.runner import Sim2RealRunner
from sim2real.tasks import make_env, task_config

TASKS = ("quadrotor-hover", "quadruped-jump", "humanoid-footsteps", "quadrotor-swarm")


def _finite(obs, reward) -> bool:
    return bool(torch.isfinite(obs["policy"]).all() and torch.isfinite(obs["critic"]).all()
                and torch.isfinite(reward).all())


def _env(task: str):
    torch.manual_seed(0)
    return make_env(task_config(task, ["env.num_envs=8"]))


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_non_finite_action_ends_that_env_only(task, bad):
    env = _env(task)
    actions = torch.zeros(env.num_envs, env.num_actions)
    actions[0, 1] = bad
    obs, reward, dones, extras = env.step(actions)
    assert _finite(obs, reward)
    assert bool(dones[0]) and not bool(extras["time_outs"][0])  # terminated, not a time-out
    assert extras["log"]["Episode_Termination/non_finite"] == 1.0 and env.non_finite_total == 1
    if env.num_envs > 8:  # the swarm: one room of 8 drones ends together; others are other rooms
        assert not bool(dones[8:].any())
    else:
        assert not bool(dones[1:].any())
    obs, reward, dones, extras = env.step(torch.zeros(env.num_envs, env.num_actions))
    assert _finite(obs, reward) and extras["log"]["Episode_Termination/non_finite"] == 0.0


def _break_state(env) -> None:
    """Make env 0's simulator state non-finite (its velocity), as a diverging solver would."""
    if hasattr(env, "dyn"):  # the quadrotor tasks' torch dynamics
        env.dyn.lin_vel_w[0] = math.inf
    else:  # a MuJoCo backend's live qvel
        env.sim._qvel[0, :] = math.nan


@pytest.mark.parametrize("task", TASKS)
def test_a_non_finite_simulator_state_is_reset(task):
    env = _env(task)
    _break_state(env)
    obs, reward, dones, _ = env.step(torch.zeros(env.num_envs, env.num_actions))
    assert _finite(obs, reward) and bool(dones[0])
    obs, reward, _, _ = env.step(torch.zeros(env.num_envs, env.num_actions))
    assert _finite(obs, reward)


@pytest.mark.parametrize("task", ["quadrotor-hover", "quadruped-jump"])
def test_training_goes_on_through_non_finite_actions(task, monkeypatch):
    """rsl-rl's own NaN check stays on: no non-finite value reaches it, and the learner's weights stay finite."""
    cfg = task_config(task, ["env.num_envs=16", "train.num_steps_per_env=8"])
    torch.manual_seed(0)
    env = make_env(cfg)
    runner = Sim2RealRunner(env, cfg, None, progress=False)
    calls = {"n": 0}
    real_step = env.step

    def poisoned(actions):
        calls["n"] += 1
        if calls["n"] % 3 == 0:
            actions = actions.clone()
            actions[calls["n"] % env.num_envs] = math.nan
        return real_step(actions)

    env.step = poisoned
    runner.learn(3)
    assert env.non_finite_total == calls["n"] // 3
    assert all(torch.isfinite(p).all() for p in runner.alg.get_policy().parameters())

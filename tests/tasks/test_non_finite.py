"""Non-finite values are contained in every task: a NaN or Inf action, observation (either group) or reward term, or
a non-finite simulator state, ends that env's episode as terminated (counted in the logs), the env is reset, and
nothing non-finite reaches the rewards, the next observation (the action history included), the reward logs or the
learner; training goes on."""

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


def _poison_once(fn, bad: float, where):
    """``fn`` whose next result gets ``bad`` written by ``where(result, bad)``; later calls are clean."""
    state = {"armed": True}

    def poisoned(*args, **kwargs):
        out = fn(*args, **kwargs)
        if state["armed"]:
            state["armed"] = False
            where(out, bad)
        return out

    return poisoned


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("group", ["policy", "critic"])
@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_a_non_finite_observation_resets_that_env_and_never_reaches_the_learner(task, group, bad):
    env = _env(task)
    env.step(torch.zeros(env.num_envs, env.num_actions))  # a running episode in every env

    def write(obs, value):
        obs[group][0, 0] = value

    env.get_observations = _poison_once(env.get_observations, bad, write)
    obs, reward, dones, extras = env.step(torch.zeros(env.num_envs, env.num_actions))
    assert _finite(obs, reward)
    assert bool(dones[0]) and not bool(extras["time_outs"][0])  # ended as terminated
    assert extras["log"]["Episode_Termination/non_finite"] == 1.0 and env.non_finite_total == 1
    group_size = 8 if env.num_envs > 8 else 1  # the swarm resets the drone's whole room
    assert not bool(dones[group_size:].any())
    assert int(env.episode_length_buf[0]) == 0 or group_size > 1  # env 0 was reset
    obs, reward, dones, extras = env.step(torch.zeros(env.num_envs, env.num_actions))
    assert _finite(obs, reward) and extras["log"]["Episode_Termination/non_finite"] == 0.0


REWARD_MODULES = {"quadrotor-hover": "quadrotor_hover", "quadruped-jump": "quadruped_jump",
                  "humanoid-footsteps": "humanoid_footsteps", "quadrotor-swarm": "quadrotor_swarm"}


@pytest.mark.parametrize("task", TASKS)
@pytest.mark.parametrize("bad", [math.nan, -math.inf])
def test_a_non_finite_reward_term_resets_that_env_and_the_reward_and_logs_stay_finite(task, bad, monkeypatch):
    import importlib

    rew = importlib.import_module(f"sim2real.tasks.{REWARD_MODULES[task]}.rewards")
    env = _env(task)
    env.step(torch.zeros(env.num_envs, env.num_actions))  # a running episode in every env

    def write(terms, value):
        terms[next(iter(terms))][0] = value

    monkeypatch.setattr(rew, "compute", _poison_once(rew.compute, bad, write))
    obs, reward, dones, extras = env.step(torch.zeros(env.num_envs, env.num_actions))
    assert _finite(obs, reward) and float(reward[0]) == 0.0
    assert bool(dones[0]) and not bool(extras["time_outs"][0])
    assert extras["log"]["Episode_Termination/non_finite"] == 1.0 and env.non_finite_total == 1
    assert all(math.isfinite(float(v)) for k, v in extras["log"].items() if k.startswith("Episode_Reward/"))
    assert all(bool(torch.isfinite(s).all()) for s in env.episode_sums.values())
    assert int(env.episode_length_buf[0]) == 0 or env.num_envs > 8  # env 0 was reset


def test_an_observation_term_broken_for_every_state_is_zeroed_not_passed_on():
    """After the reset the observation is built again; a term non-finite whatever the state still never reaches the
    learner (it becomes 0)."""
    env = _env("quadrotor-hover")
    real = env.get_observations

    def always(*a, **k):
        out = real(*a, **k)
        out["policy"][0, 0] = math.nan
        return out

    env.get_observations = always
    obs, reward, dones, _ = env.step(torch.zeros(env.num_envs, env.num_actions))
    assert _finite(obs, reward) and float(obs["policy"][0, 0]) == 0.0 and bool(dones[0])

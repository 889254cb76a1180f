"""The stable-baselines3 adapter of ``bench hover-time --learner``: a task env as an SB3 VecEnv (shapes, episode ends
with their time-out flags), and a TD3 / SAC model on it taking gradient steps."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from sim2real.bench.offpolicy import make_learner, task_vec_env
from sim2real.tasks import make_env, task_config


def _venv(n=4, *overrides):
    torch.manual_seed(0)
    return task_vec_env(make_env(task_config("quadrotor-hover", list(overrides)), num_envs=n))


def test_the_adapter_speaks_numpy_and_reports_episode_ends():
    venv = _venv(4, "env.episode_length_s=0.05")  # 5 control steps
    obs = venv.reset()
    assert obs.shape == (4, venv.observation_space.shape[0]) and obs.dtype == np.float32
    assert venv.action_space.shape == (4,) and venv.action_space.low.min() == -1.0
    hover = np.full((4, 4), -0.09, dtype=np.float32)  # about the hover thrust: no crash within 5 steps
    for k in range(5):
        venv.step_async(hover)
        obs, rew, dones, infos = venv.step_wait()
        assert rew.shape == (4,) and rew.dtype == np.float32 and dones.shape == (4,)
    assert dones.all()
    assert all(i["TimeLimit.truncated"] and i["terminal_observation"].shape == obs.shape[1:] for i in infos)


@pytest.mark.parametrize("algo", ["td3", "sac"])
def test_an_off_policy_learner_trains_on_it(algo):
    venv = _venv(4)
    model = make_learner(algo, venv, seed=0, settings={"learning_starts": 32, "batch_size": 16, "buffer_size": 1000})
    before = [p.detach().clone() for p in model.actor.parameters()]
    model.learn(total_timesteps=96)
    assert model.num_timesteps >= 96
    assert any(not torch.equal(a, b.detach()) for a, b in zip(before, model.actor.parameters()))
    with pytest.raises(ValueError, match="unknown off-policy learner"):
        make_learner("ddpg", venv, seed=0)

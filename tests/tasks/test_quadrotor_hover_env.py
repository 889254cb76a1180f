"""quadrotor-hover env contract: rsl-rl VecEnv shapes, last action in the observation, auto-reset, time-outs."""

from __future__ import annotations

import torch

from sim2real.tasks import make_env, task_config


def _env(n=16, *extra):
    return make_env(task_config("quadrotor-hover", ["domain_rand.enabled=false", *extra]), num_envs=n)


def test_vecenv_contract_shapes():
    env = _env(16)
    obs = env.get_observations()
    assert obs.batch_size == torch.Size([16])
    # policy: 18 state values and the last 9 actions; critic: the state, the last action and 14 privileged values.
    assert obs["policy"].shape == (16, 21 + 9 * 4) and obs["critic"].shape == (16, 25 + 14)
    obs, rew, dones, extras = env.step(torch.zeros(16, 4))
    assert rew.shape == (16,) and dones.shape == (16,) and extras["time_outs"].shape == (16,)
    assert env.max_episode_length == 500 and env.episode_length_buf.dtype == torch.long


def test_observation_holds_the_action_just_applied():
    env = _env(8, "observations.noise={pos_error_w: 0.0, rot_matrix_w: 0.0, lin_vel_w: 0.0, ang_vel_b: 0.0, "
                  "last_action: 0.0}")
    history = env.obs_builder.slices()["last_action"]  # the last 9 actions, oldest first
    sl = slice(history.stop - 4, history.stop)
    a1 = torch.rand(8, 4) * 1.6 - 0.8
    obs, *_ = env.step(a1)
    torch.testing.assert_close(obs["policy"][:, sl], a1)
    a2 = torch.full((8, 4), 3.0)  # out of range: the env applies (and reports) the clipped action
    obs, *_ = env.step(a2)
    torch.testing.assert_close(obs["policy"][:, sl], torch.ones(8, 4))


def test_time_out_resets_with_time_out_flag():
    env = _env(4, "env.episode_length_s=0.05", "env.crash_distance=100.0")
    hover = env.last_actions.clone()
    flags = []
    for _ in range(5):
        _, _, dones, extras = env.step(hover)
        flags.append((dones.clone(), extras["time_outs"].clone()))
    assert all(not d.any() for d, _ in flags[:4])
    assert flags[4][0].all() and flags[4][1].all()
    assert (env.episode_length_buf == 0).all()


def test_crash_is_a_termination_not_a_time_out():
    env = _env(4)
    obs, rew, dones, extras = None, None, None, None
    for _ in range(200):  # motors off: the drones fall more than crash_distance or to the ground
        obs, rew, dones, extras = env.step(-torch.ones(4, 4))
        if dones.any():
            break
    assert dones.any() and not extras["time_outs"][dones].any()
    assert extras["log"]["Episode_Termination/crash"] == 1.0

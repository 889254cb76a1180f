"""Off-policy learners (stable-baselines3 TD3 / SAC) on a task env, for ``sim2real bench hover-time --learner``: the
comparison with PPO that issue 20 asks for (Learning to Fly in Seconds, Eschmann et al. 2024, trains its Crazyflie
policy with TD3 in 300,000 env steps).

:class:`TaskVecEnv` presents a task env (an rsl-rl ``VecEnv`` of torch tensors) as a stable-baselines3 ``VecEnv``
of numpy arrays: the ``policy`` observation group, actions in the task's ``[-1, 1]`` box. The task env resets a
finished episode inside ``step``; the observation it returns for that env is the next episode's first, so the
``terminal_observation`` handed to stable-baselines3 on a time-out is that one too (one bootstrap target in every
episode of 500 steps is off; a crash is terminal and needs none).
"""

from __future__ import annotations

import numpy as np
import torch

#: Learner settings (stable-baselines3 names). TD3 as Learning to Fly in Seconds: 64-unit actor and critic, Gaussian
#: exploration noise; ``utd``: gradient steps per env step collected (a vector step of N envs collects N).
LEARNERS = {
    "td3": dict(learning_rate=1e-3, buffer_size=1_000_000, batch_size=256, learning_starts=10_000, gamma=0.99,
                tau=0.005, policy_delay=2, target_policy_noise=0.2, target_noise_clip=0.5, net_arch=[64, 64],
                action_noise=0.1, utd=0.25),
    "sac": dict(learning_rate=1e-3, buffer_size=1_000_000, batch_size=256, learning_starts=10_000, gamma=0.99,
                tau=0.005, net_arch=[64, 64], utd=0.25),
}


def task_vec_env(env):
    """A stable-baselines3 ``VecEnv`` over the task env ``env`` (see the module docstring)."""
    import gymnasium as gym
    from stable_baselines3.common.vec_env.base_vec_env import VecEnv

    class TaskVecEnv(VecEnv):
        def __init__(self):
            self.env = env
            dim = int(env.get_observations()["policy"].shape[-1])
            super().__init__(env.num_envs, gym.spaces.Box(-np.inf, np.inf, (dim,), np.float32),
                             gym.spaces.Box(-1.0, 1.0, (env.num_actions,), np.float32))
            self._actions = None

        def reset(self):
            env.reset_all()
            return env.get_observations()["policy"].cpu().numpy()

        def step_async(self, actions):
            self._actions = torch.as_tensor(actions, dtype=torch.float32, device=env.device)

        def step_wait(self):
            obs, rew, dones, extras = env.step(self._actions)
            o = obs["policy"].cpu().numpy()
            infos = [{} for _ in range(self.num_envs)]
            time_outs = extras["time_outs"].cpu().numpy()
            for i in np.flatnonzero(dones.cpu().numpy()):
                infos[i]["terminal_observation"] = o[i]
                infos[i]["TimeLimit.truncated"] = bool(time_outs[i])
            return o, rew.cpu().numpy().astype(np.float32), dones.cpu().numpy(), infos

        def close(self):
            pass

        def get_attr(self, attr_name, indices=None):
            return [getattr(self, attr_name, None)] * self.num_envs

        def set_attr(self, attr_name, value, indices=None):
            pass

        def env_method(self, method_name, *args, indices=None, **kwargs):
            return [None] * self.num_envs

        def env_is_wrapped(self, wrapper_class, indices=None):
            return [False] * self.num_envs

    return TaskVecEnv()


def make_learner(algo: str, venv, seed: int, settings: dict | None = None):
    """A stable-baselines3 TD3 or SAC model on ``venv`` with :data:`LEARNERS` settings (``settings`` override).

    Raises:
        ValueError: an unknown ``algo``.
    """
    if algo not in LEARNERS:
        raise ValueError(f"unknown off-policy learner {algo!r} (known: {', '.join(LEARNERS)})")
    from stable_baselines3 import SAC, TD3
    from stable_baselines3.common.noise import NormalActionNoise

    s = {**LEARNERS[algo], **(settings or {})}
    n, a = venv.num_envs, venv.action_space.shape[0]
    common = dict(learning_rate=s["learning_rate"], buffer_size=s["buffer_size"], batch_size=s["batch_size"],
                  learning_starts=s["learning_starts"], gamma=s["gamma"], tau=s["tau"], train_freq=(1, "step"),
                  gradient_steps=max(1, int(round(s["utd"] * n))), policy_kwargs=dict(net_arch=list(s["net_arch"])),
                  seed=seed, device="cpu", verbose=0)
    if algo == "td3":
        noise = NormalActionNoise(np.zeros(a), np.full(a, s["action_noise"]))
        return TD3("MlpPolicy", venv, action_noise=noise, policy_delay=s["policy_delay"],
                   target_policy_noise=s["target_policy_noise"], target_noise_clip=s["target_noise_clip"], **common)
    return SAC("MlpPolicy", venv, **common)

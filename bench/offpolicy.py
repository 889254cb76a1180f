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

import time

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


def offpolicy_hover_time_one_seed(task: str, seed: int, algo: str, target: float = 0.9, budget_s: float = 300.0,
                                  eval_every_s: float = 5.0, confirm_episodes: int = 512, num_envs: int = 32,
                                  overrides: list[str] | None = None) -> dict:
    """``hover_time_one_seed`` with an off-policy learner: train ``algo`` on ``num_envs`` envs of ``task`` (the
    task's default config otherwise), evaluate on the selection set at least every ``eval_every_s`` of training, and
    confirm a crossing of ``target`` on ``confirm_episodes`` episodes of ``eval.seed``'s set.

    Returns:
        the same keys as ``hover_time_one_seed`` (``time_sim_s`` and ``time_inference_s`` are 0: stable-baselines3
        does not split its loop; ``time_update_s`` is the whole training time).
    """
    from stable_baselines3.common.callbacks import BaseCallback

    from sim2real.policies.evaluation import evaluate
    from sim2real.tasks import make_env, task_config

    cfg = task_config(task, [*(overrides or []), f"seed={seed}", f"env.num_envs={num_envs}"])
    torch.manual_seed(seed)
    env = make_env(cfg)
    venv = task_vec_env(env)
    model = make_learner(algo, venv, seed)
    out: dict = {"seed": seed, "reached": False, "confirm": None, "evaluations": [], "num_envs": num_envs,
                 "learner": algo}
    state = {"eval_s": 0.0, "last_eval": 0.0, "start": time.perf_counter()}

    def policy(obs: torch.Tensor) -> torch.Tensor:
        action, _ = model.predict(obs.cpu().numpy(), deterministic=True)
        return torch.as_tensor(action, dtype=torch.float32)

    def train_s() -> float:
        return time.perf_counter() - state["start"] - state["eval_s"]

    class Hook(BaseCallback):
        def _on_step(self) -> bool:
            now = train_s()
            out.update(train_wall_s=now, env_steps=int(self.num_timesteps), iterations=int(self.n_calls))
            if now - state["last_eval"] < eval_every_s and now <= budget_s:
                return True
            t0 = time.perf_counter()
            m = evaluate(cfg, policy, num_episodes=int(cfg["train"]["eval_episodes"]),
                         seed=int(cfg["eval"]["selection_seed"]))
            record = {"train_s": round(now, 2), "env_steps": int(self.num_timesteps),
                      "success_rate": m["success_rate"], "pos_error_median": m.get("pos_error_median")}
            line = (f"  seed {seed}  {algo}  {self.num_timesteps:9,d} env steps  train {now:6.1f} s  "
                    f"eval success {m['success_rate']:.3f}")
            if m["success_rate"] >= target:
                confirm = evaluate(cfg, policy, num_episodes=confirm_episodes)
                record["confirm_success_rate"] = confirm["success_rate"]
                line += f"  confirm ({confirm_episodes} episodes, seed {confirm['seed']}) {confirm['success_rate']:.3f}"
                if confirm["success_rate"] >= target:
                    out.update(reached=True, confirm=confirm)
            out["evaluations"].append(record)
            print(line, flush=True)
            state["eval_s"] += time.perf_counter() - t0
            state["last_eval"] = train_s()
            return not (out["reached"] or now > budget_s)

    model.learn(total_timesteps=10**12, callback=Hook())
    out.update(time_sim_s=0.0, time_inference_s=0.0, time_update_s=out.get("train_wall_s", 0.0),
               time_eval_s=state["eval_s"])
    return out

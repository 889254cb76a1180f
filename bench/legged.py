"""``sim2real bench throughput --task T`` for a task on a MuJoCo physics backend (its config has a ``sim`` block;
e.g. ``quadruped-jump``, ``humanoid-footsteps``): the task's env against the raw physics floor, side by side.

For each batch size the same worlds (same model, solver settings, PD servos and threads) are stepped three ways
in one run:

* ``env``: the task env's ``step`` with random actions (physics + observations, rewards, resets, DR);
* ``floor``: ``Batch.step(nstep=decimation)`` of the env's own batch with the same random targets and nothing else;
* ``gymnasium`` (smallest batch only): a Gymnasium ``SyncVectorEnv`` of single-world MuJoCo envs (``mj_step`` in
  Python, one world after another) on the same model and settings.

The ratio env / floor is the overhead of our task code (goal >= 0.8); floor / gymnasium what native batching buys.
The fast (training) solver settings are compared with the model's full-fidelity ones at the smallest size.
"""

from __future__ import annotations

import time

import numpy as np
import torch


def _random_actions(n: int, num_actions: int, gen: torch.Generator) -> torch.Tensor:
    return (torch.rand(n, num_actions, generator=gen) * 2 - 1) * 0.5


def _time_env(env, steps: int, gen) -> float:
    for _ in range(5):
        env.step(_random_actions(env.num_envs, env.num_actions, gen))
    t0 = time.perf_counter()
    for _ in range(steps):
        env.step(_random_actions(env.num_envs, env.num_actions, gen))
    return env.num_envs * steps / (time.perf_counter() - t0)


def _time_floor(env, steps: int, gen) -> float:
    sim = env.sim
    cols = sim.index.actuator_ids
    targets = [env.action_term.to_command(_random_actions(env.num_envs, env.num_actions, gen)).double().numpy()
               for _ in range(8)]
    t0 = time.perf_counter()
    for k in range(steps):
        sim._ctrl[:, cols] = targets[k % 8]
        sim.batch.step(nstep=sim.decimation)
    return env.num_envs * steps / (time.perf_counter() - t0)


def _time_gymnasium(env, n: int, steps: int, gen) -> float:
    import gymnasium as gym
    import mujoco
    from gymnasium.vector import SyncVectorEnv

    model, index, decimation = env.sim.model, env.sim.index, env.sim.decimation
    qpos0 = env.sim.batch.get_data(0).qpos.copy()

    class SingleWorld(gym.Env):
        observation_space = gym.spaces.Box(-np.inf, np.inf, (model.nq + model.nv,), np.float64)
        action_space = gym.spaces.Box(-np.inf, np.inf, (len(index.actuator_ids),), np.float64)

        def __init__(self):
            self.data = mujoco.MjData(model)

        def reset(self, *, seed=None, options=None):
            mujoco.mj_resetData(model, self.data)
            self.data.qpos[:] = qpos0
            mujoco.mj_forward(model, self.data)
            return np.concatenate((self.data.qpos, self.data.qvel)), {}

        def step(self, action):
            self.data.ctrl[index.actuator_ids] = action
            for _ in range(decimation):
                mujoco.mj_step(model, self.data)
            return np.concatenate((self.data.qpos, self.data.qvel)), 0.0, False, False, {}

    vec = SyncVectorEnv([SingleWorld for _ in range(n)])
    vec.reset(seed=0)
    targets = [env.action_term.to_command(_random_actions(n, env.num_actions, gen)).double().numpy()
               for _ in range(8)]
    t0 = time.perf_counter()
    for k in range(steps):
        vec.step(targets[k % 8])
    rate = n * steps / (time.perf_counter() - t0)
    vec.close()
    return rate


def bench_legged_throughput(task: str, quick: bool = False, overrides: list[str] | None = None) -> dict:
    """Env vs floor at 256/1024/4096 envs (64/256 with ``quick``), floor vs Gymnasium and fast vs full fidelity
    at the smallest size, for ``task`` with config ``overrides`` (e.g. ``robot.mjcf=...``)."""
    from sim2real.tasks import make_env, task_config

    overrides = list(overrides or [])
    sizes = [64, 256] if quick else [256, 1024, 4096]
    gen = torch.Generator().manual_seed(0)
    out: dict = {"task": task, "overrides": overrides, "sizes": {}}
    threads = torch.get_num_threads()
    print(f"{'envs':>6} {'env steps/s':>12} {'floor steps/s':>14} {'env/floor':>10}")
    for n in sizes:
        steps = max(10, min(100, 40_000 // n)) if not quick else 10
        env = make_env(task_config(task, overrides), num_envs=n)
        floor = _time_floor(env, steps, gen)
        rate = _time_env(env, steps, gen)
        out["sizes"][str(n)] = {"env_steps_per_s": rate, "floor_steps_per_s": floor, "env_over_floor": rate / floor}
        print(f"{n:>6} {rate:>12,.0f} {floor:>14,.0f} {rate / floor:>10.2f}", flush=True)
    n = sizes[0]
    steps = 10 if quick else 40
    env = make_env(task_config(task, overrides), num_envs=n)
    gym_rate = _time_gymnasium(env, n, steps, gen)
    floor = _time_floor(env, steps, gen)
    full = make_env(task_config(task, overrides + ["sim.fidelity=full"]), num_envs=n)
    floor_full = _time_floor(full, steps, gen)
    env_full = _time_env(full, steps, gen)
    out.update(gymnasium_steps_per_s=gym_rate, floor_over_gymnasium=floor / gym_rate, fast_floor_steps_per_s=floor,
               full_floor_steps_per_s=floor_full, full_env_steps_per_s=env_full, fast_over_full=floor / floor_full,
               threads=threads, decimation_fast=env.sim.decimation, decimation_full=full.sim.decimation)
    print(f"{n} envs: floor {floor:,.0f} vs Gymnasium SyncVectorEnv {gym_rate:,.0f} env-steps/s "
          f"(x{floor / gym_rate:.2f}); fast settings (timestep {env.sim.timestep} s, decimation {env.sim.decimation}) "
          f"vs full fidelity (timestep {full.sim.timestep} s, decimation {full.sim.decimation}): floor "
          f"{floor:,.0f} vs {floor_full:,.0f} (x{floor / floor_full:.2f}), env {env_full:,.0f} at full fidelity")
    return out

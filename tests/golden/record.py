"""Record the seeded behaviour goldens of every task (run once, before a change meant to keep behaviour).

``python tests/golden/record.py`` writes ``tests/golden/<task>.pt``: the policy and critic observations, rewards,
dones and time-outs of 8 envs over 60 steps of seeded random actions, with one torch thread.
``tests/test_golden_behaviour.py`` replays the same and compares within 1e-6.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
TASKS = ("quadrotor-hover", "quadruped-jump", "humanoid-footsteps", "quadrotor-swarm")
NUM_ENVS, STEPS, SEED = 8, 60, 1234


def rollout(task: str) -> dict[str, torch.Tensor]:
    """The seeded 60-step trace of ``task`` (see the module docstring)."""
    from sim2real.tasks import make_env, task_config

    torch.set_num_threads(1)
    cfg = task_config(task, [f"env.num_envs={NUM_ENVS}", f"seed={SEED}"])
    torch.manual_seed(SEED)
    env = make_env(cfg)
    gen = torch.Generator().manual_seed(SEED + 1)
    obs = env.get_observations()
    out = {"policy": [obs["policy"].clone()], "critic": [obs["critic"].clone()], "reward": [], "done": [],
           "time_out": []}
    for _ in range(STEPS):
        actions = torch.randn(env.num_envs, env.num_actions, generator=gen) * 0.5
        obs, rew, done, extras = env.step(actions)
        out["policy"].append(obs["policy"].clone())
        out["critic"].append(obs["critic"].clone())
        out["reward"].append(rew.clone())
        out["done"].append(done.clone().float())
        out["time_out"].append(extras["time_outs"].clone().float())
    return {k: torch.stack(v) for k, v in out.items()}


if __name__ == "__main__":
    for task in sys.argv[1:] or TASKS:
        torch.save(rollout(task), HERE / f"{task}.pt")
        print("recorded", task)

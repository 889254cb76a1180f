"""``sim2real bench train-profile --task T``: where a task's training wall time goes, and how fast it trains against
how fast its env alone steps, measured side by side in one run.

It steps the task's env alone with random actions (env-only env-steps/s), then trains a fresh run of the task's
default settings (or ``--set`` overrides) for a fixed number of PPO iterations without periodic evaluations, and
splits the training wall time into simulation (``env.step``), policy inference and rollout storage, and the learner
update (:class:`~sim2real.bench.timing.TrainingTimer`). Training env-steps/s = envs x steps per env x iterations /
training time. It also reports the share of iterations whose KL-adaptive learning rate sat at rsl-rl's 1e-2 cap.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import torch

from sim2real.bench.timing import TrainingTimer


def env_only_steps_per_s(env, steps: int) -> float:
    """Env-steps/s of ``env`` stepped ``steps`` times with fixed random actions in [-1, 1] (after 5 warm-up steps)."""
    actions = torch.rand(env.num_envs, env.num_actions) * 2 - 1
    for _ in range(5):
        env.step(actions)
    t0 = time.perf_counter()
    for _ in range(steps):
        env.step(actions)
    return env.num_envs * steps / (time.perf_counter() - t0)


def bench_train_profile(task: str, quick: bool = False, overrides: list[str] | None = None,
                        iterations: int | None = None) -> dict:
    """Profile ``iterations`` PPO iterations of ``task`` (default 20; 3 with ``quick``).

    Returns:
        ``{"num_envs", "steps_per_env", "iterations", "train_env_steps_per_s", "env_only_env_steps_per_s",
        "time_sim_s", "time_inference_s", "time_update_s", "share_sim", "share_inference", "share_update",
        "lr_at_cap", "lr_mean"}`` (times in wall seconds, shares of the training time).
    """
    from sim2real.policies.checkpoints import new_run_dir
    from sim2real.policies.runner import Sim2RealRunner
    from sim2real.tasks import make_env, task_config

    iterations = int(iterations or (3 if quick else 20))
    cfg = task_config(task, [*(overrides or []), "train.eval_interval=0", "train.curriculum_plot_interval=0"])
    torch.manual_seed(int(cfg["seed"]))
    probe = make_env(cfg)
    env_only = env_only_steps_per_s(probe, int(cfg["train"]["num_steps_per_env"]) * (2 if quick else 5))
    del probe
    env = make_env(cfg)
    run_dir = new_run_dir(task, "profile", Path(tempfile.mkdtemp(prefix="sim2real-bench-")))
    runner = Sim2RealRunner(env, cfg, run_dir, progress=False)
    timer = TrainingTimer(env, runner)
    runner.learn(iterations)
    steps = int(cfg["train"]["num_steps_per_env"])
    share = timer.shares()
    out = {"num_envs": env.num_envs, "steps_per_env": steps, "iterations": timer.iterations,
           "train_env_steps_per_s": env.num_envs * steps * timer.iterations / max(timer.total, 1e-9),
           "env_only_env_steps_per_s": env_only, "time_sim_s": timer.sim, "time_inference_s": timer.inference,
           "time_update_s": timer.update, "share_sim": share["sim"], "share_inference": share["inference"],
           "share_update": share["update"], "lr_at_cap": timer.lr_at_cap(),
           "lr_mean": sum(timer.learning_rates) / max(len(timer.learning_rates), 1)}
    print(f"{task}: {out['num_envs']} envs x {steps} steps x {out['iterations']} iterations")
    print(f"  training {out['train_env_steps_per_s']:,.0f} env-steps/s vs env alone "
          f"{env_only:,.0f} env-steps/s (x{out['train_env_steps_per_s'] / env_only:.2f})")
    print(f"  training time: simulation {100 * share['sim']:.0f}%, policy inference and rollout storage "
          f"{100 * share['inference']:.0f}%, learner update {100 * share['update']:.0f}% "
          f"({timer.total:.1f} s in all)")
    print(f"  learning rate at rsl-rl's 1e-2 cap in {100 * out['lr_at_cap']:.0f}% of iterations "
          f"(mean {out['lr_mean']:.2g})")
    return out


def run(args, task: str) -> dict:
    return bench_train_profile(task, quick=args.quick, overrides=list(getattr(args, "overrides", []) or []))

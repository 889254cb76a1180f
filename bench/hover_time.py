"""``sim2real bench hover-time``: wall seconds of training until the held-out eval success rate reaches a target.

The task's default config trains (``quadrotor-hover``: 1024 envs; reference: Learning to Fly in Seconds, 18 s on a
laptop); the training wall time excludes the periodic evaluations themselves (reported separately). Collection time
is split into simulation (``env.step``) and the rest of the rollout (policy inference, rollout storage).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import torch

from sim2real.bench.timing import TrainingTimer


class _StopTraining(Exception):
    pass


def bench_hover_time(task: str, quick: bool = False, target: float = 0.9, budget_s: float = 600.0,
                     overrides: list[str] | None = None) -> dict:
    """Train ``task`` until the held-out eval success rate >= ``target`` or ``budget_s`` of training (60 s with
    ``quick``).

    Returns:
        ``{"reached", "iterations", "train_wall_s", "eval", "num_envs", "eval_interval", "eval_episodes",
        "time_sim_s", "time_policy_inference_s", "time_update_s", "time_eval_s"}`` (times in wall seconds).
    """
    from sim2real.policies.checkpoints import new_run_dir
    from sim2real.policies.runner import Sim2RealRunner
    from sim2real.tasks import make_env, task_config

    cfg = task_config(task, list(overrides or []))
    torch.manual_seed(int(cfg["seed"]))
    budget_s = 60.0 if quick else budget_s
    env = make_env(cfg)
    spent = {"eval": 0.0}
    run_dir = new_run_dir(task, "bench", Path(tempfile.mkdtemp(prefix="sim2real-bench-")))
    runner = Sim2RealRunner(env, cfg, run_dir, progress=False)
    timer = TrainingTimer(env, runner)
    evaluate = runner.evaluate_and_keep_best

    result: dict = {"reached": False}
    start = time.perf_counter()

    def eval_hook(it):
        t = time.perf_counter()
        m = evaluate(it)
        spent["eval"] += time.perf_counter() - t
        train_s = time.perf_counter() - start - spent["eval"]
        error = f"  pos error mean {m['pos_error_mean']:.3f} m" if "pos_error_mean" in m else ""
        print(f"  iteration {it + 1:4d}  train {train_s:7.1f} s  eval success {m['success_rate']:.3f}{error}",
              flush=True)
        result.update(iterations=it + 1, train_wall_s=train_s, eval=m)
        if m["success_rate"] >= target or train_s > budget_s:
            result["reached"] = m["success_rate"] >= target
            raise _StopTraining
        return m

    runner.evaluate_and_keep_best = eval_hook
    try:
        runner.learn(1_000_000)
    except _StopTraining:
        pass
    share = timer.shares()
    every = int(cfg["train"]["eval_interval"])
    result.update(num_envs=env.num_envs, eval_interval=every, eval_episodes=cfg["train"]["eval_episodes"],
                  time_sim_s=timer.sim, time_policy_inference_s=timer.inference, time_update_s=timer.update,
                  time_eval_s=spent["eval"])
    status = "reached" if result["reached"] else f"NOT reached within {budget_s:.0f} s"
    print(f"eval success >= {target} {status}: {result.get('train_wall_s', float('nan')):.1f} s of training, "
          f"{result.get('iterations')} iterations, {env.num_envs} envs, evaluated every {every} iterations on "
          f"{cfg['train']['eval_episodes']} episodes (reference: Learning to Fly in Seconds, 18 s on a laptop)")
    if timer.total > 0:
        print(f"where the training time goes: simulation {100 * share['sim']:.0f}%, policy inference and "
              f"rollout storage {100 * share['inference']:.0f}%, PPO update {100 * share['update']:.0f}% "
              f"(evaluations: {spent['eval']:.1f} s, excluded)")
    return result


def run(args, task: str) -> dict:
    return bench_hover_time(task, quick=args.quick)

"""``sim2real bench train-profile --task T``: where a task's training wall time goes, and how fast it trains against
how fast its env alone steps, measured side by side in one run.

It steps the task's env alone with random actions (env-only env-steps/s), then trains a fresh run of the task's
default settings (or ``--set`` overrides) for a fixed number of PPO iterations without periodic evaluations, and
splits the training wall time into simulation (``env.step``), policy inference and rollout storage, and the learner
update (:class:`~sim2real.bench.timing.TrainingTimer`). Training env-steps/s = envs x steps per env x iterations /
training time. It also reports the share of iterations whose KL-adaptive learning rate sat at rsl-rl's 1e-2 cap and
the KL divergence of each update. Where a task's spec declares the settings its defaults replaced
(``bench.profile_baseline``: the hover's of 2026-12-03, before issue 20), the same profile of those runs first, in
the same process, and the bench prints the ratio of the two.
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


def profile_config(task: str, overrides: list[str], iterations: int, quick: bool) -> dict:
    """Profile ``iterations`` PPO iterations of ``task`` with ``overrides`` (a fresh run, no periodic evaluations).

    Returns:
        ``{"num_envs", "steps_per_env", "iterations", "train_env_steps_per_s", "env_only_env_steps_per_s",
        "time_sim_s", "time_inference_s", "time_update_s", "share_sim", "share_inference", "share_update",
        "lr_at_cap", "lr_mean", "learning_rates", "kls"}`` (times in wall seconds, shares of the training time;
        ``learning_rates`` / ``kls``: per iteration, see :class:`~sim2real.bench.timing.TrainingTimer`).
    """
    from sim2real.policies.checkpoints import new_run_dir
    from sim2real.policies.runner import Sim2RealRunner
    from sim2real.tasks import make_env, task_config

    cfg = task_config(task, [*overrides, "train.eval_interval=0", "train.curriculum_plot_interval=0"])
    torch.manual_seed(int(cfg["seed"]))
    probe = make_env(cfg)
    env_only = env_only_steps_per_s(probe, int(cfg["train"]["num_steps_per_env"]) * (2 if quick else 5))
    del probe
    env = make_env(cfg)
    with tempfile.TemporaryDirectory(prefix="sim2real-bench-", ignore_cleanup_errors=True) as scratch:
        runner = Sim2RealRunner(env, cfg, new_run_dir(task, "profile", Path(scratch)), progress=False)
        timer = TrainingTimer(env, runner)
        runner.learn(iterations)
    steps = int(cfg["train"]["num_steps_per_env"])
    share = timer.shares()
    return {"num_envs": env.num_envs, "steps_per_env": steps, "iterations": timer.iterations,
            "train_env_steps_per_s": env.num_envs * steps * timer.iterations / max(timer.total, 1e-9),
            "env_only_env_steps_per_s": env_only, "time_sim_s": timer.sim, "time_inference_s": timer.inference,
            "time_update_s": timer.update, "share_sim": share["sim"], "share_inference": share["inference"],
            "share_update": share["update"], "lr_at_cap": timer.lr_at_cap(),
            "lr_mean": sum(timer.learning_rates) / max(len(timer.learning_rates), 1),
            "learning_rates": list(timer.learning_rates), "kls": list(timer.kls)}


def _print_row(label: str, out: dict) -> None:
    share = {k: out[f"share_{k}"] for k in ("sim", "inference", "update")}
    kl = sorted(out["kls"])[len(out["kls"]) // 2] if out["kls"] else float("nan")
    print(f"  {label}: {out['num_envs']} envs x {out['steps_per_env']} steps x {out['iterations']} iterations: "
          f"training {out['train_env_steps_per_s']:,.0f} env-steps/s vs env alone "
          f"{out['env_only_env_steps_per_s']:,.0f} (x{out['train_env_steps_per_s'] / out['env_only_env_steps_per_s']:.2f});"
          f" simulation {100 * share['sim']:.0f}%, inference and storage {100 * share['inference']:.0f}%, learner "
          f"update {100 * share['update']:.0f}%; learning rate at rsl-rl's 1e-2 cap in {100 * out['lr_at_cap']:.0f}% "
          f"of iterations (mean {out['lr_mean']:.2g}), median update KL {kl:.3g}")


def bench_train_profile(task: str, quick: bool = False, overrides: list[str] | None = None,
                        iterations: int | None = None, baseline: bool = True) -> dict:
    """Profile ``iterations`` PPO iterations (default 20; 3 with ``quick``) of ``task``'s default settings and, with
    ``baseline``, of the settings its defaults replaced (its spec's ``bench.profile_baseline``) in the same run.

    Returns:
        :func:`profile_config`'s result for the default settings, plus ``"baseline"`` (the same for the baseline,
        or None when ``baseline`` is off or the task's settings did not change) and ``"speedup"`` (training
        env-steps/s of the default over the baseline's, 1.0 when they are the same settings).
    """
    from sim2real.tasks import get_task

    iterations = int(iterations or (3 if quick else 20))
    overrides = list(overrides or [])
    label, before = get_task(task).bench.profile_baseline or ("", ())
    print(f"{task}:")
    base = None
    if baseline and before:
        base = profile_config(task, [*before, *overrides], iterations, quick)
        _print_row(f"settings of {label}", base)
    out = profile_config(task, overrides, iterations, quick)
    _print_row("default settings" if base is not None else "default settings (no earlier settings declared)", out)
    out["baseline"] = base
    out["speedup"] = out["train_env_steps_per_s"] / base["train_env_steps_per_s"] if base is not None else 1.0
    if base is not None:
        print(f"  training env-steps/s: default / {label} = x{out['speedup']:.2f}")
    return out


def run(args, task: str) -> dict:
    return bench_train_profile(task, quick=args.quick, overrides=list(getattr(args, "overrides", []) or []))

"""``sim2real bench curricula``: which teacher trains the best policy on the same env-step budget.

For each teacher (the task's hand-written rule, uniform sampling over the whole task space, and the automatic
teachers of :mod:`sim2real.curricula`) and each seed, PPO trains the task from scratch for the same number of env
steps (``--budget``, rounded up to whole iterations), then the final policy plays one episode on every point of a
fixed, held-out grid covering the whole task space (``--grid`` points per dimension, ``--repeats`` episodes each,
all random draws from ``eval.seed``). The table reports mean success over the grid and per difficulty band (equal
thirds of the space's first dimension), averaged over seeds, with the difference to uniform sampling; the plot shows
success along the first dimension per teacher.

Everything but the teacher is the same in every run: config (with the benchmark's own settings of the task's
:class:`~sim2real.tasks.spec.CurriculaBenchSpec`, ``get_task(task).bench.curricula``), seed, budget, evaluation
set. The hand-written rule trains in its own ``difficulty`` space (with the spec's ``hand_written_overrides``; for
the jump, without its obstacle stage: ``max_difficulty = 2``) and is evaluated on the same grid.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import time
from pathlib import Path

import torch

TEACHERS = ("hand_written", "uniform", "alp_gmm", "lp_bandit", "variance", "success_band")
BANDS = 3


def curricula_spec(task: str):
    """The task's :class:`~sim2real.tasks.spec.CurriculaBenchSpec`.

    Raises:
        UnknownTaskError: no such task. ConfigError: the task does not list ``curricula`` or declares no settings.
    """
    from sim2real.bench import bench_spec
    from sim2real.configs import ConfigError

    spec = bench_spec("curricula", task).bench.curricula
    if spec is None:
        raise ConfigError(f"task '{task}' lists bench curricula but declares no settings for it "
                          "(BenchSpec.curricula)")
    return spec


def _config(task: str, teacher: str, seed: int, overrides: list[str]) -> dict:
    from sim2real.tasks import task_config

    spec = curricula_spec(task)
    if teacher == "hand_written":
        extra = [f"curriculum.teacher={spec.hand_written}", "curriculum.space=difficulty",
                 *spec.hand_written_overrides]
    else:
        extra = [f"curriculum.teacher={teacher}", f"curriculum.space={spec.space}"]
    # No periodic evaluation: every run spends its whole budget on training and the final policy is compared.
    return task_config(task, [*spec.overrides, *overrides, *extra, f"seed={seed}", "train.eval_interval=0"])


def held_out_grid(task: str, overrides: list[str], per_dim: int) -> tuple[torch.Tensor, list[str], tuple]:
    """The evaluation grid ``[P, D]`` of the task's benchmark space (cell centres), the space's dimension names
    with units, and its first dimension's ``(low, high)``."""
    from sim2real.tasks import make_env

    cfg = _config(task, "uniform", 0, [*overrides, "env.num_envs=1"])
    space = make_env(cfg, num_envs=1, eval_mode=True).task_spaces()[curricula_spec(task).space]
    dims = [f"{n} [{u}]" if u else n for n, u in zip(space.names, space.units)]
    return space.grid(per_dim), dims, (space.low[0], space.high[0])


def evaluate_on_grid(cfg: dict, policy, grid: torch.Tensor, repeats: int) -> torch.Tensor:
    """Success ``[P]`` (mean over ``repeats`` episodes) of ``policy`` on every grid point, in the benchmark space
    of ``cfg``'s task, all random draws from ``cfg["eval"]["seed"]``. The global RNG state is restored."""
    from sim2real.tasks.rollout import rng_state, set_rng_state
    from sim2real.tasks.rollout import first_episodes
    from sim2real.tasks import make_env

    saved = rng_state()
    try:
        torch.manual_seed(int(cfg["eval"]["seed"]))
        ecfg = {**cfg, "curriculum": {**cfg["curriculum"], "space": curricula_spec(cfg["task"]).space,
                                      "teacher": "uniform"}}
        p = grid.shape[0]
        env = make_env(ecfg, num_envs=p * repeats, eval_mode=True)
        env.set_fixed_tasks(grid)
        outcome = first_episodes(env, policy)
    finally:
        set_rng_state(saved)
    return outcome["success"].view(repeats, p).mean(0)


def _train(cfg: dict, budget: int, run_dir: Path | None):
    from sim2real.policies.runner import Sim2RealRunner
    from sim2real.tasks import make_env

    torch.manual_seed(int(cfg["seed"]))
    env = make_env(cfg)
    per_iteration = env.num_envs * int(cfg["train"]["num_steps_per_env"])
    iterations = max(1, math.ceil(budget / per_iteration))
    runner = Sim2RealRunner(env, cfg, run_dir, device=cfg["device"], progress=False)
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):  # (rsl-rl's logger prints where it stores the git state)
        runner.learn(iterations)
    policy = runner.alg.get_policy()
    runner.alg.eval_mode()
    return (lambda o: policy({"policy": o})), iterations * per_iteration, time.perf_counter() - t0


def bench_curricula(task: str, budget: int, teachers: list[str] | None = None, seeds: int = 1,
                    grid: int = 6, repeats: int = 2, overrides: list[str] | None = None,
                    out_dir: str | Path | None = None) -> dict:
    """Train with each teacher on ``budget`` env steps per seed and score on the held-out grid.

    Returns:
        ``{"task", "budget", "env_steps", "seeds", "grid": [[...], ...], "dims", "teachers": {teacher: {"success",
        "bands": [BANDS] (None for a band without grid points), "per_point": [P], "per_seed": [seeds], "train_s"}}}``;
        ``success`` is the mean over the grid and seeds.

    Raises:
        ConfigError: a task that does not list this benchmark, an unknown teacher, or a bad override.
    """
    from sim2real.configs import ConfigError

    curricula_spec(task)
    teachers = list(teachers or TEACHERS)
    unknown = [t for t in teachers if t not in TEACHERS]
    if unknown:
        raise ConfigError(f"unknown teacher(s) {', '.join(unknown)} (choose from {', '.join(TEACHERS)})")
    if min(int(budget), int(seeds), int(grid), int(repeats)) < 1:
        raise ConfigError(f"budget, seeds, grid and repeats must be >= 1, got {budget}, {seeds}, {grid}, {repeats}")
    overrides = list(overrides or [])
    fixed = [o for o in overrides if o.split("=", 1)[0].strip() in ("seed", "curriculum.teacher", "curriculum.space")]
    if fixed:
        raise ConfigError(f"bench curricula sets the seed, teacher and space of every run itself; drop {fixed}")
    points, dims, (lo, hi) = held_out_grid(task, overrides, grid)
    band = ((points[:, 0] - lo) / max(hi - lo, 1e-9) * BANDS).floor().clamp(0, BANDS - 1).long()
    out_dir = Path(out_dir) if out_dir is not None else None
    result = {"task": task, "budget": int(budget), "seeds": int(seeds), "grid": points.tolist(), "dims": dims,
              "first_range": [lo, hi], "repeats": int(repeats), "overrides": overrides, "teachers": {}}
    for teacher in teachers:
        per_point, per_seed, wall = torch.zeros(points.shape[0]), [], 0.0
        for seed in range(1, seeds + 1):
            cfg = _config(task, teacher, seed, overrides)
            run_dir = out_dir / teacher / f"seed{seed}" if out_dir is not None else None
            policy, steps, train_s = _train(cfg, budget, run_dir)
            success = evaluate_on_grid(cfg, policy, points, repeats)
            per_point += success / seeds
            per_seed.append(float(success.mean()))
            wall += train_s
            result["env_steps"] = steps
            print(f"  {teacher:13s} seed {seed}: success {float(success.mean()):.3f} ({train_s:.0f} s)", flush=True)
        result["teachers"][teacher] = {
            "success": float(per_point.mean()),
            "bands": [float(per_point[band == b].mean()) if bool((band == b).any()) else None
                      for b in range(BANDS)],
            "per_point": per_point.tolist(), "per_seed": per_seed, "train_s": wall}
    print(format_table(result))
    if out_dir is not None:
        from sim2real.configs.durable import atomic_write_bytes

        out_dir.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(out_dir / "curricula.json", json.dumps(result, indent=2).encode())
        result["plot"] = str(plot_results(result, out_dir / "curricula.png"))
        print(f"results: {out_dir / 'curricula.json'}, plot: {result['plot']}")
    return result


def run(args, task: str) -> dict:
    teachers = [t.strip() for t in args.teachers.split(",")] if args.teachers else None
    return bench_curricula(task, int(args.budget), teachers, args.seeds or 1, args.grid, args.repeats, args.overrides,
                           args.out)


def format_table(result: dict) -> str:
    """The Markdown table of a :func:`bench_curricula` result."""
    dim = result["dims"][0]
    lo, hi = result["first_range"]
    edges = [lo + (hi - lo) * b / BANDS for b in range(BANDS + 1)]
    heads = [f"{dim} {edges[b]:.2g}-{edges[b + 1]:.2g}" for b in range(BANDS)]
    base = result["teachers"].get("uniform", {}).get("success")
    lines = [f"{result['task']}: {result['env_steps']} env steps per run, {result['seeds']} seed(s), "
             f"{len(result['grid'])} held-out tasks x {result['repeats']} episodes",
             "| Teacher | Success | " + " | ".join(heads) + " | vs uniform | Per seed | Train s |",
             "|---|---|" + "---|" * BANDS + "---|---|---|"]
    for name, r in result["teachers"].items():
        diff = f"{r['success'] - base:+.3f}" if base is not None and name != "uniform" else ""
        lines.append(f"| {name} | {r['success']:.3f} | " + " | ".join("-" if v is None else f"{v:.3f}"
                                                                    for v in r["bands"])
                     + f" | {diff} | {' / '.join(f'{v:.2f}' for v in r['per_seed'])} | {r['train_s']:.0f} |")
    return "\n".join(lines)


def plot_results(result: dict, path: Path) -> Path:
    """Success along the space's first dimension (mean over the other dimensions), one line per teacher."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grid = torch.tensor(result["grid"])
    xs = torch.unique(grid[:, 0])
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for name, r in result["teachers"].items():
        per_point = torch.tensor(r["per_point"])
        ys = [float(per_point[grid[:, 0] == x].mean()) for x in xs]
        ax.plot(xs.tolist(), ys, marker="o", label=f"{name} ({r['success']:.2f})")
    ax.set_xlabel(result["dims"][0])
    ax.set_ylabel("held-out success")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(f"{result['task']}: {result['env_steps']:,} env steps, {result['seeds']} seed(s)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    fig.savefig(tmp, dpi=110, bbox_inches="tight", format="png")
    plt.close(fig)
    os.replace(tmp, path)
    return path

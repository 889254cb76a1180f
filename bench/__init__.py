"""``sim2real bench NAME [--task T]``: speed and scale, measured side by side in one run (never in tests).

Each bench is one module of this package; a task declares the benches that apply to it in its spec
(``get_task(name).bench.entries``, :class:`~sim2real.tasks.spec.BenchSpec`) and a bench asked for a task that does
not list it refuses in one line.

* ``throughput`` (:mod:`.throughput`): the task env's env-steps/s at growing batch sizes (random actions); for a
  task on a MuJoCo physics backend (its config has a ``sim`` block) against the raw physics floor and a Gymnasium
  ``SyncVectorEnv`` (:mod:`.legged`), else simulated seconds per wall second (quadrotor).
* ``hover-time`` (:mod:`.hover_time`): wall seconds of training until the held-out success rate >= 0.9 (evaluated
  at least every 5 s of training, the crossing confirmed on a fresh 512-episode set), median of 3 seeds, with where
  the time goes (simulation, policy inference during rollouts, PPO update; evaluations excluded); ``--learner
  td3|sac`` trains stable-baselines3's off-policy learner instead (:mod:`.offpolicy`).
* ``train-profile`` (:mod:`.train_profile`): where a task's training wall time goes (simulation, policy inference
  and rollout storage, learner update), training env-steps/s against the env alone in the same run, and how often
  the adaptive learning rate sits at its cap.
* ``inference`` (:mod:`.inference`): ONNX inference latency per step (p50/p99) and the policy node's control-period
  error (p50/p99) at 50 Hz and 100 Hz against the stand-in robot (``--load N`` busy-loop processes beside it,
  ``--seconds`` per rate).
* ``soak`` (:mod:`.soak`): the policy node fed 1 kHz odometry for 10 minutes (``--seconds``): overruns, messages
  not delivered, memory growth.
* ``swarm`` (:mod:`.swarm`): per-drone success, contacts per drone-minute, deadlocks and drone-steps/s at 8 and 32
  drones per room and 20% / 80% obstacle density (``--policy DIR``, default the shipped one; ``--curve``: the
  density curve 0-80% as a table and a plot).
* ``curricula`` (:mod:`.curricula`): which teacher trains the best policy on the same env-step budget.
* ``finetune`` (:mod:`.finetune`): how much of the reality gap a fine-tuning session recovers.
* ``gpu`` (:mod:`.gpu`): every task listing it at 4096 / 16384 envs on MuJoCo Warp (CUDA) and C MuJoCo (all CPU
  cores), plus a short training run per task; without CUDA it says so, ``--quick`` runs a tiny CPU version.
* ``all``: every bench but train-profile, curricula, finetune, gpu and soak, on every task that lists it.

Not a bench entry but a measurement script beside them: ``python3 -m sim2real.bench.weld_step`` (:mod:`.weld_step`),
microseconds per physics step of a legged task's model with and without ``sim.weld_joints``.

Without ``--task`` a bench runs on the default task (``quadrotor-hover``, set by the CLI) when that task lists it,
else on every task that lists it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass


@dataclass(frozen=True)
class Bench:
    """One bench of ``sim2real bench``.

    Attributes:
        module: the module of this package whose ``run(args, task) -> dict`` runs it (``args``: the parsed
            ``sim2real bench`` arguments; ``task``: a task name, or for a ``joint`` bench the tuple of them).
        in_all: part of ``sim2real bench all`` (the benches that train are not).
        overrides: takes ``--set KEY=VALUE`` config overrides.
        joint: one run covers all its tasks (side by side), instead of one run per task.
        extra: the optional extra it needs (:mod:`sim2real.extras`), checked before any bench runs (None: the core
            install runs it; ``gpu`` names its extra itself, as ``--sim mujoco-warp`` does).
    """

    module: str
    in_all: bool = True
    overrides: bool = False
    joint: bool = False
    extra: str | None = None


BENCHES: dict[str, Bench] = {
    "throughput": Bench("throughput", overrides=True),
    "hover-time": Bench("hover_time", overrides=True),
    "train-profile": Bench("train_profile", in_all=False, overrides=True),
    "inference": Bench("inference", extra="deploy"),
    "soak": Bench("soak", in_all=False, extra="deploy"),
    "swarm": Bench("swarm", overrides=True),
    "curricula": Bench("curricula", in_all=False, overrides=True),
    "finetune": Bench("finetune", in_all=False, overrides=True, extra="finetune"),
    "gpu": Bench("gpu", in_all=False, overrides=True, joint=True),
}


def tasks_listing(name: str) -> list[str]:
    """The registered tasks whose spec lists bench ``name`` (registration order)."""
    from sim2real.tasks import tasks

    return [t for t, spec in tasks().items() if name in spec.bench.entries]


def bench_spec(name: str, task: str):
    """The :class:`~sim2real.tasks.spec.TaskSpec` of ``task``, which must list bench ``name``.

    Raises:
        UnknownTaskError: no such task. ConfigError: the task's spec does not list the bench.
    """
    from sim2real.configs import ConfigError
    from sim2real.tasks import get_task

    spec = get_task(task)
    if name not in spec.bench.entries:
        raise ConfigError(f"bench {name} runs on {', '.join(tasks_listing(name)) or 'no registered task'}, "
                          f"not '{task}'")
    return spec


def _plan(args) -> list[tuple[str, str | tuple[str, ...]]]:
    """The ``(bench, task)`` runs of a ``sim2real bench`` command, every task checked before any run starts."""
    from sim2real.configs import ConfigError
    from sim2real.tasks import get_task

    names = [n for n, b in BENCHES.items() if b.in_all] if args.name == "all" else [args.name]
    default = getattr(args, "default_task", None)
    if args.task:
        get_task(args.task)  # an unknown task is refused as such, also by 'all'
    runs = []
    for name in names:
        if args.task:
            if args.name == "all" and args.task not in tasks_listing(name):
                continue
            bench_spec(name, args.task)
            chosen = [args.task]
        elif args.name != "all" and default and name in get_task(default).bench.entries:
            chosen = [default]
        else:
            chosen = tasks_listing(name)
        if BENCHES[name].joint:
            runs.append((name, tuple(chosen)))
        else:
            runs.extend((name, task) for task in chosen)
    if not runs:
        raise ConfigError(f"no registered task lists bench {args.name}" if not args.task else
                          f"task '{args.task}' lists none of the benches that 'all' runs")
    return runs


def _require_extras(args, runs) -> None:
    """Refuse, before any bench runs, a bench whose extra is missing (``hover-time --learner td3|sac``: finetune's
    off-policy library).

    Raises:
        MissingExtraError: one line naming the bench and the extra.
    """
    from sim2real.extras import require_extra

    for name in dict.fromkeys(name for name, _ in runs):
        if BENCHES[name].extra is not None:
            require_extra(BENCHES[name].extra, f"sim2real bench {name}",
                          ("rclpy",) if BENCHES[name].extra == "deploy" else None)
    learner = getattr(args, "learner", None) or "ppo"
    if learner != "ppo":
        require_extra("finetune", f"sim2real bench hover-time --learner {learner}", ("stable_baselines3",))


def run_bench(args) -> int:
    """Run ``sim2real bench`` (``args``: its parsed arguments, with ``default_task``); print each bench's table and
    write the results as JSON to ``args.output`` (one key per bench, ``NAME/TASK`` where a bench ran on several).

    Raises:
        ConfigError: ``--set`` for a bench that takes none, or a task that does not list the bench.
    """
    import json
    import platform
    from pathlib import Path

    import torch

    from sim2real.configs import ConfigError

    overrides = list(getattr(args, "overrides", []) or [])
    runs = _plan(args)
    if overrides and any(not BENCHES[name].overrides for name, _ in runs):
        raise ConfigError(f"--set applies to {' and '.join(n for n, b in BENCHES.items() if b.overrides)} only")
    if (getattr(args, "learner", None) or "ppo") != "ppo" and any(name != "hover-time" for name, _ in runs):
        raise ConfigError("--learner applies to hover-time only")
    for flag, value in (("--load", getattr(args, "load", 0)), ("--seconds", getattr(args, "seconds", None))):
        if value and any(name not in ("inference", "soak") for name, _ in runs):
            raise ConfigError(f"{flag} applies to inference and soak only")
    if getattr(args, "eval_every", None) and any(name != "hover-time" for name, _ in runs):
        raise ConfigError("--eval-every applies to hover-time only")
    if getattr(args, "curve", False) and any(name != "swarm" for name, _ in runs):
        raise ConfigError("--curve applies to swarm only")
    if getattr(args, "policy", None) and any(name not in ("swarm", "finetune") for name, _ in runs):
        raise ConfigError("--policy applies to swarm and finetune only (the other benches use the shipped policy)")
    _require_extras(args, runs)
    results = {"machine": {"cpus": torch.get_num_threads(), "platform": platform.platform(),
                           "torch": torch.__version__}}
    counts = {name: sum(n == name for n, _ in runs) for name, _ in runs}
    for name, task in runs:
        label = ", ".join(task) if isinstance(task, tuple) else task
        print(f"== {name} ({label})")
        module = importlib.import_module(f"{__name__}.{BENCHES[name].module}")
        results[name if counts[name] == 1 else f"{name}/{label}"] = module.run(args, task)
    if args.output:
        from sim2real.configs.durable import atomic_write_bytes

        atomic_write_bytes(Path(args.output), json.dumps(results, indent=2, default=float).encode())
    return 0

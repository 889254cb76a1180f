"""``sim2real eval``: score a policy on a fixed, seeded, held-out set covering the task's full range.

The set is the task's env in evaluation mode (curriculum at full difficulty, full reward weights) with
``eval.num_episodes`` envs, every random draw (initial states, goals, DR samples, noise) taken from
``eval.seed``. Each env runs exactly one episode; its outcome is recorded when it first ends.
"""

from __future__ import annotations

import json
from typing import Callable

import torch

from sim2real.tasks.rollout import first_episodes, rng_state, set_rng_state
from sim2real.tasks import make_env


def evaluate(cfg: dict, policy: Callable[[torch.Tensor], torch.Tensor], num_episodes: int | None = None,
             seed: int | None = None, sim_backend: str | None = None) -> dict:
    """Run the held-out set and return the task's metrics.

    Args:
        cfg: resolved task config.
        policy: maps the ``policy`` observation group ``[N, D]`` to actions ``[N, A]`` (deterministic).
        num_episodes: defaults to ``cfg["eval"]["num_episodes"]``.
        seed: defaults to ``cfg["eval"]["seed"]``.
        sim_backend: run the held-out env on this ``sim.backend`` instead of the config's (legged tasks).

    Returns:
        ``{"task", <the env's summarize_outcomes(...)>, "num_episodes", "seed"}``: every task reports at least
        ``success_rate`` and ``score`` (which ranks checkpoints: success rate, ties broken by smaller error).
        The global RNG states are restored afterwards.
    """
    n = int(num_episodes or cfg["eval"]["num_episodes"])
    seed = int(cfg["eval"]["seed"] if seed is None else seed)
    if sim_backend is not None and sim_backend != cfg.get("sim", {}).get("backend", sim_backend):
        cfg = {**cfg, "sim": {**cfg["sim"], "backend": sim_backend}}
    saved_rng = rng_state()
    try:
        torch.manual_seed(seed)
        env = make_env(cfg, num_envs=n, eval_mode=True)
        outcome = first_episodes(env, policy)
    finally:
        set_rng_state(saved_rng)
    return {"task": cfg["task"], **env.summarize_outcomes(outcome), "num_episodes": n, "seed": seed}


def selection_config(cfg: dict) -> dict:
    """The config of the evaluation that picks ``best.pt`` (run with ``eval.selection_seed``): ``cfg`` itself, or for
    a staged task with a non-empty ``eval.selection_difficulties`` (e.g. ``[1.0, 2.0, 3.0]``: the top of every stage,
    env ``i`` playing entry ``i % P``, so one score covers every stage and a policy that forgets one ranks lower)
    ``cfg`` with ``eval.difficulty`` set to that list."""
    chosen = list(cfg.get("eval", {}).get("selection_difficulties") or [])
    return {**cfg, "eval": {**cfg["eval"], "difficulty": chosen}} if chosen else cfg


def selection_signature(cfg: dict) -> str:
    """What makes two selection scores comparable: :func:`selection_config`'s ``eval`` section (less ``seed``, the
    reported set's, ``num_episodes`` and ``selection_difficulties`` itself) and ``train.eval_episodes``, as canonical
    JSON."""
    section = {k: v for k, v in selection_config(cfg)["eval"].items()
               if k not in ("seed", "num_episodes", "selection_difficulties")}
    return json.dumps([section, cfg.get("train", {}).get("eval_episodes")], sort_keys=True, default=str)


def plan_hooks(task: str) -> tuple[Callable, Callable, Callable]:
    """``(load, evaluate, report)`` of ``task``'s plan files (its spec's :class:`~sim2real.tasks.spec.PlanHooks`):
    ``load(path, cfg) -> (plans, cfg)``, ``evaluate(cfg, policy, plans, repeats=...) -> metrics``,
    ``report(metrics) -> str``.

    Raises:
        ConfigError: the task declares no plan files (one line naming the task and the tasks that do).
        UnknownTaskError: ``task`` is not registered.
    """
    from sim2real.configs import ConfigError
    from sim2real.tasks import get_task, tasks

    spec = get_task(task)
    if spec.plans is None:
        takers = [name for name, other in tasks().items() if other.plans is not None]
        raise ConfigError(f"--plans applies to {', '.join(takers) or 'no registered task'}, not {task}")
    return spec.hook(spec.plans.load), spec.hook(spec.plans.evaluate), spec.hook(spec.plans.report)

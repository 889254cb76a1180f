"""``sim2real eval --task humanoid-footsteps --plans FILE``: run every plan of a plan file and score it (the task's
plan hooks: :func:`load_plan_file`, :func:`evaluate_plans`, :func:`format_report`).

Each plan runs in its own env (``repeats`` envs per plan with different random draws), on flat ground with a
foothold box under every raised footstep, domain randomisation as configured, seeded by ``eval.seed``. A plan's
episode lasts until its last step's window has ended plus 1 s, or until a fall.
"""

from __future__ import annotations

import sys
from typing import Callable

import torch

from sim2real.tasks.rollout import first_episodes, rng_state, set_rng_state
from sim2real.tasks.humanoid_footsteps.env import HumanoidFootstepsEnv
from sim2real.tasks.humanoid_footsteps.plans import FootstepPlan


def load_plan_file(path: str, cfg: dict) -> tuple[list[FootstepPlan], dict]:
    """The plans of ``path`` and the config to walk them with: ``env.num_plan_steps`` raised to the longest plan
    (a plan file is walked to its end). Plans outside ``check_plan``'s limits are walked too, with a warning on
    stderr.

    Raises:
        ConfigError: the file cannot be read or parsed (the message names the file and line).
    """
    from sim2real.configs import ConfigError, apply_overrides
    from sim2real.tasks.humanoid_footsteps.plans import PlanFileError, check_plan, load_plans

    try:
        plans = load_plans(path)
    except PlanFileError as exc:
        raise ConfigError(f"--plans: {exc}") from None
    for plan in plans:
        problems = check_plan(plan)
        if problems:
            print(f"warning: {path}: {plan.name} is outside the trained limits: {'; '.join(problems[:3])}"
                  + (f" (+{len(problems) - 3} more)" if len(problems) > 3 else ""), file=sys.stderr)
    longest = max(len(p.feet) for p in plans)
    if longest > cfg["env"]["num_plan_steps"]:
        cfg = apply_overrides(cfg, [f"env.num_plan_steps={longest}"])
    return plans, cfg


def evaluate_plans(cfg: dict, policy: Callable[[torch.Tensor], torch.Tensor], plans: list[FootstepPlan],
                   repeats: int = 1, seed: int | None = None) -> dict:
    """Hit and fall rates per plan and overall.

    Args:
        cfg: resolved ``humanoid-footsteps`` config.
        policy: ``policy`` observation group ``[N, D]`` -> actions ``[N, A]`` (deterministic).
        plans: plans in their own start frame (first step = the current support foot).
        repeats: episodes per plan.
        seed: defaults to ``cfg["eval"]["seed"]``.

    Returns:
        ``{"plans": [{"name", "steps", "hits", "hit_rate", "fall_rate", "touchdowns"}...], "hit_rate", "fall_rate",
        "steps", "num_plans", "repeats", "seed"}``; ``touchdowns`` lists ``(step index, x, y, z, yaw, hit)`` of the
        first repeat, world frame of that env (the plan frame rotated by its random spawn heading).
    """
    seed = int(cfg["eval"]["seed"] if seed is None else seed)
    expanded = [p for p in plans for _ in range(repeats)]
    saved = rng_state()
    try:
        torch.manual_seed(seed)
        env = HumanoidFootstepsEnv(cfg, num_envs=len(expanded), device=cfg["device"], eval_mode=True,
                                   plans=expanded)
        touchdowns = [None] * env.num_envs
        plans_w = env.tracker.steps_w.cpu().clone()

        def keep_touchdowns(ids: list[int]) -> None:
            for i in ids:
                touchdowns[i] = env.episode_touchdowns[i]

        outcome = first_episodes(env, policy, keep_touchdowns)
    finally:
        set_rng_state(saved)
    rows = []
    for j, plan in enumerate(plans):
        idx = slice(j * repeats, (j + 1) * repeats)
        hits, steps = outcome["hits"][idx], outcome["steps"][idx]
        rows.append({"name": plan.name or f"plan {j + 1}", "steps": int(steps.sum()), "hits": int(hits.sum()),
                     "hit_rate": float(hits.sum() / steps.sum().clamp_min(1.0)),
                     "fall_rate": float(outcome["fall"][idx].mean()),
                     "touchdowns": touchdowns[j * repeats] or [],
                     "plan_w": plans_w[j * repeats, :len(plan.feet)].tolist()})
    total_steps = outcome["steps"].sum().clamp_min(1.0)
    return {"task": cfg["task"], "plans": rows, "hit_rate": float(outcome["hits"].sum() / total_steps),
            "fall_rate": float(outcome["fall"].mean()), "steps": int(outcome["steps"].sum()),
            "num_plans": len(plans), "repeats": repeats, "seed": seed}


def format_report(result: dict) -> str:
    """A table: one line per plan, then the overall rates."""
    lines = [f"{'plan':<24} {'steps':>6} {'hits':>5} {'hit rate':>9} {'fall rate':>10}"]
    for r in result["plans"]:
        lines.append(f"{r['name'][:24]:<24} {r['steps']:>6} {r['hits']:>5} {r['hit_rate']:>9.3f} "
                     f"{r['fall_rate']:>10.3f}")
    lines.append(f"{'overall':<24} {result['steps']:>6} {'':>5} {result['hit_rate']:>9.3f} "
                 f"{result['fall_rate']:>10.3f}")
    return "\n".join(lines)

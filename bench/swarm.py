"""``sim2real bench swarm``: a swarm task's held-out metrics and throughput at 8 and 32 drones per room and
obstacle densities of 20% and 80%, measured side by side in one run.

For each (drones per room N, density): success rate (rooms whose every drone held its goal for the last
``env.success_hold_s``), fraction of drones at their goals, collisions (drone-drone and column contacts) per
drone-minute, from one held-out episode per room (``eval.seed``) with the exported policy (onnxruntime, batched over
all drones; default: the task's shipped one, ``PRETRAINED_DIR / task``). Throughput: drone-steps/s of the env alone (random actions) and of the env plus batched ONNX
inference, each at ``N x rooms`` drones; ratios to the first size.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from sim2real.policies.artefact import PRETRAINED_DIR


def _throughput(cfg: dict, policy, rooms: int, steps: int) -> tuple[float, float]:
    from sim2real.tasks import make_env

    env = make_env(cfg, num_envs=rooms)
    out = []
    for use_policy in (False, True):
        obs = env.get_observations()
        actions = torch.rand(env.num_envs, 4) * 2 - 1
        t0 = time.perf_counter()
        with torch.inference_mode():
            for _ in range(steps):
                if use_policy:
                    actions = policy(obs["policy"])
                obs, *_ = env.step(actions)
        out.append(env.num_envs * steps / (time.perf_counter() - t0))
    return out[0], out[1]


def bench_swarm(task: str, quick: bool = False, policy_dir: str | None = None,
                overrides: list[str] | None = None) -> dict:
    """The table of the module docstring for the exported policy of ``task`` in ``policy_dir`` (default: the
    shipped one); ``overrides``: task config ``KEY=VALUE`` applied to every row (e.g. ``env.downwash=false``).

    Returns:
        ``{"N<drones>_d<density %>": {"drones", "density", "rooms", "success_rate", "at_goal_rate",
        "collisions_per_drone_minute", "boundary_per_drone_minute", "env_drone_steps_per_s",
        "env_and_policy_drone_steps_per_s", "eval_wall_s"}}``.

    Raises:
        PolicyMismatchError: the policy is missing, damaged or of another task.
    """
    from sim2real.configs import apply_overrides
    from sim2real.policies.artefact.onnx_policy import load_exported
    from sim2real.policies.evaluation import evaluate

    policy, base = load_exported(Path(policy_dir) if policy_dir else PRETRAINED_DIR / task, task)
    base = apply_overrides(base, list(overrides or []))
    sizes = [(8, 0.2), (8, 0.8), (32, 0.2), (32, 0.8)]
    drone_budget = 64 if quick else 512  # drones per evaluation (rooms = budget / N)
    rows = {}
    for n, density in sizes:
        cfg = apply_overrides(base, [f"eval.num_drones={n}", f"eval.density={density}", "eval.goal_fraction=1.0"])
        rooms = max(2, drone_budget // n)
        t0 = time.perf_counter()
        m = evaluate(cfg, policy, num_episodes=rooms)
        wall = time.perf_counter() - t0
        tp_cfg = apply_overrides(base, [f"env.drones_per_env={n}"])
        env_sps, full_sps = _throughput(tp_cfg, policy, max(1, (256 if quick else 2048) // n), 20 if quick else 100)
        rows[f"N{n}_d{int(density * 100)}"] = {
            "drones": n, "density": density, "rooms": rooms, **{k: m[k] for k in (
                "success_rate", "at_goal_rate", "collisions_per_drone_minute", "boundary_per_drone_minute")},
            "env_drone_steps_per_s": env_sps, "env_and_policy_drone_steps_per_s": full_sps, "eval_wall_s": wall}
    base_sps = next(iter(rows.values()))["env_and_policy_drone_steps_per_s"]
    print(f"{'N':>3} {'density':>7} {'rooms':>5} {'success':>8} {'at goal':>8} {'coll/drone-min':>15} "
          f"{'env steps/s':>12} {'env+policy/s':>13} {'ratio':>6}")
    for r in rows.values():
        print(f"{r['drones']:>3} {r['density']:>7.0%} {r['rooms']:>5} {r['success_rate']:>8.3f} "
              f"{r['at_goal_rate']:>8.3f} {r['collisions_per_drone_minute']:>15.3f} "
              f"{r['env_drone_steps_per_s']:>12,.0f} {r['env_and_policy_drone_steps_per_s']:>13,.0f} "
              f"{r['env_and_policy_drone_steps_per_s'] / base_sps:>6.2f}")
    return rows


def run(args, task: str) -> dict:
    return bench_swarm(task, quick=args.quick, policy_dir=args.policy, overrides=list(args.overrides))

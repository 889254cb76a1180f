"""``sim2real bench swarm``: a swarm task's held-out metrics and throughput at 8 and 32 drones per room and
obstacle densities of 20% and 80%, measured side by side in one run.

For each (drones per room N, density), from one held-out 12 s flight per room (``eval.seed``) with the exported
policy (onnxruntime, batched over all drones; default: the task's shipped one, ``PRETRAINED_DIR / task``): the
per-drone success rate (no contact of any kind in the flight and within 0.3 m of the goal at the end; issue 22),
contacts of every kind per drone-minute, deadlocks (contact-free drones that stopped short of their goals), the
room success rate (rooms whose every drone held its goal for the last ``env.success_hold_s``), the fraction of
drones at their goals, and column contacts per drone-minute (:meth:`QuadrotorSwarmEnv.summarize_outcomes`).
Throughput: drone-steps/s of the env alone (random actions) and of the env plus batched ONNX inference, each at
``N x rooms`` drones; ratios to the first size.

``--curve``: the same held-out metrics at 32 drones per room (the table's rooms; its 20% and 80% rows are two of
the points) and densities 0, 20, 40, 60 and 80%,
printed as a table and plotted to ``swarm_density.png`` in ``--out`` (default: the current folder).
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


#: The held-out metrics of each row, in the table's order (:meth:`QuadrotorSwarmEnv.summarize_outcomes`).
METRICS = ("drone_success_rate", "contacts_per_drone_minute", "deadlock_rate", "success_rate", "at_goal_rate",
           "collisions_per_drone_minute", "column_contacts_per_drone_minute", "boundary_per_drone_minute")
#: Obstacle densities of ``--curve`` (issue 22: 0-80 %).
CURVE_DENSITIES = (0.0, 0.2, 0.4, 0.6, 0.8)


def bench_swarm(task: str, quick: bool = False, policy_dir: str | None = None,
                overrides: list[str] | None = None, curve: bool = False, out: str | None = None) -> dict:
    """The table of the module docstring for the exported policy of ``task`` in ``policy_dir`` (default: the
    shipped one); ``overrides``: task config ``KEY=VALUE`` applied to every row (e.g. ``env.downwash=false``).

    Returns:
        ``{"N<drones>_d<density %>": {"drones", "density", "rooms", *METRICS, "env_drone_steps_per_s",
        "env_and_policy_drone_steps_per_s", "eval_wall_s"}}``; with ``curve``, also ``"curve"``: ``[{"density",
        "rooms", *METRICS}]`` (32 drones per room) and ``"curve_plot"``: the PNG's path.

    Raises:
        PolicyMismatchError: the policy is missing, damaged or of another task. ConfigError: with ``curve``, ``out``
            cannot be made a folder.
    """
    from sim2real.configs import apply_overrides
    from sim2real.policies.artefact.onnx_policy import load_exported
    from sim2real.policies.evaluation import evaluate

    if curve:  # the plot's folder, before the long evaluations (a folder that cannot be made fails now)
        from sim2real.configs import ConfigError

        try:
            Path(out or ".").mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"--out {out}: cannot make that folder ({exc.strerror or exc})") from None
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
            "drones": n, "density": density, "rooms": rooms, **{k: m[k] for k in METRICS},
            "env_drone_steps_per_s": env_sps, "env_and_policy_drone_steps_per_s": full_sps, "eval_wall_s": wall}
    base_sps = next(iter(rows.values()))["env_and_policy_drone_steps_per_s"]
    print(f"{'N':>3} {'density':>7} {'rooms':>5} {'drone success':>13} {'contacts/min':>12} {'deadlocks':>9} "
          f"{'room success':>12} {'at goal':>7} {'column/min':>10} {'env steps/s':>11} {'env+policy/s':>12} "
          f"{'ratio':>5}")
    for r in rows.values():
        print(f"{r['drones']:>3} {r['density']:>7.0%} {r['rooms']:>5} {r['drone_success_rate']:>13.3f} "
              f"{r['contacts_per_drone_minute']:>12.2f} {r['deadlock_rate']:>9.3f} {r['success_rate']:>12.3f} "
              f"{r['at_goal_rate']:>7.3f} {r['column_contacts_per_drone_minute']:>10.2f} "
              f"{r['env_drone_steps_per_s']:>11,.0f} {r['env_and_policy_drone_steps_per_s']:>12,.0f} "
              f"{r['env_and_policy_drone_steps_per_s'] / base_sps:>5.2f}")
    if curve:  # the table's 32-drone rows are points of the curve (the same seeded rooms): not evaluated again
        done = {r["density"]: r for r in rows.values() if r["drones"] == 32}
        rows["curve"], rows["curve_plot"] = _density_curve(base, policy, rows["N32_d20"]["rooms"], Path(out or "."),
                                                           done)
    return rows


def _density_curve(base: dict, policy, rooms: int, out: Path, done: dict | None = None) -> tuple[list[dict], str]:
    """Held-out metrics at 32 drones per room (``rooms`` rooms) against :data:`CURVE_DENSITIES`, as a table and a
    PNG in the existing folder ``out``; ``done``: ``{density: metrics}`` already measured on the same rooms (the
    bench's table rows), taken as they are."""
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from sim2real.configs import apply_overrides
    from sim2real.configs.durable import atomic_write_bytes
    from sim2real.policies.evaluation import evaluate

    curve = []
    for density in CURVE_DENSITIES:
        m = (done or {}).get(density)
        if m is None or m["rooms"] != rooms:
            cfg = apply_overrides(base, ["eval.num_drones=32", f"eval.density={density}", "eval.goal_fraction=1.0"])
            m = evaluate(cfg, policy, num_episodes=rooms)
        curve.append({"density": density, "rooms": rooms, **{k: m[k] for k in METRICS}})
    print(f"\ndensity curve, 32 drones per room, {rooms} rooms each")
    print(f"{'density':>7} {'drone success':>13} {'contacts/min':>12} {'deadlocks':>9} {'column/min':>10}")
    for r in curve:
        print(f"{r['density']:>7.0%} {r['drone_success_rate']:>13.3f} {r['contacts_per_drone_minute']:>12.2f} "
              f"{r['deadlock_rate']:>9.3f} {r['column_contacts_per_drone_minute']:>10.2f}")
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9, 3.5))
    x = [100 * r["density"] for r in curve]
    ax1.plot(x, [r["drone_success_rate"] for r in curve], "o-", label="drone success")
    ax1.plot(x, [r["deadlock_rate"] for r in curve], "s--", label="deadlocks")
    ax1.set(xlabel="obstacle density [%]", ylabel="fraction of drones", ylim=(0, 1.02))
    ax1.legend()
    ax2.plot(x, [r["contacts_per_drone_minute"] for r in curve], "o-", color="tab:red", label="all contacts")
    ax2.plot(x, [r["column_contacts_per_drone_minute"] for r in curve], "s--", color="tab:brown", label="columns")
    ax2.set(xlabel="obstacle density [%]", ylabel="contacts per drone-minute")
    ax2.legend()
    fig.suptitle(f"swarm, 32 drones per room, {rooms} held-out rooms per density")
    fig.tight_layout()
    path = out / "swarm_density.png"
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
    print(f"density curve plot: {path}")
    return curve, str(path)


def run(args, task: str) -> dict:
    return bench_swarm(task, quick=args.quick, policy_dir=args.policy, overrides=list(args.overrides),
                       curve=bool(getattr(args, "curve", False)), out=getattr(args, "out", None))

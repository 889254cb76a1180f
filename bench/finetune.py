"""``sim2real bench finetune``: how much of the reality gap a fine-tuning session recovers in N minutes of robot time.

For the base policy (default: the task's shipped policy, ``PRETRAINED_DIR / task``) and the stand-in of its robot kind
(the task's own, its spec's ``finetune.gap``, else its robot kind's in :data:`BENCH_GAPS`; named in
:data:`sim2real.hardware.standins.reality_gap.REALITY_GAPS`), one run:

1. scores the base policy on the nominal simulator and on the stand-in (the task's held-out set, ``eval.seed``);
2. per seed, runs a session (``finetune run``: learner child process + edge actor) for ``minutes`` of stand-in time
   paced to the wall clock, then scores the version the actor ended on, on the stand-in;
3. per seed, runs the control session (``--learner off``, the same actor and recording, no learner: it ends on
   version 0), stepped as fast as possible since nothing learns, and scores it the same way.

Each session's history is scored too (and its report written, :mod:`sim2real.deploy.finetune.report`): every
version the actor ran, on the stand-in's held-out set, and the worst relative change of those versions against
the base policy (``worst``, negative when all were better; the goal: never worse by more than 5 %); and the actor's
control-period error p99 while paced to the wall clock (the learner training beside it).

It prints a table (the task's gap metric, its spec's ``finetune.gap_metric``: the hover's mean final
position error [m], the jump's success rate; success and crash rates; gap recovered = ``(before - after) / (before -
nominal)`` on the gap metric, signs turned where higher is better) and writes ``finetune.json`` under ``--out``.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

import numpy as np

from sim2real.policies.artefact import PRETRAINED_DIR


#: The stand-in gap of the bench for each robot kind's default gap, unless ``--set standin.gap=...`` says otherwise
#: (a task's own gap, ``FinetuneSpec.gap`` such as the humanoid's, is benched as it is): the fine-tuning issue's, each
#: with an effect the training DR cannot represent (the hover: motor m1 at 85 %; the jump: a compliant floor).
BENCH_GAPS = {"quadrotor": "quadrotor_weak_motor", "legged": "legged_compliant"}


def bench_finetune(policy_dir, minutes: float = 10.0, seeds: int = 3, out=None, overrides=None,
                   realtime: bool = True) -> dict:
    """Per seed, a fine-tuning session and a control session of ``minutes`` of stand-in time from the exported
    policy in ``policy_dir``, each scored on the task's held-out set; writes ``finetune.json`` under ``out``
    (default: a new temporary folder).

    Returns:
        ``{"policy", "minutes", "seeds", "realtime", "rows": [per arm and seed], "summary": {arm: {...}}}``.

    Raises:
        FileExistsError: ``out`` holds sessions of an earlier run. ConfigError: a policy of a task without
        fine-tuning, or a bad override.
    """
    from sim2real.deploy.finetune import runner as ft
    from sim2real.deploy.finetune.report import session_report
    from sim2real.deploy.finetune.session import FinetuneSession

    policy_dir = Path(policy_dir)
    overrides = list(overrides or [])
    if not any(o.split("=", 1)[0].strip() == "standin.gap" for o in overrides):
        from sim2real.hardware.standins.reality_gap import default_gap_name
        from sim2real.policies.artefact.metadata import load_metadata

        meta = load_metadata(policy_dir)
        gap = default_gap_name(meta["task"], meta["robot"])  # the task's own, else its robot kind's
        overrides.insert(0, f"standin.gap={BENCH_GAPS.get(gap, gap)}")
    out = Path(out) if out else Path(tempfile.mkdtemp(prefix="bench_finetune_"))
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    existing = [out / f"{arm}_seed{seed}" for arm in ("session", "control") for seed in range(seeds)
                if (out / f"{arm}_seed{seed}").exists()]
    if existing:  # never delete earlier sessions (their recordings are data)
        raise FileExistsError(f"{existing[0]} exists: bench finetune writes new sessions; choose another --out or "
                              "move the earlier ones away")
    for arm in ("session", "control"):
        for seed in range(seeds):
            sdir = out / f"{arm}_seed{seed}"
            session, cfg = ft.open_session(sdir, policy_dir, resume=False,
                                           overrides=[*overrides, f"seed={seed}"])
            t0 = time.monotonic()
            proc = ft.start_learner_process(sdir, session.learner_dir / "learner.log") if arm == "session" else None
            try:
                run = ft.run_actor(session, cfg, minutes=minutes, learner=proc is not None,
                                   endpoints=ft.local_endpoints(session) if proc is not None else None,
                                   realtime=realtime and arm == "session")
            finally:
                if proc is not None:
                    ft.stop_learner_process(proc)
            wall = time.monotonic() - t0
            session = FinetuneSession.open(sdir)
            scores = ft.score_session(session, cfg)
            report = session_report(session, cfg, score=True, scores=scores)  # also writes report.html
            history = report["history"]
            row = {"arm": arm, "seed": seed, "wall_s": wall, **run, "scores": scores,
                   "versions_published": len(session.versions()),
                   "version_sha256": (session.version_record(scores["version"]) or {}).get("sha256",
                                                                                            session.base_sha256),
                   "base_sha256": session.base_sha256, "history": history,
                   "worst_vs_base": report["worst_vs_base"]}
            rows.append(row)
            metric = scores["gap_metric"]
            print(f"{arm} seed {seed}: version {scores['version']}, {metric} "
                  f"{scores['before'][metric]:.3f} -> {scores['after'][metric]:.3f} "
                  f"(nominal {scores['nominal'][metric]:.3f}), recovered {scores['recovered']:.2f}, "
                  f"worst version vs base {100 * row['worst_vs_base']:+.1f}%"
                  + (f", control period error p99 {run['period_error_p99_ms']:.2f} ms"
                     if "period_error_p99_ms" in run else "") + f", {wall:.0f} s", flush=True)
    summary = summarize(rows)
    print_table(summary, minutes)
    result = {"policy": str(policy_dir), "minutes": minutes, "seeds": seeds, "realtime": realtime,
              "overrides": overrides, "rows": rows,
              "summary": summary}
    from sim2real.configs.durable import atomic_write_json

    atomic_write_json(out / "finetune.json", json.loads(json.dumps(result, default=float)))
    print(f"results: {out / 'finetune.json'}")
    return result


def summarize(rows: list[dict]) -> dict:
    """Per arm, means over seeds of the gap metric (``nominal``/``before``/``after``), success and crash (or fall)
    rates, and the gap recovered (mean and per seed)."""
    out = {}
    for arm in ("session", "control"):
        rs = [r for r in rows if r["arm"] == arm]
        if not rs:
            continue
        metric = rs[0]["scores"]["gap_metric"]

        def mean(phase, key):
            return float(np.mean([r["scores"][phase].get(key, np.nan) for r in rs]))

        crash = "crash_rate" if "crash_rate" in rs[0]["scores"]["after"] else "fall_rate"
        out[arm] = {
            "gap_metric": metric, "nominal": mean("nominal", metric), "before": mean("before", metric),
            "after": mean("after", metric), "after_per_seed": [r["scores"]["after"][metric] for r in rs],
            "nominal_success": mean("nominal", "success_rate"), "before_success": mean("before", "success_rate"),
            "after_success": mean("after", "success_rate"), "before_crash": mean("before", crash),
            "after_crash": mean("after", crash), "recovered": float(np.mean([r["scores"]["recovered"] for r in rs])),
            "recovered_per_seed": [r["scores"]["recovered"] for r in rs],
            "versions_published": float(np.mean([r["versions_published"] for r in rs])),
            "worst_vs_base": float(max(r.get("worst_vs_base", 0.0) for r in rs)),
            "period_error_p99_ms": max((float(r["period_error_p99_ms"]) for r in rs if "period_error_p99_ms" in r),
                                       default=None),  # None: not paced to the wall clock (the control arm)
        }
    return out


def print_table(summary: dict, minutes: float) -> None:
    metric = next(iter(summary.values()))["gap_metric"] if summary else "pos_error_mean"
    print(f"\nreality gap on the stand-in, {minutes:g} min of robot time per session (means over seeds; gap metric "
          f"{metric})")
    print(f"{'arm':8s} {'nominal':>8s} {'before':>8s} {'after':>8s} {'recovered':>9s} "
          f"{'succ nom/bef/aft':>18s} {'crash bef/aft':>14s} {'worst':>7s} {'p99 ms':>6s}  per seed recovered")
    for arm, s in summary.items():
        print(f"{arm:8s} {s['nominal']:8.3f} {s['before']:8.3f} {s['after']:8.3f} "
              f"{s['recovered']:9.2f} {s['nominal_success']:6.2f}/{s['before_success']:.2f}/{s['after_success']:.2f}"
              f" {s['before_crash']:7.2f}/{s['after_crash']:.2f} {100 * s['worst_vs_base']:+6.1f}% "
              + (f"{s['period_error_p99_ms']:6.2f}  " if s["period_error_p99_ms"] is not None else f"{'-':>6s}  ")
              + " ".join(f"{x:.2f}" for x in s["recovered_per_seed"]))


def run(args, task: str) -> dict:
    return bench_finetune(args.policy or PRETRAINED_DIR / task, 1.0 if args.quick else args.minutes, args.seeds or 1,
                          args.out, args.overrides)

"""The session report (``sim2real finetune status --session DIR``): what a fine-tuning session did and bought.

Written into the session folder as ``report.json``, ``report.png`` and ``report.html`` (the page shows the plot and
the tables):

* the task's gap metric of every episode the robot flew against robot minutes (the recordings' own outcomes, so a
  real robot's session has its curve too), each version's episodes in their own colour, with a running mean and the
  moments the actor swapped versions;
* the versions: published (when, by which learner step), accepted by the actor (episode and step), and the gate's
  scores of each ``improve`` round (``improve.jsonl``);
* the identified parameters (``identified.json``) beside the stand-in's true shift (the session config's
  ``standin.gap``; meaningful when the session ran on the stand-in);
* with ``score``: the base policy on the nominal simulator and on the stand-in, and every version the actor ran, on
  the task's held-out set (``eval.seed``) of the stand-in (:func:`version_history`): the gap before and after and
  the worst change against the base policy of the versions the robot ran after it (negative: all were better).
"""

from __future__ import annotations

import html
import json
from pathlib import Path

import numpy as np

REPORT_FILES = ("report.json", "report.png", "report.html")


def version_history(session, cfg: dict, scores: dict) -> list[dict]:
    """Every version the actor ran during the session, in order (the base policy first), each scored on the stand-in
    (the task's held-out set, ``eval.seed``) on the gap metric: ``{"version", "episode", "step", "metric",
    "worse_than_base"}``, the last the relative change against the base policy on the stand-in, positive when the
    version is worse (``(after - before) / |before|`` for an error, signs turned where higher is better).
    ``scores``: :func:`~sim2real.deploy.finetune.runner.score_session`'s result; the version it scored reuses it."""
    from sim2real.deploy.finetune import runner as ft
    from sim2real.deploy.finetune.config import base_policy, residual_spec, standin_task_config, task_finetune
    from sim2real.policies.evaluation import evaluate

    spec = residual_spec(session, cfg)
    base, task_cfg = base_policy(session, cfg)
    gap = task_finetune(task_cfg["task"])
    shifted = standin_task_config(task_cfg, cfg)
    metric, before = gap.gap_metric, float(scores["before"][gap.gap_metric])
    sign = -1.0 if gap.higher_is_better else 1.0
    ran, seen = [{"version": 0, "episode": 0, "step": 0}], {0}
    for r in session.all_actor_decisions():  # every robot's; a version several robots ran: its first acceptance
        if r.get("accepted") and int(r["version"]) not in seen:
            seen.add(int(r["version"]))
            ran.append({"version": int(r["version"]), "episode": r.get("episode"), "step": r.get("step")})
    out = []
    for rec in ran:
        v = rec["version"]
        if v == 0:
            value = before
        elif v == int(scores["version"]):
            value = float(scores["after"][metric])
        else:
            state = ft.version_state(session, spec, v)
            value = float(evaluate(shifted, ft.held_residual_policy(base, spec, state, int(cfg["hold_steps"])),
                                   int(cfg["eval"]["episodes"]), int(cfg["eval"]["seed"]))[metric])
        worse = sign * (value - before) / abs(before) if before else 0.0
        out.append({**rec, "metric": value, "worse_than_base": float(worse)})
    return out


def _episode_key(metric: str) -> str:
    """The per-episode outcome behind a held-out metric (``pos_error_mean`` -> ``pos_error``, ``success_rate`` ->
    ``success``)."""
    for suffix in ("_mean", "_rate"):
        if metric.endswith(suffix):
            return metric[: -len(suffix)]
    return metric


def session_report(session, cfg: dict, *, score: bool = False, scores: dict | None = None) -> dict:
    """Build the report of ``session`` and write ``report.json``/``.png``/``.html`` into its folder; returns the
    report dict. ``score``: also score the versions on the stand-in's held-out set (seconds per version; ``scores``:
    an already computed :func:`~sim2real.deploy.finetune.runner.score_session` result to reuse)."""
    from sim2real.configs.durable import atomic_write_bytes, read_jsonl
    from sim2real.deploy.finetune.config import task_finetune
    from sim2real.hardware.standins.reality_gap import REALITY_GAPS, default_gap_name

    meta = session.base_metadata()
    gap = task_finetune(meta["task"])
    key = _episode_key(gap.gap_metric)
    control_dt = float(meta["control_period_s"])
    episodes, empty = [], 0
    for m in session.all_metrics():  # every robot's episodes (a fleet's robots fly at once), in time order
        if m.get("event") == "episode" and m.get("steps") == 0:
            empty += 1  # ended before its first transition (a skipped tick, a fault): no outcome of the policy
        elif m.get("event") == "episode" and key in m:
            episodes.append({"episode": int(m["episode"]), "version": int(m.get("version", 0)), "robot": m["robot"],
                             "robot_min": float(m.get("acked", 0)) * control_dt / 60.0, "value": float(m[key])})
    decisions = session.all_actor_decisions()
    swaps = [{"version": int(r["version"]), "episode": r.get("episode"), "step": r.get("step"), "robot": r["robot"]}
             for r in decisions if r.get("accepted")]
    ran = {int(r["version"]) for r in decisions if r.get("accepted")}
    minutes: dict[str, float] = {}  # each robot's robot time; the session's is their sum
    for e in episodes:
        minutes[e["robot"]] = max(minutes.get(e["robot"], 0.0), e["robot_min"])
    published = [{"version": r["version"], "created (UTC)": _utc(r.get("created_s")),
                  "learner step": r.get("learner_step"), "ran on the robot": int(r["version"]) in ran}
                 for r in session.versions()]
    rounds = [{"version": r.get("version"), "running_version": r.get("running_version"),
               "reason": (r.get("gate") or {}).get("reason"), "wall_s": r.get("wall_s")}
              for r in read_jsonl(Path(session.path) / "improve.jsonl")]
    ident_path = Path(session.path) / "identified.json"
    identified = json.loads(ident_path.read_text()) if ident_path.is_file() else None
    gap_name = cfg["standin"]["gap"]
    named = {"none": {}, "default": REALITY_GAPS[default_gap_name(meta["task"], meta["robot"])]}
    truth = named[gap_name] if gap_name in named else REALITY_GAPS[gap_name]
    report = {"session": str(session.path), "task": meta["task"], "gap_metric": gap.gap_metric,
              "higher_is_better": gap.higher_is_better, "episode_key": key,
              "robot_minutes": float(sum(minutes.values())),
              "robot_minutes_by_robot": minutes, "episodes": episodes, "empty_episodes": empty,
              "swaps": swaps, "published": published, "improve_rounds": rounds,
              "identified": None if identified is None else identified.get("params"),
              "standin_gap": {"name": gap_name, "shift": truth}}
    if score:
        from sim2real.deploy.finetune.runner import score_session

        scores = scores or score_session(session, cfg)
        history = version_history(session, cfg, scores)
        report["scores"] = {"nominal": scores["nominal"][gap.gap_metric], "before": scores["before"][gap.gap_metric],
                            "after": scores["after"][gap.gap_metric], "version": scores["version"],
                            "recovered": scores["recovered"]}
        report["history"] = history
        # the worst of the versions the robot ran after the base (negative: every one was better); 0 with none
        report["worst_vs_base"] = max((h["worse_than_base"] for h in history if h["version"] > 0), default=0.0)
    folder = Path(session.path)
    atomic_write_bytes(folder / "report.json", json.dumps(report, indent=2, default=float).encode())
    _plot(report, folder / "report.png")
    atomic_write_bytes(folder / "report.html", _html(report).encode())
    return report


def _plot(report: dict, path: Path) -> None:
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from sim2real.configs.durable import atomic_write_bytes

    eps = report["episodes"]
    fig, ax = plt.subplots(figsize=(8, 4), dpi=100)
    if eps:
        x = np.array([e["robot_min"] for e in eps])
        y = np.array([e["value"] for e in eps])
        v = np.array([e["version"] for e in eps])
        for version in sorted(set(v.tolist())):
            sel = v == version
            ax.scatter(x[sel], y[sel], s=12, label=f"v{version}" if version else "base")
        k = max(1, min(10, len(y) // 5))
        trailing = [float(np.mean(y[max(0, i - k + 1):i + 1])) for i in range(len(y))]
        ax.plot(x, trailing, color="k", lw=1, label=f"mean of the last {k}")
        ax.legend(fontsize=7, ncol=4)
    if "scores" in report:
        ax.axhline(report["scores"]["nominal"], color="g", ls="--", lw=1)
        ax.axhline(report["scores"]["before"], color="r", ls="--", lw=1)
    else:
        ax.text(0.5, 0.5, "no episodes recorded yet", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("robot time [min]")
    ax.set_ylabel(f"{report['episode_key']} per episode")
    ax.set_title(f"{report['task']}: {Path(report['session']).name}"
                 + (f" (green: nominal, red: base on the stand-in, held-out)" if "scores" in report else ""),
                 fontsize=9)
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png")
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())


def _html(report: dict) -> str:
    def table(rows: list[dict]) -> str:
        if not rows:
            return "<p>none</p>"
        cols = list(rows[0])
        head = "".join(f"<th>{html.escape(str(c))}</th>" for c in cols)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(fmt_value(r.get(c)))}</td>" for c in cols) + "</tr>"
                       for r in rows)
        return f"<table border=1 cellpadding=3><tr>{head}</tr>{body}</table>"

    parts = [f"<h1>Fine-tuning session {html.escape(Path(report['session']).name)}</h1>",
             f"<p>task {html.escape(report['task'])}, {report['robot_minutes']:.2f} robot minutes, "
             f"{len(report['episodes'])} episodes, gap metric {html.escape(report['gap_metric'])}</p>",
             '<img src="report.png">']
    if "scores" in report:
        s = report["scores"]
        parts.append(f"<h2>Held-out (stand-in)</h2><p>nominal {s['nominal']:.4f}, base on the stand-in "
                     f"{s['before']:.4f}, version {s['version']} {s['after']:.4f}: recovered {s['recovered']:.2f}; "
                     f"worst version against the base {100 * report['worst_vs_base']:+.1f} %</p>")
        parts.append(table(report["history"]))
    parts.append("<h2>Versions published</h2><p>learner step: SAC's gradient steps, or the simulated control "
                 "steps of the sim learner's PPO; a version published after the robot's last run has not flown "
                 "(a resumed session starts on the newest one it accepted, or a newer gated one)</p>"
                 + table(report["published"]))
    parts.append("<h2>Versions the actor ran</h2>" + table(report["swaps"]))
    parts.append("<h2>Improve rounds (gate in the identified simulator)</h2>" + table(report["improve_rounds"]))
    ident = report["identified"]
    parts.append("<h2>Identified against the stand-in's shift</h2>")
    if ident is None:
        parts.append("<p>not identified (sim2real finetune identify)</p>")
    else:
        shift = {k.split(".")[-1]: v for k, v in (report["standin_gap"]["shift"] or {}).items()}
        parts.append(table([{"parameter": k, "identified": ident[k], "stand-in": shift.get(k, "")} for k in ident]))
    return "<html><body>" + "\n".join(parts) + "</body></html>"


def _utc(seconds) -> str | None:
    import datetime

    if not isinstance(seconds, (int, float)):
        return None
    return datetime.datetime.fromtimestamp(float(seconds), datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def fmt_value(value, digits: int = 4) -> str:
    """A report value as text: floats to ``digits`` significant digits, lists element by element, None as ''."""
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    if isinstance(value, list):
        return "[" + ", ".join(fmt_value(v, digits) for v in value) + "]"
    return "" if value is None else str(value)

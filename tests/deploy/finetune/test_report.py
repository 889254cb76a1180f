"""The session report (``finetune status``, deploy/finetune/report.py): the episodes' gap metric against robot
minutes from the recordings, the versions published and run, and with ``--score`` every version the actor ran scored
on the stand-in's held-out set, the base policy first."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import sim2real
from sim2real.deploy.finetune import runner as ft
from sim2real.deploy.finetune.report import session_report

PRETRAINED = Path(sim2real.__file__).parent / "policies" / "pretrained" / "quadrotor-hover"
pytestmark = pytest.mark.skipif(not (PRETRAINED / "policy.onnx").is_file(),
                                reason=f"no pretrained hover policy shipped at {PRETRAINED}")

# a sync learner that publishes within 0.1 min of robot time; 16 held-out episodes per score
SMALL = ["eval.episodes=16", "learner.warmup=10", "learner.publish_every=80", "learner.batch_size=32",
         "learner.hidden=[32,32]", "hold_steps=5", "standin.realtime=false"]


@pytest.fixture(scope="module")
def session_with_versions(tmp_path_factory):
    session, cfg = ft.open_session(tmp_path_factory.mktemp("report") / "s", PRETRAINED, resume=False,
                                   overrides=SMALL)
    ft.run_actor(session, cfg, minutes=0.1, learner="sync")
    return session, cfg


def test_the_report_holds_episodes_versions_and_scored_history(session_with_versions, capsys):
    session, cfg = session_with_versions
    rep = session_report(session, cfg, score=True)
    episodes = [m for m in session.metrics() if m.get("event") == "episode"]
    assert len(rep["episodes"]) == len(episodes) >= 1
    assert [e["value"] for e in rep["episodes"]] == [m["pos_error"] for m in episodes]
    # robot minutes from the recorded steps: 0.1 min in all
    assert rep["episodes"][-1]["robot_min"] <= 0.1 + 1e-9 and rep["robot_minutes"] == rep["episodes"][-1]["robot_min"]
    accepted = [d for d in session.actor_decisions() if d["accepted"]]
    assert len(accepted) >= 1 and [s["version"] for s in rep["swaps"]] == [d["version"] for d in accepted]
    assert [p["version"] for p in rep["published"]] == [r["version"] for r in session.versions()]
    # every version the actor ran, the base first; the one it ended on scored as score_session scores it
    history = rep["history"]
    assert [h["version"] for h in history] == [0] + [d["version"] for d in accepted if d["version"] > 0]
    s = rep["scores"]
    assert history[0]["metric"] == s["before"] and history[-1]["metric"] == s["after"]
    assert s["recovered"] == pytest.approx((s["before"] - s["after"]) / (s["before"] - s["nominal"]))
    assert rep["worst_vs_base"] == max((h["worse_than_base"] for h in history if h["version"] > 0), default=0.0)
    assert history[-1]["worse_than_base"] == pytest.approx((s["after"] - s["before"]) / s["before"])
    # the first version the actor took, scored on its own by score_session: the same held-out set
    first = history[1]
    assert first["metric"] == pytest.approx(
        ft.score_session(session, cfg, version=first["version"])["after"]["pos_error_mean"])
    folder = Path(session.path)
    assert json.loads((folder / "report.json").read_text())["gap_metric"] == "pos_error_mean"
    assert (folder / "report.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = (folder / "report.html").read_text()
    assert 'src="report.png"' in page and "not identified" in page and "recovered" in page


def test_status_prints_the_summary_and_links_the_report(session_with_versions, capsys):
    from sim2real.cli import main

    session, _ = session_with_versions
    assert main(["finetune", "status", "--session", str(session.path)]) == 0
    out = capsys.readouterr().out
    assert f"the actor runs version {session.current_actor_version()}" in out
    assert f"report: {Path(session.path) / 'report.html'}" in out
    assert "held-out" not in out  # scored only with --score


def test_episodes_that_ended_before_their_first_step_are_left_out(session_with_versions, capsys):
    # An episode ended by a skipped tick (or a fault) before its first transition has no outcome of the policy:
    # its pos_error (where the drone happened to be) must not enter the report's series or status's means.
    from sim2real.cli import main

    session, cfg = session_with_versions
    before = session_report(session, cfg)["episodes"]
    session.log_metrics({"event": "episode", "episode": 10_000, "version": 0, "steps": 0, "end": "skipped_ticks",
                         "pos_error": 5.0, "return": 0.0})
    rep = session_report(session, cfg)
    assert rep["episodes"] == before and rep["empty_episodes"] == 1
    assert main(["finetune", "status", "--session", str(session.path)]) == 0
    out = capsys.readouterr().out
    assert f"{len(before)} episodes (and 1 that ended before their first step, left out)" in out

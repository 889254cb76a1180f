"""``sim2real bench finetune``: one learning session and one control session per seed on the stand-in, scored on
the same held-out set; the table and ``finetune.json`` are written."""

from __future__ import annotations

import json

import pytest

from sim2real.bench.finetune import bench_finetune
from sim2real.policies.artefact import PRETRAINED_DIR

# tiny: 600 control steps, a learner that publishes within them, 16 held-out episodes
SMALL = ["eval.episodes=16", "learner.warmup=10", "learner.publish_every=20", "learner.batch_size=32",
         "learner.hidden=[32,32]", "hold_steps=5"]


@pytest.mark.slow
def test_a_session_and_a_control_session_are_scored_on_one_held_out_set(tmp_path, capsys):
    # the session arm in real time (6 s: the learner child has time to publish), the control arm as fast as it goes
    out = bench_finetune(PRETRAINED_DIR / "quadrotor-hover", minutes=0.1, seeds=1, out=tmp_path, overrides=SMALL)
    session, control = (next(r for r in out["rows"] if r["arm"] == arm) for arm in ("session", "control"))
    for row in (session, control):
        assert row["steps"] == 600 and row["acked"] == 600  # 0.1 min at 100 Hz, every step recorded
        assert row["scores"]["gap_metric"] == "pos_error_mean"
    # the base policy's scores are those of one held-out set in both arms
    assert session["scores"]["before"] == control["scores"]["before"]
    assert session["scores"]["nominal"] == control["scores"]["nominal"]
    # the session ran a pushed version (another hash than the base); the control session stayed on the base
    assert session["versions_published"] >= 1 and session["version"] >= 1
    assert session["version_sha256"] != session["base_sha256"]
    assert control["version"] == 0 and control["version_sha256"] == control["base_sha256"]
    assert control["scores"]["after"] == control["scores"]["before"] and control["scores"]["recovered"] == 0.0
    # the hover gap by default (with the weak motor the training DR cannot represent)
    assert out["overrides"][0] == "standin.gap=quadrotor_weak_motor"
    # every version the session ran is scored on the stand-in, the base policy first (its score: "before")
    history = session["history"]
    assert history[0]["version"] == 0 and history[0]["metric"] == session["scores"]["before"]["pos_error_mean"]
    assert [h["version"] for h in history][-1] == session["version"] and history[0]["worse_than_base"] == 0.0
    assert history[-1]["metric"] == session["scores"]["after"]["pos_error_mean"]
    assert session["worst_vs_base"] == max((h["worse_than_base"] for h in history if h["version"] > 0), default=0.0)
    # the paced session measured its control period; the control arm (as fast as it goes) did not
    assert 0.0 <= session["period_error_p50_ms"] <= session["period_error_p99_ms"] <= session["period_error_max_ms"]
    assert "period_error_p99_ms" not in control
    summary = out["summary"]
    assert summary["control"]["recovered"] == 0.0 and summary["session"]["gap_metric"] == "pos_error_mean"
    assert summary["control"]["period_error_p99_ms"] is None
    saved = json.loads((tmp_path / "finetune.json").read_text())
    assert saved["summary"]["control"]["recovered"] == 0.0 and len(saved["rows"]) == 2
    table = capsys.readouterr().out
    assert "recovered" in table and "\nsession " in table and "\ncontrol " in table

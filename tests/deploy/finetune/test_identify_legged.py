"""System identification of a legged robot (deploy/finetune/identify_legged.py), end to end in this process: a
control session (learner off) of the shipped jump policy records a stand-in Go2-class robot with KNOWN shifts (the
issue's jump gap: motor strength x0.8, 2-3 control steps of latency drawn per episode, friction 0.25, a compliant
floor), ``identify`` reads the recording back. What it recovers (docs/finetuning.md): the motor strength and each
episode's latency; the friction and the floor's time constant are not recovered under the stand-in's per-episode DR
(mass, centre of mass, gains, pushes), and this test does not claim them."""

from __future__ import annotations

from pathlib import Path

import pytest

import sim2real
from sim2real.deploy.finetune import runner as ft
from sim2real.deploy.finetune.identify import identify
from sim2real.deploy.finetune.identify_data import LeggedOptions
from sim2real.deploy.recording.transitions import read_transitions
from sim2real.hardware.standins.reality_gap import REALITY_GAPS

PRETRAINED = Path(sim2real.__file__).parent / "policies" / "pretrained" / "quadruped-jump"

pytestmark = pytest.mark.skipif(not (PRETRAINED / "policy.onnx").is_file(),
                                reason=f"no pretrained jump policy shipped at {PRETRAINED}")


def test_legged_identification_recovers_strength_and_each_episodes_latency(tmp_path):
    gap = REALITY_GAPS["legged_compliant"]
    assert gap["domain_rand.motor_strength"] == [0.8, 0.8] and gap["domain_rand.latency_steps"] == [2, 3]
    session, cfg = ft.open_session(tmp_path / "jump", PRETRAINED, resume=False,
                                   overrides=["standin.gap=legged_compliant", "standin.realtime=false", "seed=2"])
    ft.run_actor(session, cfg, minutes=0.4, learner=False)
    data = read_transitions(session.recordings_dir)
    assert data["state.v1"].shape == (1200, 13 + 2 * 12)  # 24 s at 50 Hz: base pose and twist, 12 joints

    opts = LeggedOptions(iterations=8, iterations_refine=4, rounds=1, episode_iterations=4, max_windows=300)
    result = identify(session, opts)
    p = result.params
    assert result.robot_kind == "legged" and result.fit_after < 0.9 * result.fit_before, result.table()
    assert abs(p["motor_strength"] - 0.8) <= 0.08, result.table()  # within 10 %
    latencies = [e["latency_steps"] for e in result.per_episode.values()]
    right = sum(v in (2, 3) for v in latencies)
    assert right >= 0.8 * len(latencies), (latencies, result.table())
    assert p["latency_steps"] in (2, 3) and set(result.spread["latency_steps"]) <= {1, 2, 3, 4}
    # the overrides simulate the identified robot with the task's own DR keys
    o = result.overrides()
    assert o["domain_rand.motor_strength"] == [p["motor_strength"]] * 2
    assert o["domain_rand.latency_steps"] == result.spread["latency_steps"]
    assert result.correction() == {}
    assert "motor_strength" in result.table() and "joint_vel" in result.table()

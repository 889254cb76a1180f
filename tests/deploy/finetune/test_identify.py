"""System identification from a fine-tuning session's recordings (deploy/finetune/identify.py), end to end in this
process: a control session (learner off) of the shipped hover policy records a stand-in robot with KNOWN shifts,
``sim2real finetune identify`` reads the recording back and must find them; an unshifted stand-in must identify as
the nominal robot, and a session recorded without the robot state must be refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import sim2real
from sim2real.deploy.finetune import runner as ft
from sim2real.deploy.finetune.actor import STATE_FIELD, recording_layout, transition_sizes
from sim2real.deploy.finetune.config import residual_spec
from sim2real.deploy.finetune.identify import IDENTIFIED_FILE, IdentificationError, identify
from sim2real.deploy.recording.layout import TransitionLayout
from sim2real.deploy.recording.transitions import TransitionRecorder, read_transitions
from sim2real.hardware.standins.reality_gap import REALITY_GAPS, SimulatedRobot

PRETRAINED = Path(sim2real.__file__).parent / "policies" / "pretrained" / "quadrotor-hover"
CTBR_POLICY = Path(__file__).resolve().parents[2] / "fixtures" / "policies" / "hover-ctbr"  # collective thrust + rates

pytestmark = pytest.mark.skipif(not (PRETRAINED / "policy.onnx").is_file(),
                                reason=f"no pretrained hover policy shipped at {PRETRAINED}")

# The stand-in's true shifts, chosen here (the hover gap): mass x1.2, max thrust x0.8, 2 control steps
# (20 ms at 100 Hz) of latency, and motor m1 at 85 % of the others' thrust (which the task's DR cannot represent).
TRUE_MASS_SCALE = 1.2
TRUE_THRUST_SCALE = 0.8
TRUE_LATENCY_STEPS = 2
WEAK_MOTOR = (0.85, 1.0, 1.0, 1.0)


def record_session(tmp_path: Path, name: str, gap: dict, minutes: float, monkeypatch, motors=None, seed: int = 3,
                   policy: Path = PRETRAINED):
    """A control session (learner off, exploring residual) of ``policy`` for ``minutes`` robot time on a stand-in
    shifted by ``gap`` (a dotted-key REALITY_GAPS entry registered for this test); ``motors`` ``[4]`` scales each
    motor's thrust of that stand-in only (the simulator the identification replays is left alone)."""
    monkeypatch.setitem(REALITY_GAPS, f"test_{name}", gap)
    if motors is not None:
        scale = torch.tensor(motors)
        init = SimulatedRobot.__init__

        def weak_init(self, *args, **kwargs):
            init(self, *args, **kwargs)
            apply = self.env.action_term.apply
            self.env.action_term.apply = lambda command, dyn: apply(command, dyn) * scale

        monkeypatch.setattr(SimulatedRobot, "__init__", weak_init)
    session, cfg = ft.open_session(tmp_path / name, policy, resume=False,
                                   overrides=[f"standin.gap=test_{name}", "standin.realtime=false", f"seed={seed}"])
    ft.run_actor(session, cfg, minutes=minutes, learner=False)
    return session


def cli(args: list[str], capsys) -> tuple[int, str, str]:
    from sim2real.cli import main

    code = main(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_identifies_known_mass_latency_thrust_and_weak_motor(tmp_path, monkeypatch, capsys):
    gap = {"domain_rand.mass_scale": [TRUE_MASS_SCALE] * 2, "domain_rand.thrust_scale": [TRUE_THRUST_SCALE] * 2,
           "domain_rand.latency_steps": [TRUE_LATENCY_STEPS] * 2}
    session = record_session(tmp_path, "known", gap, 0.3, monkeypatch, motors=WEAK_MOTOR)
    data = read_transitions(session.recordings_dir)
    assert data[STATE_FIELD].shape == (1800, 13)  # the state is recorded: 18 s at 100 Hz

    code, out, err = cli(["finetune", "identify", "--session", str(session.path)], capsys)
    assert code == 0, err
    assert "mass_scale" in out and "latency 2 steps = 20 ms" in out
    saved = json.loads((Path(session.path) / IDENTIFIED_FILE).read_text())
    p = saved["params"]
    assert abs(p["mass_scale"] - TRUE_MASS_SCALE) <= 0.1 * TRUE_MASS_SCALE, p
    assert p["latency_steps"] == TRUE_LATENCY_STEPS, p  # within 10 %: the exact step
    assert saved["spread"]["latency_steps"] == [TRUE_LATENCY_STEPS, TRUE_LATENCY_STEPS]
    assert abs(p["thrust_scale"] - TRUE_THRUST_SCALE) <= 0.1 * TRUE_THRUST_SCALE, p
    np.testing.assert_allclose(p["motor_thrust_scale"], WEAK_MOTOR, atol=0.03)
    assert saved["fit_after"] < 0.05 * saved["fit_before"]
    assert {"mass_scale", "thrust_scale", "latency_steps"} <= set(saved["outside_training"])
    assert saved["overrides"]["domain_rand.latency_steps"] == [TRUE_LATENCY_STEPS, TRUE_LATENCY_STEPS]
    assert saved["correction"]["motor_thrust_scale"] == p["motor_thrust_scale"]


def test_unshifted_robot_identifies_as_nominal(tmp_path, monkeypatch):
    # the training DR's own draws per episode: mass, thrust, inertia within 5-10 % of nominal, 0 or 1 step of latency
    session = record_session(tmp_path, "none", {}, 0.3, monkeypatch, seed=4)
    result = identify(session)
    p = result.params
    for key in ("mass_scale", "thrust_scale", "inertia_scale"):
        assert abs(p[key] - 1.0) <= 0.1, (key, p)
    assert p["latency_steps"] in (0, 1) and set(result.spread["latency_steps"]) <= {0, 1}, p
    assert min(p["motor_thrust_scale"]) > 0.97, p
    assert set(result.outside_training()) <= {"ext_force"}, result.table()  # the force bound is an RMS estimate
    assert result.fit_after < 0.05


def test_a_ctbr_session_identifies_known_mass_and_latency(tmp_path, monkeypatch):
    # Through the rate loop the replay differentiates through the recorded body rates (its input): an in-place write
    # into them once broke every ctbr identification. The collective thrust is commanded in newtons, so the mass
    # shows in the acceleration; the max thrust only where a motor saturates.
    gap = {"domain_rand.mass_scale": [1.2, 1.2], "domain_rand.latency_steps": [2, 2]}
    session = record_session(tmp_path, "ctbr", gap, 0.3, monkeypatch, seed=4, policy=CTBR_POLICY)
    result = identify(session)
    p = result.params
    assert abs(p["mass_scale"] - 1.2) <= 0.1 * 1.2, p
    assert p["latency_steps"] == 2, p
    assert result.fit_after < 0.05


def test_session_without_state_is_refused(tmp_path, capsys):
    session, cfg = ft.open_session(tmp_path / "old", PRETRAINED, resume=False, overrides=[])
    spec = residual_spec(session, cfg)
    old = TransitionLayout.from_sizes(transition_sizes(spec))  # what sessions recorded before the state
    recorder = TransitionRecorder(session.recordings_dir, old)
    for step in range(30):
        recorder.append({k: np.zeros(n, np.float32) + (step if k == "step" else 0) for k, n in old.fields})
    recorder.close()
    # resumed, it goes on in its own layout (a second layout would make the recording unreadable)
    assert recording_layout(session.recordings_dir, spec, 13) == old
    with pytest.raises(IdentificationError, match="no robot state"):
        identify(session)
    code, out, err = cli(["finetune", "identify", "--session", str(session.path)], capsys)
    assert code == 2 and out == ""
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and "no robot state" in lines[0] and "state.v1" in lines[0], err
    assert not (Path(session.path) / IDENTIFIED_FILE).exists()

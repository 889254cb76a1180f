"""The ``sim`` learner method's loop (deploy/finetune/sim_learner.py): rounds of identify + improve start at the
configured robot times (counted from the actor's transitions), a gated version is pushed through the policy channel
at once, a failed round is logged and the loop goes on, heartbeats keep flowing, and a stop lets the running round
finish. The improvement itself (identify, PPO, gate) is tested end to end in test_improve.py."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import sim2real
from sim2real.configs import ConfigError
from sim2real.deploy.finetune import runner as ft
from sim2real.deploy.finetune.session_learner import SyncLearner
from sim2real.deploy.finetune.sim_learner import sim_learner_loop

PRETRAINED = Path(sim2real.__file__).parent / "policies" / "pretrained" / "quadrotor-hover"
pytestmark = pytest.mark.skipif(not (PRETRAINED / "policy.onnx").is_file(),
                                reason=f"no pretrained hover policy shipped at {PRETRAINED}")


class FakeLink:
    """The learner side of the policy channel: ``feed`` transitions per recv call (10-step holds of the hover's
    10 ms control period: 0.1 s of robot time each) until ``total``, then nothing; stops the loop after ``calls``."""

    def __init__(self, stop: dict, feed: int, total: int, calls: int):
        self.stop, self.feed, self.total, self.calls = stop, feed, total, calls
        self.sent = self.n = self.beats = 0
        self.published: list[bytes] = []

    def recv(self, timeout_s: float):
        time.sleep(0.02)  # a round's worker (instant here) finishes between two calls
        self.n += 1
        if self.n >= self.calls:
            self.stop["flag"] = True
        k = min(self.feed, self.total - self.sent)
        self.sent += k
        return [SimpleNamespace(arrays={"reward": np.zeros(k)}, first_seq=self.sent - k)] if k else []

    def heartbeat(self):
        self.beats += 1

    def publish_policy(self, blob: bytes):
        self.published.append(blob)


def test_rounds_start_at_their_robot_times_and_gated_versions_are_pushed(tmp_path, monkeypatch):
    session, cfg = ft.open_session(tmp_path / "s", PRETRAINED, resume=False,
                                   overrides=["learner.method=sim", "learner.sim.first_after_s=1.0",
                                              "learner.sim.every_s=2.0", "hold_steps=10"])
    calls = []

    def fake_improve(sess, options=None, log=None):
        calls.append(options)
        if len(calls) == 2:  # the gate passed: version 7 stored
            return {"version": 7, "gate": {"reason": "pushed"}}
        if len(calls) == 3:
            raise RuntimeError("identification failed")
        return {"version": None, "gate": {"reason": "not better: not published"}}

    monkeypatch.setattr("sim2real.deploy.finetune.improve.improve", fake_improve)
    monkeypatch.setattr(session, "read_version", lambda v: f"package {v}".encode())
    stop = {"flag": False}
    # 5 transitions (0.5 s of robot time) per call up to 6 s: rounds at 1.0 s, then at >= 3.0 s and >= 5.0 s
    link = FakeLink(stop, feed=5, total=60, calls=40)
    out = sim_learner_loop(session, link, cfg, stop=stop, started=time.monotonic(), duration_s=None,
                           parent_pid=None)
    assert out["rounds"] == 3 and len(calls) == 3
    assert out["robot_time_s"] == pytest.approx(6.0)
    assert link.published == [b"package 7"] and out["published"] == 1
    assert out["last"].startswith("RuntimeError: identification failed")
    assert link.beats >= 1
    assert [o.seed for o in calls] == [1, 2, 3] and calls[0].num_envs == cfg["learner"]["sim"]["num_envs"]


def test_no_round_before_the_first_robot_time_and_a_stop_lets_a_round_finish(tmp_path, monkeypatch):
    session, cfg = ft.open_session(tmp_path / "s", PRETRAINED, resume=False,
                                   overrides=["learner.method=sim", "learner.sim.first_after_s=3.0"])
    finished = []

    def slow_improve(sess, options=None, log=None):
        time.sleep(0.3)
        finished.append(True)
        return {"version": 1, "gate": {"reason": "pushed"}}

    monkeypatch.setattr("sim2real.deploy.finetune.improve.improve", slow_improve)
    monkeypatch.setattr(session, "read_version", lambda v: b"v1")
    stop = {"flag": False}
    short = FakeLink(stop, feed=5, total=25, calls=5)  # 2.5 s of robot time: below first_after_s
    assert sim_learner_loop(session, short, cfg, stop=stop, started=time.monotonic(), duration_s=None,
                            parent_pid=None)["rounds"] == 0
    stop = {"flag": False}
    link = FakeLink(stop, feed=30, total=30, calls=2)  # 3 s at once, then the stop while the round runs
    out = sim_learner_loop(session, link, cfg, stop=stop, started=time.monotonic(), duration_s=None,
                           parent_pid=None)
    assert out["rounds"] == 1 and finished == [True] and link.published == [b"v1"]


def test_sync_learner_refuses_the_sim_method(tmp_path):
    session, cfg = ft.open_session(tmp_path / "s", PRETRAINED, resume=False, overrides=["learner.method=sim"])
    with pytest.raises(ConfigError, match="learner.method 'sim' runs in a learner process"):
        SyncLearner(session, cfg)
    with pytest.raises(ConfigError, match="learner.method"):
        ft.open_session(tmp_path / "t", PRETRAINED, resume=False, overrides=["learner.method=td3"])


def test_run_sync_with_the_sim_method_is_refused_before_a_session_is_written(tmp_path, capsys):
    from sim2real.cli import main

    code = main(["finetune", "run", "--learner", "sync", "--policy", str(PRETRAINED), "--session",
                 str(tmp_path / "s"), "--minutes", "0.1", "--set", "learner.method=sim"])
    assert code == 2 and "learner.method 'sim' runs in a learner process" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()

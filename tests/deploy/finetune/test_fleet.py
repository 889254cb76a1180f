"""End to end, in separate processes: a fleet of two stand-in robots of the quadrotor-hover task (``finetune run
--robot-id cf-a`` and ``--robot-id cf-b``) feeding the one learner of one session. Their recordings are kept apart
(``recordings/cf-a/``, ``recordings/cf-b/``, each naming its robot), the learner consumed both robots' transitions,
both actors accepted the same pushed version, a second actor of one robot is refused, and a kill -9 of one robot's
actor does not stop the learner that the other robot still uses; ``--resume`` of that robot recovers its recording
while the other's is untouched."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import sim2real
from sim2real.configs.durable import read_jsonl, sha256_file
from sim2real.deploy.finetune.runner import pid_running
from sim2real.deploy.finetune.session import FinetuneSession
from sim2real.deploy.recording.transitions import read_transitions, recorded_robot_ids

PRETRAINED = Path(sim2real.__file__).parent / "policies" / "pretrained" / "quadrotor-hover"
# Small learner settings so that versions come within seconds on a busy 2-core machine (as the kill/resume tests).
FAST = ["actor.flush_every=50", "learner.prior_transitions=1000", "learner.prior_envs=32", "learner.warmup=20",
        "learner.publish_every=20", "learner.batch_size=64", "learner.hidden=[64,64]"]
A, B = "cf-a", "cf-b"

pytestmark = pytest.mark.skipif(not (PRETRAINED / "policy.onnx").is_file(),
                                reason=f"no pretrained hover policy shipped at {PRETRAINED}")


def cli(args: list[str], log_path: Path) -> subprocess.Popen:
    with open(log_path, "ab") as log:
        return subprocess.Popen([sys.executable, "-m", "sim2real", *args], stdout=log, stderr=subprocess.STDOUT,
                                env=dict(os.environ, PYTHONUNBUFFERED="1"))


def quiet_jsonl(path: Path) -> list[dict]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return read_jsonl(path)


def quiet_read(path: Path) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return read_transitions(path)


def accepted(session_dir: Path, robot: str) -> list[dict]:
    return [d for d in quiet_jsonl(session_dir / "robots" / robot / "actor.jsonl") if d["accepted"]]


def wait_for(condition, what: str, logs: list[Path], procs=(), timeout_s: float = 150.0):
    deadline = time.monotonic() + timeout_s
    while not condition():
        for p in procs:
            assert p.poll() is None, f"a robot exited ({p.returncode}) before {what}:\n" + "\n".join(
                f"--- {f}\n{f.read_text()[-2000:]}" for f in logs if f.is_file())
        assert time.monotonic() < deadline, f"not {what} in {timeout_s:.0f} s:\n" + "\n".join(
            f"--- {f}\n{f.read_text()[-2000:]}" for f in logs if f.is_file())
        time.sleep(0.1)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    root = tmp_path_factory.mktemp("fleet")
    s = root / "session"
    logs = {A: root / "a.log", B: root / "b.log", "dup": root / "dup.log", "resume": root / "resume.log"}
    learner_log = s / "learner" / "learner.log"
    sets = [x for kv in FAST for x in ("--set", kv)]
    run = ["finetune", "run", "--session", str(s), "--no-realtime", "--learner", "local"]
    procs, learner_pid = [], None
    try:
        a = cli(run + ["--policy", str(PRETRAINED), "--robot-id", A, "--minutes", "5"] + sets, logs[A])
        procs.append(a)
        wait_for(lambda: (s / "learner" / "endpoints.json").is_file(), "the learner bound", [logs[A]], [a])
        learner_pid = json.loads((s / "learner" / "endpoints.json").read_text())["pid"]
        b = cli(run + ["--resume", "--robot-id", B, "--minutes", "5"], logs[B])
        procs.append(b)
        # a second actor of robot cf-b is refused while the first runs, naming its pid
        wait_for(lambda: (s / "robots" / B / "actor.lock").is_file(), "cf-b took its lock", [logs[B]], [a, b])
        dup = subprocess.run([sys.executable, "-m", "sim2real", *run, "--resume", "--robot-id", B, "--minutes",
                              "0.01"], capture_output=True, text=True, timeout=120)
        # both robots run on a version both accepted, each flying an episode on it
        def common():
            va, vb = ({d["version"] for d in accepted(s, r)} for r in (A, B))
            eps = {r: [m["episode"] for m in quiet_jsonl(s / "robots" / r / "metrics.jsonl") if m.get("event")]
                   for r in (A, B)}
            return bool(va & vb) and all(accepted(s, r) and max(eps[r], default=-1) > accepted(s, r)[0]["episode"]
                                         for r in (A, B))
        wait_for(common, "a version accepted by both robots", [logs[A], logs[B], learner_log], [a, b])
        a.send_signal(signal.SIGKILL)
        a.wait(30)
        killed_a = quiet_read(s / "recordings" / A)
        # the learner keeps serving cf-b: it notices cf-a's actor (its parent) is gone but does not stop
        wait_for(lambda: "serving the robots still running: cf-b" in learner_log.read_text(),
                 "the learner noticed the kill", [learner_log], [b], timeout_s=60)
        assert pid_running(learner_pid)
        b.send_signal(signal.SIGTERM)  # cf-b ends its run cleanly: the last robot, so the learner stops by itself
        assert b.wait(60) == 0, logs[B].read_text()[-3000:]
        wait_for(lambda: not pid_running(learner_pid), "the learner stopped with no robot left", [learner_log],
                 timeout_s=60)
        b_files = {p.name: sha256_file(p) for p in (s / "recordings" / B).iterdir()}
        b_data = quiet_read(s / "recordings" / B)
        resume = subprocess.run([sys.executable, "-m", "sim2real", *run, "--resume", "--robot-id", A, "--minutes",
                                 "0.05", "--learner", "off"], capture_output=True, text=True, timeout=180)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        if learner_pid is not None and pid_running(learner_pid):
            os.kill(learner_pid, signal.SIGKILL)
    return {"dir": s, "dup": dup, "b_pid": b.pid, "killed_a": killed_a, "b_files": b_files, "b_data": b_data, "resume": resume,
            "learner_log": learner_log.read_text()}


def test_the_robots_record_apart_and_the_learner_consumed_both(fleet):
    s = fleet["dir"]
    data = {r: quiet_read(s / "recordings" / r) for r in (A, B)}
    for r in (A, B):
        assert len(data[r]["seq"]) > 100, r
        assert recorded_robot_ids(s / "recordings" / r) == {r}
    assert not list((s / "recordings").glob("*.mcap"))  # no robot recorded in the default robot's folder
    # their own draws: the two stand-ins did not fly the same observations
    n = min(len(data[A]["obs"]), len(data[B]["obs"]))
    assert not np.allclose(data[A]["obs"][:n], data[B]["obs"][:n])
    counts = json.loads((s / "learner" / "robots.json").read_text())["transitions_by_robot"]
    assert set(counts) == {A, B} and counts[A] > 0 and counts[B] > 0, counts
    session = FinetuneSession.open(s)
    assert set(session.recording_dirs()) >= {A, B} and session.robot_ids() == [A, B]
    metrics = session.all_metrics()
    assert {m["robot"] for m in metrics} == {A, B}
    assert all(m["robot"] == r for r in (A, B) for m in session.for_robot(r).metrics())


def test_a_pushed_version_is_accepted_by_both_robots(fleet):
    s = fleet["dir"]
    session = FinetuneSession.open(s)
    stored = {r["version"]: r["sha256"] for r in session.versions()}
    by_robot = {r: {(d["version"], d["sha256"]) for d in accepted(s, r)} for r in (A, B)}
    both = by_robot[A] & by_robot[B]
    assert both and all(stored.get(v) == sha for v, sha in both), (by_robot, stored)
    assert all(d["robot"] == r for r in (A, B) for d in accepted(s, r))
    assert not (s / "versions" / "actor.jsonl").exists()  # the default robot never ran


def test_a_second_actor_of_one_robot_is_refused(fleet):
    dup = fleet["dup"]
    assert dup.returncode != 0
    errors = [line for line in dup.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"another actor of robot cf-b (pid {fleet['b_pid']})" in errors[0], dup.stderr[-2000:]


def test_a_killed_robot_resumes_its_recording_and_the_other_is_untouched(fleet):
    s, old = fleet["dir"], fleet["killed_a"]
    assert fleet["resume"].returncode == 0, fleet["resume"].stderr[-3000:]
    n = len(old["seq"])
    assert n > 0 and np.array_equal(old["seq"], np.arange(n))
    assert (s / "recordings" / A / "transitions-000000.mcap.damaged").is_file()  # the unclosed segment recovered
    data = quiet_read(s / "recordings" / A)
    steps = json.loads(fleet["resume"].stdout.strip().splitlines()[-1])["steps"]
    assert steps == 300 and np.array_equal(data["seq"], np.arange(n + steps))
    for k in ("obs", "action", "version", "episode"):
        assert np.array_equal(data[k][:n], old[k]), k
    assert int(data["episode"][n]) > int(old["episode"].max())
    assert int(data["version"][n]) == accepted(s, A)[-1]["version"] >= 1  # back on its last accepted version
    # cf-b's recording: the same files, byte for byte, and the same transitions
    assert {p.name: sha256_file(p) for p in (s / "recordings" / B).iterdir()} == fleet["b_files"]
    assert np.array_equal(quiet_read(s / "recordings" / B)["obs"], fleet["b_data"]["obs"])
    assert recorded_robot_ids(s / "recordings" / A) == {A}

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
from tests.conftest import sim2real_process
from sim2real.deploy.finetune.session import FinetuneSession
from sim2real.deploy.recording.transitions import read_transitions, recorded_robot_ids

PRETRAINED = Path(sim2real.__file__).parent / "policies" / "pretrained" / "quadrotor-hover"
# Small learner settings so that versions come within seconds on a busy 2-core machine (as the kill/resume tests).
FAST = ["actor.flush_every=50", "learner.prior_transitions=1000", "learner.prior_envs=32", "learner.warmup=20",
        "learner.publish_every=20", "learner.batch_size=64", "learner.hidden=[64,64]"]
A, B = "cf-a", "cf-b"

pytestmark = pytest.mark.skipif(not (PRETRAINED / "policy.onnx").is_file(),
                                reason=f"no pretrained hover policy shipped at {PRETRAINED}")


cli = sim2real_process  # python -m sim2real <args> in a process of its own, output to a log


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
        # 30 robot minutes: neither run ends by itself (cf-a is killed, cf-b stopped with SIGTERM)
        a = cli(run + ["--policy", str(PRETRAINED), "--robot-id", A, "--minutes", "30"] + sets, logs[A])
        procs.append(a)
        wait_for(lambda: (s / "learner" / "endpoints.json").is_file(), "the learner bound", [logs[A]], [a])
        learner_pid = json.loads((s / "learner" / "endpoints.json").read_text())["pid"]
        b = cli(run + ["--resume", "--robot-id", B, "--minutes", "30"], logs[B])
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
        # a resume that forgets --robot-id is refused: it must not add a "default" robot on the base policy
        nameless = subprocess.run([sys.executable, "-m", "sim2real", *run, "--resume", "--minutes", "0.05",
                                   "--learner", "off"], capture_output=True, text=True, timeout=180)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        if learner_pid is not None and pid_running(learner_pid):
            os.kill(learner_pid, signal.SIGKILL)
    return {"dir": s, "dup": dup, "b_pid": b.pid, "killed_a": killed_a, "b_files": b_files, "b_data": b_data,
            "resume": resume, "nameless": nameless,
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


def test_the_report_counts_every_robots_episodes_and_minutes(fleet):
    from sim2real.deploy.finetune.config import session_config
    from sim2real.deploy.finetune.report import session_report

    session = FinetuneSession.open(fleet["dir"])
    rep = session_report(session, session_config(session))
    eps = {r: [e for e in rep["episodes"] if e["robot"] == r] for r in (A, B)}
    assert all(len(eps[r]) == len([m for m in session.for_robot(r).metrics() if m.get("event") == "episode"]) > 0
               for r in (A, B))
    by_robot = rep["robot_minutes_by_robot"]
    assert set(by_robot) == {A, B} and rep["robot_minutes"] == pytest.approx(by_robot[A] + by_robot[B])
    assert by_robot[B] == pytest.approx(max(e["robot_min"] for e in eps[B])) and by_robot[B] > 0
    assert {s["robot"] for s in rep["swaps"]} == {A, B}


def test_a_second_actor_of_one_robot_is_refused(fleet):
    dup = fleet["dup"]
    assert dup.returncode != 0
    errors = [line for line in dup.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and f"another actor of robot cf-b (pid {fleet['b_pid']})" in errors[0], dup.stderr[-2000:]


def test_resuming_a_fleet_without_a_robot_id_is_refused_and_adds_no_robot(fleet):
    run = fleet["nameless"]
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert run.returncode == 2 and len(errors) == 1, run.stderr[-2000:]
    assert "is a fleet (robots cf-a, cf-b): pass --robot-id" in errors[0]
    s = fleet["dir"]
    assert not list((s / "recordings").glob("*.mcap*")) and not (s / "metrics.jsonl").exists()
    assert FinetuneSession.open(s).robot_ids() == [A, B]


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


# --------------------------------------------------------------------------------------------- the parts, alone
def make_session(path: Path) -> FinetuneSession:
    return FinetuneSession.create(path, PRETRAINED, task="quadrotor-hover", robot_name="cf", config={"seed": 0})


def test_robot_views_keep_their_files_apart_and_the_default_robot_keeps_todays_layout(tmp_path):
    session = make_session(tmp_path / "s")
    default = FinetuneSession.open(tmp_path / "s")
    assert default.robot_id == "default" and default.recordings_dir == tmp_path / "s" / "recordings"
    default.log_metrics({"event": "episode", "episode": 0})
    default.record_actor_decision(0, default.base_sha256, accepted=True, episode=0)
    assert (tmp_path / "s" / "metrics.jsonl").is_file() and (tmp_path / "s" / "versions" / "actor.jsonl").is_file()
    assert "robot" not in default.metrics()[0] and "robot" not in default.actor_decisions()[0]
    a = session.for_robot(A)
    assert a.recordings_dir == tmp_path / "s" / "recordings" / A and a.recordings_dir.is_dir()
    a.log_metrics({"event": "episode", "episode": 0})
    a.log_metrics({"event": "episode", "episode": 1})
    a.record_actor_decision(0, a.base_sha256, accepted=False, reason="test", episode=1)
    assert [m["robot"] for m in read_jsonl(tmp_path / "s" / "robots" / A / "metrics.jsonl")] == [A, A]
    assert a.actor_decisions()[0]["robot"] == A and a.current_actor_version() == 0
    assert len(default.metrics()) == 1 and len(default.actor_decisions()) == 1  # apart from the default robot's
    assert session.robot_ids() == [A, "default"]
    assert sorted(m["robot"] for m in session.all_metrics()) == [A, A, "default"]
    assert list(session.recording_dirs()) == ["default", A]
    for bad in ("", "../x", "a/b", "-x", "x" * 65):
        with pytest.raises(ValueError, match="invalid robot id"):
            session.for_robot(bad)


def test_each_robot_has_its_own_actor_lock_and_live_actors_names_the_holders(tmp_path):
    session = make_session(tmp_path / "s")
    a, b = session.for_robot(A), session.for_robot(B)
    assert session.live_actors() == {}
    with a.exclusive("actor"), b.exclusive("actor"):  # two robots run at once; the learner lock is the session's
        assert session.live_actors() == {A: os.getpid(), B: os.getpid()}
        code = ("import sys; from sim2real.deploy.finetune.session import FinetuneSession as F\n"
                "try:\n    F.open(sys.argv[1]).for_robot(sys.argv[2]).exclusive('actor').__enter__()\n"
                "except RuntimeError as e:\n    print(e)")
        out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "s"), A], capture_output=True, text=True,
                             timeout=60)
        assert f"another actor of robot {A} (pid {os.getpid()})" in out.stdout, out.stdout + out.stderr
    assert session.live_actors() == {} and not (tmp_path / "s" / "robots" / A / "actor.lock").exists()


def test_learner_transitions_and_identification_read_every_robots_recording(tmp_path):
    from sim2real.deploy.finetune.identify_data import merge_recordings
    from sim2real.deploy.finetune.learner import transitions_from_recording
    from sim2real.deploy.recording.transitions import TransitionRecorder

    session = make_session(tmp_path / "s")
    layout = {"episode": 1, "step": 1, "version": 1, "obs": 2, "next_obs": 2, "base_action": 1,
              "next_base_action": 1, "residual": 1, "action": 1, "reward": 1, "terminated": 1, "truncated": 1,
              "intervention": 1}
    rows = {A: 10, B: 6}
    for robot, n in rows.items():
        with TransitionRecorder(session.for_robot(robot).recordings_dir, layout, robot_id=robot) as rec:
            for t in range(n):
                rec.append({k: np.full(size, t // 5 if k == "episode" else t % 5 if k == "step" else 0.5)
                            for k, size in layout.items()} | {"truncated": float(t % 5 == 4)})
    assert recorded_robot_ids(session.recordings_dir / A) == {A}
    # cf-a: two ended holds of 5 steps; cf-b: one (its last step, an unended hold, makes no transition)
    assert len(transitions_from_recording(session.path, 5)["reward"]) == 2 + 1
    merged = merge_recordings([read_transitions(d) for d in session.recording_dirs().values()])
    assert merged["seq"].tolist() == list(range(10)) + [11 + i for i in range(6)]  # a gap: no window spans robots
    assert merged["episode"].tolist() == [0] * 5 + [1] * 5 + [2] * 5 + [3]


def test_one_learner_link_counts_each_robots_batches_apart_and_pushes_to_both():
    import secrets

    from sim2real.deploy.finetune.policy_channel import ActorLink, LearnerLink

    key = secrets.token_hex(32)
    learner = LearnerLink("tcp://127.0.0.1:0", "tcp://127.0.0.1:0", key=key)
    eps = learner.bound_endpoints
    actors = {r: ActorLink(eps["transitions"], eps["policy"], key=key, robot_id=r) for r in (A, B)}
    try:
        def rows(n):
            return {"reward": np.zeros(n, np.float32)}
        got = []
        for r, actor in actors.items():  # both robots number their transitions from 0: not out of order
            deadline = time.monotonic() + 10
            while not actor.send(0, rows(3)):
                assert time.monotonic() < deadline
                time.sleep(0.01)
            assert actor.send(3, rows(4 if r == A else 2))
        deadline = time.monotonic() + 10
        while len(got) < 4 and time.monotonic() < deadline:
            got += learner.recv(timeout_s=0.1)
        assert sorted(b.robot for b in got) == [A, A, B, B]
        assert learner.received_by_robot == {A: 7, B: 5} and learner.high_water_by_robot == {A: 6, B: 4}
        assert learner.out_of_order_batches == 0
        # every heartbeat reaches both robots (PUB fans out)
        deadline = time.monotonic() + 10
        while not all(a.learner_alive() for a in actors.values()):
            assert time.monotonic() < deadline
            learner.heartbeat()
            time.sleep(0.05)
    finally:
        for actor in actors.values():
            actor.close()
        learner.close()

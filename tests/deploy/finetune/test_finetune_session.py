"""End to end, in separate processes: ``sim2real finetune run`` (edge actor + local learner child) with the shipped
hover policy is killed with SIGKILL while it records; the session on disk is consistent (durable recording up to
what the actor acknowledged, only accepted versions, never going back), the orphaned learner checkpoints and stops
by itself, and ``finetune run --resume`` continues it: same policy version, seq numbers and learner updates
continuing, the unclosed recording kept as ``.damaged``. A corrupted chunk of a closed recording is skipped with a
warning naming it, and the session still resumes."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

import sim2real
from sim2real.deploy.recording.layout import RecordingWarning
from sim2real.deploy.recording.transitions import read_transitions
from sim2real.deploy.finetune.session import FinetuneSession
from sim2real.configs.durable import read_jsonl, sha256_file
from sim2real.deploy.finetune.runner import pid_running
from tests.conftest import sim2real_process

PRETRAINED = Path(sim2real.__file__).parent / "policies" / "pretrained" / "quadrotor-hover"
FLUSH_EVERY = 50
# Small learner settings so that versions come within seconds on a busy 2-core machine.
FAST = [f"actor.flush_every={FLUSH_EVERY}", "learner.prior_transitions=1000", "learner.prior_envs=32",
        "learner.warmup=20", "learner.publish_every=20", "learner.batch_size=64", "learner.hidden=[64,64]"]
RESUME_MINUTES = 0.2  # 1200 control steps at 100 Hz

pytestmark = pytest.mark.skipif(not (PRETRAINED / "policy.onnx").is_file(),
                                reason=f"no pretrained hover policy shipped at {PRETRAINED}")


# --------------------------------------------------------------------------------------------------- helpers
cli = sim2real_process  # python -m sim2real <args> in a process of its own, output to a log


def run_to_end(args: list[str], log_path: Path, timeout_s: float = 300.0) -> int:
    """:func:`cli` to its end (killed after ``timeout_s``); returns its exit code."""
    proc = cli(args, log_path)
    try:
        return proc.wait(timeout_s)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def quiet_jsonl(path: Path) -> list[dict]:
    """read_jsonl of a file another process is appending to (its torn last line is ignored quietly)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return read_jsonl(path)


def read_recording(path: Path) -> tuple[dict, list[str]]:
    """read_transitions and the texts of the RecordingWarnings it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        data = read_transitions(path)
    return data, [str(w.message) for w in caught if issubclass(w.category, RecordingWarning)]


def learner_updates(session_dir: Path) -> int:
    state = torch.load(io.BytesIO((session_dir / "learner" / "learner.pt").read_bytes()), weights_only=True)
    return int(state["updates"])


def last_json_line(text: str) -> dict:
    return json.loads([line for line in text.splitlines() if line.startswith("{")][-1])


def version_schedule(decisions: list[dict]):
    """``(episode, step) -> version that chose that transition`` from the actor's accepted decisions: a version
    accepted at the end of episode e (``step`` None) runs from episode e + 1; one accepted at step s of episode e
    (``actor.swap_at=hold``) runs from that step on."""
    accepted = [(d["episode"], d.get("step"), d["version"]) for d in decisions if d["accepted"]]

    def version(e: int, s: int) -> int:
        return max((v for de, ds, v in accepted if de < e or (ds is not None and de == e and s >= ds)), default=0)

    return version


def check_versions(data: dict, decisions: list[dict], hold_steps: int) -> None:
    """Every transition's version is one the actor accepted (or 0), never decreasing along seq, and the one the
    decisions say chose it; a version taken inside an episode was taken at a hold boundary (where the residual is
    redrawn anyway), never in the middle of a held residual."""
    version, episode, step = (data[k].astype(int) for k in ("version", "episode", "step"))
    accepted = {d["version"] for d in decisions if d["accepted"]} | {0}
    assert set(version) <= accepted, f"versions {set(version) - accepted} were never accepted by the actor"
    assert np.all(np.diff(version) >= 0), "the version went back along seq"
    inside = [d["step"] for d in decisions if d["accepted"] and d.get("step") is not None]
    assert all(s > 0 and s % hold_steps == 0 for s in inside), f"swaps inside a held residual: steps {inside}"
    ran = version_schedule(decisions)
    expected = np.array([ran(int(e), int(s)) for e, s in zip(episode, step)])
    wrong = np.flatnonzero(expected != version)
    assert not len(wrong), (f"{len(wrong)} transitions ran another version than decided, first at seq "
                            f"{int(data['seq'][wrong[0]])}: {version[wrong[0]]} instead of {expected[wrong[0]]}")


def hold_steps_of(session_dir: Path) -> int:
    from sim2real.deploy.finetune.config import session_config

    return int(session_config(FinetuneSession.open(session_dir))["hold_steps"])


# ------------------------------------------------------------------------------------------- the killed session
@pytest.fixture(scope="module")
def killed(tmp_path_factory):
    """A session whose ``finetune run`` was SIGKILLed after its actor had accepted a version and flown an episode
    on it, and what was on disk right after the kill."""
    root = tmp_path_factory.mktemp("finetune")
    session_dir, log_path = root / "session", root / "run.log"
    args = ["finetune", "run", "--session", str(session_dir), "--policy", str(PRETRAINED), "--minutes", "3",
            "--no-realtime", "--learner", "local"]
    proc = cli(args + [a for kv in FAST for a in ("--set", kv)], log_path)
    learner_pid = None
    try:
        deadline = time.monotonic() + 300.0
        while True:
            assert proc.poll() is None, f"finetune run exited ({proc.returncode}):\n{log_path.read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"no version accepted in 300 s:\n{log_path.read_text()[-3000:]}"
            decisions = [d for d in quiet_jsonl(session_dir / "versions" / "actor.jsonl") if d["accepted"]]
            episodes = [m["episode"] for m in quiet_jsonl(session_dir / "metrics.jsonl") if m.get("event")]
            if decisions and any(e > decisions[0]["episode"] for e in episodes):
                break  # an episode flown on the accepted version: now kill the actor mid-recording
            time.sleep(0.1)
        learner_pid = json.loads((session_dir / "learner" / "endpoints.json").read_text())["pid"]
        assert pid_running(learner_pid)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        killed_at = time.monotonic()
        # What the actor had made durable and decided, as it was at the kill.
        metrics = [m for m in read_jsonl(session_dir / "metrics.jsonl") if m.get("event") == "episode"]
        decisions = read_jsonl(session_dir / "versions" / "actor.jsonl")
        segment = session_dir / "recordings" / "transitions-000000.mcap"
        segment_sha = sha256_file(segment)
        data, recording_warnings = read_recording(session_dir / "recordings")
        # The orphaned learner notices that its actor is gone, checkpoints and stops by itself.
        while pid_running(learner_pid) and time.monotonic() - killed_at < 120.0:
            time.sleep(0.1)
        learner_stopped_s = None if pid_running(learner_pid) else time.monotonic() - killed_at
        published = [(r["version"], r["learner_step"]) for r in FinetuneSession.open(session_dir).versions()]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if learner_pid is not None and pid_running(learner_pid):
            os.kill(learner_pid, signal.SIGKILL)
    return {"dir": session_dir, "root": root, "metrics": metrics, "decisions": decisions, "data": data,
            "warnings": recording_warnings, "segment_sha": segment_sha, "learner_stopped_s": learner_stopped_s,
            "updates": learner_updates(session_dir), "published": published, "log": log_path.read_text(),
            "learner_log_size": (session_dir / "learner" / "learner.log").stat().st_size}


@pytest.fixture(scope="module")
def resumed(killed):
    """``finetune run --resume`` of the killed session, run to its end."""
    session_dir = killed["dir"]
    log_path = killed["root"] / "resume.log"
    rc = run_to_end(["finetune", "run", "--session", str(session_dir), "--resume", "--minutes", str(RESUME_MINUTES),
                     "--no-realtime", "--learner", "local"], log_path)
    log = log_path.read_text()
    assert rc == 0, f"finetune run --resume exited with {rc}:\n{log[-3000:]}"
    learner_log = (session_dir / "learner" / "learner.log").read_bytes()[killed["learner_log_size"]:].decode()
    return {"log": log, "out": last_json_line(log), "learner_log": learner_log}


def test_a_killed_session_holds_what_its_actor_acknowledged_and_only_accepted_versions(killed):
    data, metrics, decisions = killed["data"], killed["metrics"], killed["decisions"]
    n = len(data["seq"])
    assert np.array_equal(data["seq"], np.arange(n)), "the recording of the killed run has gaps"
    # at most a chunk cut short by the kill at the end of the unclosed segment: no chunk skipped, no gap
    assert all("file ends inside" in w for w in killed["warnings"]), killed["warnings"]

    # Durability: every episode line was written after its flush: its `acked` transitions were on disk by then.
    acked = [m["acked"] for m in metrics]
    assert acked == sorted(acked) and acked[-1] == sum(m["steps"] for m in metrics)
    durable = acked[-1]
    # What can have been appended since that last line: the episode in flight, at most one episode (500 steps at
    # 100 Hz, 5 s) whose own line the kill prevented; on disk only in whole flushes (every FLUSH_EVERY steps from
    # the last acknowledgement, or the episode's end), a chunk cut short by the kill being dropped.
    meta = json.loads((killed["dir"] / "base" / "metadata.json").read_text())
    env = meta["training"]["task_config"]["env"]
    max_episode = int(round(env["episode_length_s"] / (env["sim_dt"] * env["decimation"])))
    assert durable <= n <= durable + max_episode, (durable, n)
    ended = bool(data["terminated"][-1] or data["truncated"][-1])
    assert (n - durable) % FLUSH_EVERY == 0 or ended, (durable, n)
    assert int(data["episode"][durable - 1]) == metrics[-1]["episode"]

    accepted = [d for d in decisions if d["accepted"]]
    assert accepted and not any(not d["accepted"] for d in decisions)
    check_versions(data, decisions, hold_steps_of(killed["dir"]))
    assert int(data["version"][-1]) >= 1  # it flew an accepted version when killed
    assert killed["learner_stopped_s"] is not None, "the orphaned learner was still running 120 s after the kill"


def test_resume_after_kill_continues_the_version_the_recording_and_the_learner(killed, resumed):
    session_dir = killed["dir"]
    old = killed["data"]
    n = len(old["seq"])
    last_accepted = [d for d in killed["decisions"] if d["accepted"]][-1]["version"]

    # the unclosed segment was recovered: the original bytes kept as .damaged, a properly closed file in its place
    recordings = session_dir / "recordings"
    damaged = recordings / "transitions-000000.mcap.damaged"
    assert damaged.is_file() and sha256_file(damaged) == killed["segment_sha"]
    assert "recovered" in resumed["log"] and str(damaged.name) in resumed["log"]

    data, recording_warnings = read_recording(recordings)
    assert not recording_warnings, recording_warnings  # every segment is closed and intact now
    steps = int(resumed["out"]["steps"])
    assert steps == round(RESUME_MINUTES * 60 / 0.01)
    assert np.array_equal(data["seq"], np.arange(n + steps)), "seq does not continue n, n + 1, ... once each"
    for k in ("obs", "action", "version", "episode", "reward"):
        assert np.array_equal(data[k][:n], old[k]), f"{k} of the recording before the kill changed"

    # the resumed actor flies the last version it had accepted, from the first step, in new episodes
    assert int(data["version"][n]) == last_accepted
    assert int(data["step"][n]) == 0 and int(data["episode"][n]) > int(old["episode"].max())
    decisions = FinetuneSession.open(session_dir).actor_decisions()
    assert decisions[:len(killed["decisions"])] == killed["decisions"]
    check_versions(data, decisions, hold_steps_of(session_dir))
    assert resumed["out"]["version"] == FinetuneSession.open(session_dir).current_actor_version() >= last_accepted

    # the learner resumed from the orphan's last checkpoint: its update count continues
    found = re.findall(r"learner resumed at (\d+) updates", resumed["learner_log"])
    assert found == [str(killed["updates"])], resumed["learner_log"][-2000:]
    assert killed["updates"] > 0
    learner_out = last_json_line(resumed["learner_log"])
    assert learner_out["updates"] >= killed["updates"]
    # versions are numbered on from those of the first learner (and its orphan), at higher learner steps
    manifest = [(r["version"], r["learner_step"]) for r in FinetuneSession.open(session_dir).versions()]
    assert [v for v, _ in manifest] == list(range(1, len(manifest) + 1))
    before = killed["published"]
    assert manifest[:len(before)] == before and all(s <= killed["updates"] for _, s in before)
    assert all(s > killed["updates"] for _, s in manifest[len(before):])


def test_a_corrupted_chunk_is_skipped_with_a_warning_and_the_session_still_resumes(killed, resumed, tmp_path):
    from mcap.reader import make_reader

    session_dir = tmp_path / "session"
    shutil.copytree(killed["dir"], session_dir)
    recordings = session_dir / "recordings"
    before, _ = read_recording(recordings)
    total = len(before["seq"])
    segment = recordings / "transitions-000001.mcap"  # the resumed run's segment, closed properly
    with open(segment, "rb") as f:
        chunks = sorted(make_reader(f).get_summary().chunk_indexes, key=lambda c: c.chunk_start_offset)
    assert len(chunks) >= 3
    # a chunk in the middle (a damaged LAST chunk of the newest segment is another matter: see the report)
    chunk = chunks[len(chunks) // 2]
    lost = (before["time_ns"] >= chunk.message_start_time) & (before["time_ns"] <= chunk.message_end_time)
    lo, hi = int(before["seq"][lost].min()), int(before["seq"][lost].max())
    assert hi - lo + 1 == lost.sum() and hi < total - 1
    raw = bytearray(segment.read_bytes())
    middle = chunk.chunk_start_offset + chunk.chunk_length // 2
    raw[middle:middle + 8] = bytes(b ^ 0xFF for b in raw[middle:middle + 8])
    segment.write_bytes(bytes(raw))
    corrupted_sha = sha256_file(segment)

    data, texts = read_recording(recordings)
    assert any(f"{segment}: skipped the chunk at byte offset {chunk.chunk_start_offset}" in t for t in texts), texts
    assert any(f"transitions seq {lo}-{hi} are missing" in t for t in texts), texts
    assert np.array_equal(data["seq"], before["seq"][~lost])
    for k in ("obs", "action", "version", "episode"):
        assert np.array_equal(data[k], before[k][~lost]), k

    log_path = tmp_path / "resume.log"
    rc = run_to_end(["finetune", "run", "--session", str(session_dir), "--resume", "--minutes", "0.05",
                     "--no-realtime", "--learner", "off"], log_path)
    assert rc == 0, log_path.read_text()[-3000:]
    assert sha256_file(segment) == corrupted_sha  # a closed file is read around, never rewritten
    after, texts = read_recording(recordings)
    assert any(f"transitions seq {lo}-{hi} are missing" in t for t in texts), texts
    new = after["seq"] >= total
    assert np.array_equal(after["seq"][~new], before["seq"][~lost])
    assert np.array_equal(after["seq"][new], np.arange(total, total + 300))  # no seq reused, none skipped
    version = FinetuneSession.open(session_dir).current_actor_version()
    assert set(after["version"][new].astype(int)) == {version} == {resumed["out"]["version"]}


def test_a_learner_of_the_session_left_running_is_stopped_before_a_new_one_starts(tmp_path):
    """``finetune run --learner local`` never runs two learners on one session (both would publish versions and
    write checkpoints): the one named in learner/endpoints.json is stopped first if it is a learner of this
    session; a process that merely reuses the pid is left alone."""
    from sim2real.deploy.finetune.runner import _stop_stale_learner

    session_dir = tmp_path / "session"
    (session_dir / "learner").mkdir(parents=True)
    endpoints = session_dir / "learner" / "endpoints.json"
    (tmp_path / "another_session").mkdir()
    # stand-ins with a learner's command line: a SIGTERM makes them exit 0 (a learner checkpoints and exits)
    code = ("import pathlib, signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: sys.exit(0)); "
            "pathlib.Path(sys.argv[-1], 'ready').touch(); time.sleep(120)")
    procs = [subprocess.Popen([sys.executable, "-c", code, "finetune", "learner", "--session", str(path)])
             for path in (tmp_path / "another_session", session_dir)]
    try:
        other, stale = procs
        deadline = time.monotonic() + 60
        while not all((path / "ready").exists() for path in (tmp_path / "another_session", session_dir)):
            assert time.monotonic() < deadline and other.poll() is None and stale.poll() is None
            time.sleep(0.05)
        endpoints.write_text(json.dumps({"pid": other.pid}))
        _stop_stale_learner(endpoints, timeout_s=30)
        assert pid_running(other.pid)
        endpoints.write_text(json.dumps({"pid": stale.pid}))
        _stop_stale_learner(endpoints, timeout_s=30)
        assert stale.wait(5) == 0
        assert other.poll() is None  # still running: not a learner of this session
        endpoints.write_text(json.dumps({"pid": stale.pid}))
        _stop_stale_learner(endpoints, timeout_s=30)  # gone already: nothing to do
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()

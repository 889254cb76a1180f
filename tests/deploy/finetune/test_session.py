"""The fine-tuning session directory: creation and resume, crash-safe writes, verified policy versions."""

from __future__ import annotations

import json
import os
import stat
import time

import numpy as np
import pytest
import torch
import yaml

from sim2real.deploy.finetune import session as session_mod
from sim2real.deploy.finetune.policy_package import pack_policy, read_header
from sim2real.deploy.finetune.session import FinetuneSession
from sim2real.configs.durable import (
    append_jsonl,
    atomic_write_bytes,
    atomic_write_json,
    read_jsonl,
    sha256_bytes,
    sha256_file,
)

META = {"task": "quadrotor-hover", "obs_dim": 22, "act_dim": 4}
CONFIG = {"learner": {"algorithm": "sac", "batch_size": 256}, "actor": {"episodes": 20}}


@pytest.fixture
def base(tmp_path):
    d = tmp_path / "base_policy"
    d.mkdir()
    (d / "policy.onnx").write_bytes(b"onnx model bytes " * 50)
    (d / "policy.onnx.data").write_bytes(b"\x00\x01" * 100)
    (d / "metadata.json").write_text(json.dumps(META))
    return d


@pytest.fixture
def session(tmp_path, base):
    return FinetuneSession.create(tmp_path / "sess", base, task="quadrotor-hover", robot_name="cf2", config=CONFIG)


def package(s: FinetuneSession, version: int, seed: int = 0) -> bytes:
    g = torch.Generator().manual_seed(seed)
    return pack_policy(version, {"w": torch.randn(22, 4, generator=g)}, META, s.load_key(), learner_step=100 * version,
                       created_s=1000.0 + version)


def publish(s: FinetuneSession, version: int, seed: int = 0) -> dict:
    blob = package(s, version, seed)
    return s.publish_version(blob, version=version, sha256=sha256_bytes(blob), learner_step=100 * version)


# ------------------------------------------------------------------------------------------- crash-safe files
def test_atomic_write_keeps_the_old_content_when_the_writer_dies_before_replace(tmp_path, monkeypatch):
    f = tmp_path / "state.json"
    atomic_write_json(f, {"v": 1})

    def crash(src, dst):
        raise OSError("killed before replace")

    monkeypatch.setattr(session_mod.os, "replace", crash)
    with pytest.raises(OSError, match="killed"):
        atomic_write_json(f, {"v": 2})
    with pytest.raises(OSError, match="killed"):
        atomic_write_bytes(f, b"garbage")
    assert json.loads(f.read_text()) == {"v": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]  # no temp file left behind
    monkeypatch.undo()
    atomic_write_json(f, {"v": 3})
    assert json.loads(f.read_text()) == {"v": 3}


def test_atomic_write_refuses_nan_and_leaves_file(tmp_path):
    f = tmp_path / "x.json"
    atomic_write_json(f, {"a": 1})
    with pytest.raises(ValueError):
        atomic_write_json(f, {"a": float("nan")})
    assert json.loads(f.read_text()) == {"a": 1}


def test_read_jsonl_ignores_a_truncated_last_line_and_append_repairs_it(tmp_path):
    f = tmp_path / "log.jsonl"
    for i in range(3):
        append_jsonl(f, {"i": i})
    with open(f, "ab") as h:
        h.write(b'{"i": 3, "trunc')  # kill -9 mid-append
    with pytest.warns(UserWarning, match=r"log\.jsonl: line 4 is truncated"):
        assert read_jsonl(f) == [{"i": 0}, {"i": 1}, {"i": 2}]
    with pytest.warns(UserWarning, match="removed a truncated last line"):
        append_jsonl(f, {"i": 4})
    assert read_jsonl(f) == [{"i": 0}, {"i": 1}, {"i": 2}, {"i": 4}]
    # a whole record torn from its newline is kept and completed
    with open(f, "ab") as h:
        h.write(b'{"i": 5}')
    assert read_jsonl(f)[-1] == {"i": 5}
    append_jsonl(f, {"i": 6})
    assert [r["i"] for r in read_jsonl(f)] == [0, 1, 2, 4, 5, 6]


def test_read_jsonl_garbled_middle_line_raises_naming_it(tmp_path):
    f = tmp_path / "log.jsonl"
    f.write_text('{"i": 0}\n{"i": 1 oops\n{"i": 2}\n')
    with pytest.raises(ValueError, match="line 2 is garbled"):
        read_jsonl(f)
    assert read_jsonl(tmp_path / "absent.jsonl") == []


# --------------------------------------------------------------------------------------------- create / open
def test_create_lays_out_the_session_and_open_resumes_it(session, base):
    p = session.path
    for sub in ("base", "versions", "recordings", "buffers", "learner"):
        assert (p / sub).is_dir()
    for name in ("policy.onnx", "policy.onnx.data", "metadata.json"):
        assert (p / "base" / name).read_bytes() == (base / name).read_bytes()
    info = json.loads((p / "session.json").read_text())
    assert info["task"] == "quadrotor-hover" and info["robot_name"] == "cf2" and info["status"] == "created"
    assert info["base_policy_sha256"] == sha256_file(base / "policy.onnx")
    assert info["schema_version"] == session_mod.SCHEMA_VERSION and info["created_s"] > 0
    assert yaml.safe_load((p / "config.yaml").read_text()) == CONFIG
    assert session.base_metadata() == META

    again = FinetuneSession.open(p)
    assert again.info == info and again.load_key() == session.load_key()
    again.set_status("running")
    assert FinetuneSession.open(p).info["status"] == "running"
    again.write_config({**CONFIG, "actor": {"episodes": 5}})
    assert FinetuneSession.open(p).read_config()["actor"] == {"episodes": 5}


def test_key_is_32_random_bytes_hex_with_mode_0600(session, tmp_path, base):
    key = session.load_key()
    assert len(bytes.fromhex(key)) == 32
    assert stat.S_IMODE((session.path / "key").stat().st_mode) == 0o600
    other = FinetuneSession.create(tmp_path / "other", base, task="t", robot_name="r", config={})
    assert other.load_key() != key
    os.chmod(session.path / "key", 0o644)
    with pytest.warns(UserWarning, match="0600"):
        session.load_key()


def test_create_refuses_an_existing_non_empty_dir(session, base, tmp_path):
    with pytest.raises(FileExistsError, match="--resume"):
        FinetuneSession.create(session.path, base, task="t", robot_name="r", config={})
    (tmp_path / "empty").mkdir()
    FinetuneSession.create(tmp_path / "empty", base, task="t", robot_name="r", config={})  # empty dir is fine


@pytest.mark.parametrize("missing", ["policy.onnx", "metadata.json"])
def test_create_refuses_a_base_without_its_files(base, tmp_path, missing):
    (base / missing).unlink()
    with pytest.raises(FileNotFoundError, match=missing.replace(".", r"\.")):
        FinetuneSession.create(tmp_path / "s", base, task="t", robot_name="r", config={})
    assert not (tmp_path / "s").exists()


def test_open_refuses_a_non_session_and_a_changed_base(session, tmp_path):
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "notes.txt").write_text("hi")
    with pytest.raises(FileNotFoundError, match="not a fine-tuning session"):
        FinetuneSession.open(tmp_path / "junk")
    with pytest.raises(FileNotFoundError):
        FinetuneSession.open(tmp_path / "nowhere")
    with open(session.path / "base" / "policy.onnx", "ab") as f:
        f.write(b"x")
    with pytest.raises(ValueError, match="base policy changed"):
        FinetuneSession.open(session.path)


# -------------------------------------------------------------------------------------------------- versions
def test_publish_three_versions_manifest_and_files_agree(session):
    assert session.versions() == [] and session.next_version() == 1
    blobs = {v: package(session, v, seed=v) for v in (1, 2, 3)}
    for v, blob in blobs.items():
        rec = session.publish_version(blob, version=v, sha256=sha256_bytes(blob), learner_step=10 * v)
        assert rec["version"] == v and rec["size"] == len(blob) and rec["learner_step"] == 10 * v
    recs = session.versions()
    assert [r["version"] for r in recs] == [1, 2, 3]
    for r in recs:
        f = session.path / "versions" / f"v{r['version']:06d}.pkg"
        assert f.read_bytes() == blobs[r["version"]] and sha256_file(f) == r["sha256"]
        assert session.read_version(r["version"]) == blobs[r["version"]]
        assert read_header(session.read_version(r["version"]))["version"] == r["version"]
    assert read_jsonl(session.path / "versions" / "manifest.jsonl") == recs
    assert session.next_version() == 4
    # a reopened session sees the same versions
    assert FinetuneSession.open(session.path).versions() == recs


def test_publish_refuses_old_numbers_mismatches_and_foreign_packages(session, tmp_path, base):
    publish(session, 1)
    publish(session, 2)
    assert session.publish_version(package(session, 2), version=2) == session.versions()[1]  # same bytes: no-op
    with pytest.raises(ValueError, match="already published"):
        session.publish_version(package(session, 2, seed=9), version=2)
    # a number once published is never reused, not even when its file no longer verifies
    (session.path / "versions" / "v000001.pkg").unlink()
    with pytest.warns(UserWarning, match="missing"), pytest.raises(ValueError, match="not greater"):
        session.publish_version(package(session, 1, seed=9), version=1)
    blob = package(session, 3)
    with pytest.raises(ValueError, match="given sha256"):
        session.publish_version(blob, version=3, sha256="0" * 64)
    with pytest.raises(ValueError, match="header says version 3"):
        session.publish_version(blob, version=4)
    other = FinetuneSession.create(tmp_path / "other", base, task="t", robot_name="r", config={})
    with pytest.raises(ValueError, match="bad_signature"):
        session.publish_version(package(other, 3), version=3)
    with pytest.warns(UserWarning):
        assert [r["version"] for r in session.versions()] == [2]


def test_corrupted_package_is_dropped_with_a_warning_and_read_version_raises(session):
    for v in (1, 2, 3):
        publish(session, v, seed=v)
    f = session.path / "versions" / "v000002.pkg"
    data = bytearray(f.read_bytes())
    data[len(data) // 2] ^= 0xFF
    f.write_bytes(bytes(data))
    with pytest.warns(UserWarning, match="version 2: sha256"):
        assert [r["version"] for r in session.versions()] == [1, 3]
    with pytest.raises(ValueError, match="version 2: sha256"):
        session.read_version(2)
    assert session.next_version() == 4  # the number of a dropped version is never reused
    (session.path / "versions" / "v000003.pkg").unlink()
    with pytest.warns(UserWarning) as caught:
        assert [r["version"] for r in session.versions()] == [1]
    assert any("v000003.pkg is missing" in str(w.message) for w in caught)
    with pytest.raises(FileNotFoundError):
        session.read_version(3)
    with pytest.raises(KeyError):
        session.read_version(7)


def test_crash_between_package_and_manifest_leaves_an_unlisted_file(session, monkeypatch):
    publish(session, 1)

    def crash(path, record):
        raise OSError("killed")

    monkeypatch.setattr(session_mod, "append_jsonl", crash)
    with pytest.raises(OSError):
        publish(session, 2, seed=5)
    monkeypatch.undo()
    assert (session.path / "versions" / "v000002.pkg").exists()
    assert [r["version"] for r in session.versions()] == [1] and session.next_version() == 2
    rec = publish(session, 2, seed=6)  # the orphan is overwritten
    assert session.read_version(2) == package(session, 2, seed=6) and rec["sha256"] == session.versions()[1]["sha256"]


# ------------------------------------------------------------------------------------------------ actor log
def test_actor_decisions_and_current_version(session):
    assert session.current_actor_version() == 0
    r1, r2, r3 = (publish(session, v, seed=v) for v in (1, 2, 3))
    session.record_actor_decision(0, session.base_sha256, accepted=True, reason="base", episode=0)
    session.record_actor_decision(1, r1["sha256"], accepted=True, reason="ok", episode=1)
    session.record_actor_decision(2, r2["sha256"], accepted=False, reason="metadata_mismatch", episode=2)
    assert session.current_actor_version() == 1
    session.record_actor_decision(3, r3["sha256"], accepted=True, reason="ok", episode=3, time_s=12.5)
    assert session.current_actor_version() == 3
    log = session.actor_decisions()
    assert [(r["version"], r["accepted"], r["reason"]) for r in log] == [
        (0, True, "base"), (1, True, "ok"), (2, False, "metadata_mismatch"), (3, True, "ok")]
    assert log[-1]["time_s"] == 12.5 and log[-1]["episode"] == 3

    # kill -9 mid-append: the truncated last line is ignored with a warning
    with open(session.path / "versions" / "actor.jsonl", "ab") as f:
        f.write(b'{"accepted": true, "version": 4, "sha')
    with pytest.warns(UserWarning, match=r"actor\.jsonl: line 5"):
        assert session.current_actor_version() == 3

    # an accepted version whose package got corrupted is not returned: fall back to the previous accepted one
    f = session.path / "versions" / "v000003.pkg"
    data = f.read_bytes()
    f.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))  # a different last byte, whatever it was
    with pytest.warns(UserWarning):
        assert session.current_actor_version() == 1


def test_accepting_an_unstored_version_is_refused(session):
    r1 = publish(session, 1)
    with pytest.raises(ValueError, match="not a stored version"):
        session.record_actor_decision(2, "ab" * 32, accepted=True)
    with pytest.raises(ValueError, match="not a stored version"):
        session.record_actor_decision(1, "ab" * 32, accepted=True)  # wrong sha256
    with pytest.raises(ValueError, match="base policy"):
        session.record_actor_decision(0, r1["sha256"], accepted=True)
    session.record_actor_decision(2, "ab" * 32, accepted=False, reason="bad_signature")  # rejections are logged
    assert session.current_actor_version() == 0


# --------------------------------------------------------------------------------------- buffers / metrics
def test_buffers_and_metrics(session):
    arrays = {"obs": np.arange(12, dtype=np.float32).reshape(3, 4), "done": np.array([True, False, True])}
    path = session.save_buffer("replay", arrays)
    assert path == session.path / "buffers" / "replay.npz"
    loaded = session.load_buffer("replay")
    assert set(loaded) == {"obs", "done"}
    for k in arrays:
        np.testing.assert_array_equal(loaded[k], arrays[k])
        assert loaded[k].dtype == arrays[k].dtype
    assert session.buffer_names() == ["replay"]
    with pytest.raises(ValueError):
        session.save_buffer("../escape", arrays)
    with pytest.raises(FileNotFoundError):
        session.load_buffer("absent")
    rec = session.log_metrics({"return": 1.5, "step": 10})
    session.log_metrics({"return": 2.0, "time_s": 5.0})
    m = session.metrics()
    assert m[0] == rec and m[0]["time_s"] > 0 and m[1] == {"return": 2.0, "time_s": 5.0}


def test_one_actor_per_session_another_process_is_refused_naming_its_pid(session, tmp_path):
    import subprocess
    import sys

    ready = tmp_path / "ready"
    code = ("import pathlib, sys, time; from sim2real.deploy.finetune.session import FinetuneSession; "
            "s = FinetuneSession.open(sys.argv[1]); cm = s.exclusive('actor'); cm.__enter__(); "
            "pathlib.Path(sys.argv[2]).touch(); time.sleep(60)")
    holder = subprocess.Popen([sys.executable, "-c", code, str(session.path), str(ready)])
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert holder.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        with pytest.raises(RuntimeError, match=f"another actor \\(pid {holder.pid}\\) runs this session"):
            with session.exclusive("actor"):
                pass
        with session.exclusive("learner"):  # the learner's lock is another one
            with session.exclusive("learner"):  # re-entrant within a process
                pass
        holder.kill()  # a kill -9 releases the lock (the kernel drops it with the process)
        holder.wait(10)
        assert (session.path / "actor.lock").read_text().strip() == str(holder.pid)  # the dead holder's file...
        with session.exclusive("actor"):
            assert (session.path / "actor.lock").read_text().strip() == str(os.getpid())
        assert not (session.path / "actor.lock").exists()  # ...is taken over and removed when the next one ends
        assert not (session.path / "learner.lock").exists()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()

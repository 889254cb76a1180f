"""A fine-tuning session on disk (``sim2real finetune``): a directory that survives ``kill -9`` and resumes with no
policy version mixed up.

Layout (``FinetuneSession.path``)::

    session.json             created (ISO) / created_s, task, robot_name, base_policy_sha256 (of base/policy.onnx),
                             base_files {name: sha256}, status, schema_version. Written last by ``create``: a
                             directory without it is not a session (an interrupted ``create``).
    config.yaml              the resolved fine-tuning config (``write_config``, yaml.safe_dump)
    key                      the session key: 32 random bytes as 64 hex characters + newline, mode 0o600, created
                             once (``load_key``). It authenticates the learner to the actor (see policy_package).
    base/                    the base policy (version 0): policy.onnx (+ policy.onnx.data) + metadata.json
    versions/vNNNNNN.pkg     every published policy version package (bytes, see :mod:`policy_package`)
    versions/manifest.jsonl  one line per published version: {version, sha256, created_s, learner_step, size}
    versions/actor.jsonl     one line per actor decision: {version, sha256, accepted, reason, episode, time_s}
    recordings/              the recorder's MCAP files (created empty here) of the default robot
    recordings/<robot_id>/   the MCAP files of robot <robot_id> of a fleet (see below)
    robots/<robot_id>/       that robot's actor.lock, actor.jsonl (its decisions) and metrics.jsonl (its episodes)
    buffers/<name>.npz       replay-buffer snapshots (``save_buffer`` / ``load_buffer``)
    learner/                 learner checkpoints (created empty here)
    metrics.jsonl            ``log_metrics``: one line per call, with time_s

Robots (a fleet): a session may have several actors (robots) feeding its one learner, all of the same task and
base policy (the session's base/). Each has a robot id (:func:`check_robot_id`); :data:`DEFAULT_ROBOT` is the robot
of a single-robot session and keeps the layout above (recordings/, versions/actor.jsonl, metrics.jsonl,
actor.lock), any other id has its own recordings/<id>/ and robots/<id>/ files. :meth:`FinetuneSession.for_robot`
gives the view of a session that one robot's actor writes (its recordings, decisions, metrics, actor lock); the
versions, buffers, learner and key are shared. Readers of the whole session's recordings use
:meth:`FinetuneSession.recording_dirs`; :meth:`FinetuneSession.live_actors` says which robots' actors run now.

Crash-safety contract (the writes of this module; "crash" = kill -9 or power loss at any instruction):

* :func:`atomic_write_bytes` / :func:`atomic_write_json` (session.json, config.yaml, base/ files, .pkg files,
  buffers): the file holds either its old content or the complete new one, never a mix or a partial file. Temp
  file in the same directory, write, flush, fsync, ``os.replace``, fsync of the directory. A crash leaves at
  most a stray ``.<name>.*.tmp`` file, which is never read.
* :func:`append_jsonl` (manifest, actor log, metrics): one ``os.write`` of one line with ``O_APPEND`` + fsync.
  A crash can leave a truncated last line: :func:`read_jsonl` ignores it with a warning, and the next
  :func:`append_jsonl` repairs it first (completes it with a newline when it is a whole JSON object, else
  truncates it), so a torn line never ends up in the middle of a file. One writer process per file.
* ``publish_version`` writes the .pkg atomically THEN appends the manifest line: a manifest line always has its
  file. A crash between the two leaves an unlisted .pkg that the next publish of that version overwrites.
* ``versions`` drops (with a warning) every manifest line whose .pkg is missing or whose sha256 differs from the
  file; ``read_version`` re-checks the sha256 of the bytes it returns; ``current_actor_version`` only returns a
  version whose actor record matches a verified manifest line. An accepted decision can only be recorded for a
  stored version (store the package first, then record the decision).
* The key is created with a hard link from a fsynced temp file: it exists complete or not at all, and is never
  overwritten.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import stat
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import yaml

from sim2real.deploy.finetune.session_locks import file_lock, hold_lock, lock_holder
from sim2real.configs.durable import (
    append_jsonl, atomic_write_bytes, atomic_write_json, atomic_writer, fsync_dir, read_jsonl, sha256_bytes,
    sha256_file,
)

SCHEMA_VERSION = 1
SESSION_FILE = "session.json"
CONFIG_FILE = "config.yaml"
KEY_FILE = "key"
BASE_DIR = "base"
VERSIONS_DIR = "versions"
MANIFEST_FILE = "manifest.jsonl"
ACTOR_FILE = "actor.jsonl"
RECORDINGS_DIR = "recordings"
BUFFERS_DIR = "buffers"
LEARNER_DIR = "learner"
METRICS_FILE = "metrics.jsonl"
ROBOTS_DIR = "robots"
#: The robot id of a single-robot session (today's layout: recordings/, versions/actor.jsonl, metrics.jsonl).
DEFAULT_ROBOT = "default"
# The exported-policy files (same names as sim2real.policies.artefact.metadata, not imported here: that pulls in
# the tasks).
ONNX_FILE = "policy.onnx"
ONNX_DATA_FILE = "policy.onnx.data"
METADATA_FILE = "metadata.json"

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def _check_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ValueError(f"invalid name {name!r}: use letters, digits, '_', '.', '-' (no path separators)")
    return name


def check_robot_id(robot_id: str) -> str:
    """``robot_id`` if it is a valid robot id (letters, digits, '_', '.', '-', at most 64 characters, starting with
    a letter or digit), else ValueError naming it."""
    if not isinstance(robot_id, str) or len(robot_id) > 64 or not _NAME_RE.match(robot_id):
        raise ValueError(f"invalid robot id {robot_id!r}: use up to 64 letters, digits, '_', '.', '-' (starting with a "
                         "letter or digit)")
    return robot_id


def recording_dirs(session_dir) -> dict[str, Path]:
    """Robot id -> folder of that robot's recordings, for every robot of the session at ``session_dir`` whose
    folder exists (the default robot's ``recordings/`` first, then ``recordings/<id>/`` sorted by id). Reading it
    opens nothing: usable on a session path alone."""
    root = Path(session_dir) / RECORDINGS_DIR
    out: dict[str, Path] = {}
    if root.is_dir():
        out[DEFAULT_ROBOT] = root
        for sub in sorted(root.iterdir()):
            if sub.is_dir() and _NAME_RE.match(sub.name) and sub.name != DEFAULT_ROBOT:
                out[sub.name] = sub
    return out


# ------------------------------------------------------------------------------------------------------ session
class FinetuneSession:
    """A fine-tuning session directory (layout and crash-safety contract: module docstring). Build it with
    :meth:`create` (new) or :meth:`open` (resume). Each file has one writer process: the learner publishes
    versions (or the actor stores the versions it receives, when the learner runs elsewhere), the actor records
    its decisions."""

    def __init__(self, path: Path, info: dict, robot_id: str = DEFAULT_ROBOT):
        self.path = Path(path)
        self.info = info
        self.robot_id = check_robot_id(robot_id)
        self._sha_cache: dict[int, tuple[tuple, str]] = {}

    def for_robot(self, robot_id: str) -> FinetuneSession:
        """The view of this session that robot ``robot_id``'s actor writes: its recordings folder
        (:attr:`recordings_dir`), decisions (:meth:`actor_decisions`, :meth:`current_actor_version`), metrics and
        ``exclusive("actor")`` lock are that robot's; everything else is the session's. Creates the robot's folders.
        ValueError for an invalid id."""
        view = FinetuneSession(self.path, self.info, check_robot_id(robot_id))
        view._sha_cache = self._sha_cache
        if robot_id != DEFAULT_ROBOT:
            view.recordings_dir.mkdir(parents=True, exist_ok=True)
            view._robot_dir.mkdir(parents=True, exist_ok=True)
        return view

    @property
    def _robot_dir(self) -> Path:
        """Where this robot's decisions, metrics and actor lock live (the session folder for the default robot)."""
        return self.path if self.robot_id == DEFAULT_ROBOT else self.path / ROBOTS_DIR / self.robot_id

    @property
    def _actor_log(self) -> Path:
        return (self.versions_dir / ACTOR_FILE if self.robot_id == DEFAULT_ROBOT
                else self._robot_dir / ACTOR_FILE)

    def robot_ids(self) -> list[str]:
        """Every robot that has recorded or decided in this session (the default robot when it has), sorted."""
        ids = {r for r, d in recording_dirs(self.path).items() if any(d.glob("*.mcap*"))}
        if (self.versions_dir / ACTOR_FILE).is_file() or (self.path / METRICS_FILE).is_file():
            ids.add(DEFAULT_ROBOT)
        if (self.path / ROBOTS_DIR).is_dir():
            ids |= {d.name for d in (self.path / ROBOTS_DIR).iterdir() if d.is_dir() and _NAME_RE.match(d.name)}
        return sorted(ids)

    def recording_dirs(self) -> dict[str, Path]:
        """Robot id -> recordings folder of every robot of the session (see :func:`recording_dirs`): what a reader
        of the whole session's recordings (identification, the learner's rebuild, prior sessions) goes through."""
        return recording_dirs(self.path)

    def live_actors(self) -> dict[str, int]:
        """Robot id -> pid of every robot whose actor runs now (holds its ``actor.lock``, by the pid written in it;
        a lock file left by a killed actor names a process that no longer runs). Same machine only."""
        out = {}
        for robot in sorted({DEFAULT_ROBOT, *self.robot_ids()}):
            folder = self.path if robot == DEFAULT_ROBOT else self.path / ROBOTS_DIR / robot
            pid = lock_holder(folder / "actor.lock")
            if pid is not None:
                out[robot] = pid
        return out

    # ------------------------------------------------------------------------------------------- creation / open
    @classmethod
    def create(cls, path, base_policy_dir, *, task: str, robot_name: str, config: dict) -> FinetuneSession:
        """Create a new session at ``path`` from the exported policy in ``base_policy_dir`` (policy.onnx
        [+ policy.onnx.data] + metadata.json, copied into base/). Raises FileExistsError when ``path`` exists and
        is not an empty directory, FileNotFoundError naming a missing base file. session.json is written last."""
        path = Path(path)
        base_src = Path(base_policy_dir)
        if path.exists() and (not path.is_dir() or any(path.iterdir())):
            raise FileExistsError(f"{path} already exists and is not empty: pass --resume to continue that session, "
                                  "or choose a new session directory")
        for name in (ONNX_FILE, METADATA_FILE):
            if not (base_src / name).is_file():
                raise FileNotFoundError(f"base policy {base_src} has no {name} (expected an exported policy folder: "
                                        f"{ONNX_FILE} + {METADATA_FILE})")
        try:
            json.loads((base_src / METADATA_FILE).read_text())
        except (UnicodeDecodeError, ValueError) as e:
            raise ValueError(f"base policy {base_src / METADATA_FILE} is not valid JSON: {e}") from None
        config_yaml = yaml.safe_dump(config, sort_keys=False).encode()  # a config YAML refuses: before any write
        path.mkdir(parents=True, exist_ok=True)
        for sub in (BASE_DIR, VERSIONS_DIR, RECORDINGS_DIR, BUFFERS_DIR, LEARNER_DIR):
            (path / sub).mkdir(exist_ok=True)
        base_files = {}
        for name in (ONNX_FILE, ONNX_DATA_FILE, METADATA_FILE):
            src = base_src / name
            if not src.is_file():
                continue
            with atomic_writer(path / BASE_DIR / name) as f, open(src, "rb") as s:
                for chunk in iter(lambda: s.read(1 << 20), b""):
                    f.write(chunk)
            base_files[name] = sha256_file(path / BASE_DIR / name)
        _create_key(path / KEY_FILE)
        atomic_write_bytes(path / CONFIG_FILE, config_yaml)
        now = time.time()
        info = {
            "schema_version": SCHEMA_VERSION,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(now)),
            "created_s": now,
            "task": task,
            "robot_name": robot_name,
            "base_policy_sha256": base_files[ONNX_FILE],
            "base_files": base_files,
            "status": "created",
        }
        atomic_write_json(path / SESSION_FILE, info)
        fsync_dir(path.parent if path.parent != path else path)
        return cls(path, info)

    @classmethod
    def open(cls, path) -> FinetuneSession:
        """Open an existing session to resume it. Raises FileNotFoundError when ``path`` is not a session directory
        (no session.json), ValueError when session.json is unreadable / of another schema version, or when the base
        policy in base/ changed since the session was created (sha256), or the key is missing/damaged."""
        path = Path(path)
        if not path.is_dir():
            raise FileNotFoundError(f"{path}: no such session directory")
        if not (path / SESSION_FILE).is_file():
            raise FileNotFoundError(f"{path} is not a fine-tuning session (no {SESSION_FILE}; an interrupted create "
                                    "leaves a directory without it: remove it and start again)")
        try:
            info = json.loads((path / SESSION_FILE).read_text())
        except (UnicodeDecodeError, ValueError) as e:
            raise ValueError(f"{path / SESSION_FILE} is not valid JSON: {e}") from None
        if not isinstance(info, dict) or info.get("schema_version") != SCHEMA_VERSION:
            got = info.get("schema_version") if isinstance(info, dict) else None
            raise ValueError(f"{path / SESSION_FILE}: session schema version {got!r}, this code reads "
                             f"{SCHEMA_VERSION}")
        session = cls(path, info)
        for name, want in sorted(info.get("base_files", {}).items()):
            f = path / BASE_DIR / name
            if not f.is_file():
                raise ValueError(f"{path}: the base policy changed since the session was created: {f} is missing")
            got = sha256_file(f)
            if got != want:
                raise ValueError(f"{path}: the base policy changed since the session was created: sha256 of {f} is "
                                 f"{got}, session.json has {want}")
        if info.get("base_files", {}).get(ONNX_FILE) != info.get("base_policy_sha256"):
            raise ValueError(f"{path / SESSION_FILE}: base_policy_sha256 does not match base_files[{ONNX_FILE!r}]")
        session.load_key()
        return session

    # --------------------------------------------------------------------------------------------- small files
    @property
    def base_dir(self) -> Path:
        return self.path / BASE_DIR

    @property
    def versions_dir(self) -> Path:
        return self.path / VERSIONS_DIR

    @property
    def recordings_dir(self) -> Path:
        """This robot's recordings folder: ``recordings/`` (default robot) or ``recordings/<robot_id>/``."""
        root = self.path / RECORDINGS_DIR
        return root if self.robot_id == DEFAULT_ROBOT else root / self.robot_id

    @property
    def buffers_dir(self) -> Path:
        return self.path / BUFFERS_DIR

    @property
    def learner_dir(self) -> Path:
        return self.path / LEARNER_DIR

    @property
    def base_sha256(self) -> str:
        """sha256 of base/policy.onnx (the "version 0" of the actor log)."""
        return self.info["base_policy_sha256"]

    def base_metadata(self) -> dict:
        return json.loads((self.base_dir / METADATA_FILE).read_text())

    def set_status(self, status: str) -> None:
        """Update ``status`` in session.json (atomic), e.g. "running", "stopped", "finished"."""
        self.info = {**self.info, "status": str(status)}
        atomic_write_json(self.path / SESSION_FILE, self.info)

    def write_config(self, config: dict) -> None:
        """Write the resolved fine-tuning config to config.yaml (yaml.safe_dump, atomic)."""
        atomic_write_bytes(self.path / CONFIG_FILE, yaml.safe_dump(config, sort_keys=False).encode())

    def read_config(self) -> dict:
        """The session's ``config.yaml``. Raises FileNotFoundError when it is missing, ValueError when it is not a
        YAML mapping (naming the file)."""
        path = self.path / CONFIG_FILE
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing: the session's config is gone (restore it from a copy)")
        try:
            cfg = yaml.safe_load(path.read_text())
        except (yaml.YAMLError, UnicodeDecodeError) as e:
            raise ValueError(f"{path} is damaged: {' '.join(str(e).split())}") from None
        if not isinstance(cfg, dict):
            raise ValueError(f"{path} is damaged: expected a mapping of config keys, got {type(cfg).__name__}")
        return cfg

    @contextlib.contextmanager
    def exclusive(self, role: str):
        """Hold the session's ``<role>.lock`` (``role``: ``actor`` or ``learner``) for the ``with`` block: one actor
        per robot (``actor``: this robot's lock, ``robots/<robot_id>/actor.lock`` for a robot of a fleet) and one
        learner per session at a time, since two would interleave recordings, metrics, versions and
        checkpoints. An advisory ``fcntl.flock`` (released by the kernel when the process dies, even by kill -9);
        the holder's pid is written into the file, and the holder removes the file when it lets go (a file left by a
        holder that died is taken over by the next start and removed when that one ends). Re-entrant within a
        process.

        Raises:
            RuntimeError: another process holds it (the message names its pid)."""
        path = ((self._robot_dir if role == "actor" else self.path) / f"{role}.lock").resolve()
        who = f"{role} of robot {self.robot_id}" if role == "actor" and self.robot_id != DEFAULT_ROBOT else role
        with hold_lock(path, f"{self.path} is in use: another {who} (pid {{pid}}) runs this session; stop it first"):
            yield

    def load_key(self) -> str:
        """The session key (64 hex characters). ValueError when missing or damaged; warns when the file is readable
        by group/others (it should be 0o600)."""
        f = self.path / KEY_FILE
        if not f.is_file():
            raise ValueError(f"{self.path}: the session key file {f} is missing")
        mode = stat.S_IMODE(f.stat().st_mode)
        if mode & 0o077:
            warnings.warn(f"{f} has mode {mode:o}: the session key should be readable by its owner only (0600)",
                          stacklevel=2)
        key = f.read_text().strip()
        if not re.fullmatch(r"[0-9a-f]{64}", key):
            raise ValueError(f"{f} is damaged (expected 64 hex characters)")
        return key

    def log_metrics(self, metrics: dict) -> dict:
        """Append ``metrics`` (+ ``time_s``: time.time() unless given; + ``robot``: the robot id for a robot of a
        fleet) to this robot's metrics.jsonl; returns the record."""
        record = {**metrics}
        record.setdefault("time_s", time.time())
        if self.robot_id != DEFAULT_ROBOT:
            record.setdefault("robot", self.robot_id)
        append_jsonl(self._robot_dir / METRICS_FILE, record)
        return record

    def metrics(self) -> list[dict]:
        """This robot's metrics records (metrics.jsonl lines)."""
        return read_jsonl(self._robot_dir / METRICS_FILE)

    def all_metrics(self) -> list[dict]:
        """The metrics records of every robot of the session, each with ``robot`` (its id), by ``time_s``."""
        out = [{**m, "robot": m.get("robot", r)} for r in self.robot_ids() for m in self.for_robot(r).metrics()]
        return sorted(out, key=lambda m: float(m.get("time_s") or 0.0))

    def all_actor_decisions(self) -> list[dict]:
        """The decisions of every robot's actor, each with ``robot`` (its id), by ``time_s``."""
        out = [{**d, "robot": d.get("robot", r)} for r in self.robot_ids()
               for d in self.for_robot(r).actor_decisions()]
        return sorted(out, key=lambda d: float(d.get("time_s") or 0.0))

    # ------------------------------------------------------------------------------------------------ buffers
    def save_buffer(self, name: str, arrays: dict[str, np.ndarray]) -> Path:
        """Write ``arrays`` to buffers/<name>.npz atomically (uncompressed, no pickle); returns the path."""
        path = self.buffers_dir / f"{_check_name(name)}.npz"
        arrays = {k: np.asarray(v) for k, v in arrays.items()}
        for k, v in arrays.items():
            if v.dtype.hasobject:
                raise ValueError(f"buffer {name!r}: array {k!r} has dtype object (not storable without pickle)")
        with atomic_writer(path) as f:
            np.savez(f, **arrays)
        return path

    def load_buffer(self, name: str) -> dict[str, np.ndarray]:
        """The arrays of buffers/<name>.npz (FileNotFoundError when absent)."""
        with np.load(self.buffers_dir / f"{_check_name(name)}.npz", allow_pickle=False) as z:
            return {k: z[k] for k in z.files}

    def buffer_names(self) -> list[str]:
        return sorted(p.stem for p in self.buffers_dir.glob("*.npz"))

    # ----------------------------------------------------------------------------------------------- versions
    def version_path(self, version: int) -> Path:
        return self.versions_dir / f"v{int(version):06d}.pkg"

    def _manifest_raw(self) -> list[dict]:
        return read_jsonl(self.versions_dir / MANIFEST_FILE)

    def _file_sha(self, version: int) -> str | None:
        """sha256 of the version's .pkg (cached by inode/size/mtime), None when absent."""
        p = self.version_path(version)
        try:
            st = p.stat()
        except FileNotFoundError:
            return None
        sig = (st.st_ino, st.st_size, st.st_mtime_ns)
        hit = self._sha_cache.get(version)
        if hit is not None and hit[0] == sig:
            return hit[1]
        sha = sha256_file(p)
        self._sha_cache[version] = (sig, sha)
        return sha

    def versions(self) -> list[dict]:
        """The manifest records ({version, sha256, created_s, learner_step, size}) in version order, each verified:
        a line whose .pkg is missing or whose sha256 differs from the file, a repeated or non-increasing version,
        or a malformed record is dropped with a warning, so no mixed-up version is ever returned."""
        out: list[dict] = []
        last = 0
        for rec in self._manifest_raw():
            v, sha = rec.get("version"), rec.get("sha256")
            if not isinstance(v, int) or isinstance(v, bool) or not isinstance(sha, str):
                warnings.warn(f"{self.versions_dir / MANIFEST_FILE}: malformed record {rec!r} dropped", stacklevel=2)
                continue
            if v <= last:
                warnings.warn(f"{self.versions_dir / MANIFEST_FILE}: version {v} listed after version {last}; "
                              "dropped", stacklevel=2)
                continue
            got = self._file_sha(v)
            if got is None:
                warnings.warn(f"version {v}: {self.version_path(v)} is missing; dropped from the versions",
                              stacklevel=2)
                continue
            if got != sha:
                warnings.warn(f"version {v}: sha256 of {self.version_path(v)} is {got}, the manifest has {sha} "
                              "(a corrupted or replaced file); dropped from the versions", stacklevel=2)
                continue
            last = v
            out.append(rec)
        return out

    def last_published_version(self) -> int:
        """The highest version number in the manifest (verified or not; 0 when none)."""
        return max((r["version"] for r in self._manifest_raw()
                    if isinstance(r.get("version"), int) and not isinstance(r.get("version"), bool)), default=0)

    def next_version(self) -> int:
        """The number the next published version must have: one more than any version ever listed in the manifest
        (a dropped, corrupted version's number is never reused)."""
        return self.last_published_version() + 1

    def publish_version(self, package_bytes: bytes, *, version: int, sha256: str | None = None,
                        learner_step: int = 0) -> dict:
        """Store a policy version package: versions/vNNNNNN.pkg (atomic) THEN its manifest line. Returns the
        manifest record. ``sha256`` (optional) must be that of ``package_bytes``. The package must be signed with
        this session's key and its header's version must equal ``version`` (checked without unpickling anything).
        Publishing a version already stored with the same sha256 is a no-op returning its record (the actor may
        store what it receives from a learner on another machine); otherwise ``version`` must be greater than
        every version in the manifest (ValueError)."""
        from sim2real.deploy.finetune.policy_package import PolicyRejected, open_package

        package_bytes = bytes(package_bytes)
        version = int(version)
        actual = sha256_bytes(package_bytes)
        if sha256 is not None and sha256 != actual:
            raise ValueError(f"version {version}: the given sha256 {sha256} is not that of the package ({actual})")
        if version < 1:
            raise ValueError(f"version {version}: published versions start at 1 (0 is the base policy)")
        try:
            header, _ = open_package(package_bytes, self.load_key())
        except PolicyRejected as e:
            raise ValueError(f"version {version}: not a package of this session ({e.reason}: {e})") from None
        if header["version"] != version:
            raise ValueError(f"version {version}: the package's header says version {header['version']}")
        # the actors of a fleet may store the same version they received: one check-and-store at a time
        with file_lock(self.versions_dir / ".publish.lock"):
            return self._publish_locked(package_bytes, version, actual, learner_step)

    def _publish_locked(self, package_bytes: bytes, version: int, actual: str, learner_step: int) -> dict:
        for rec in self.versions():
            if rec["version"] == version:
                if rec["sha256"] == actual:
                    return rec
                raise ValueError(f"version {version} is already published with sha256 {rec['sha256']} (this package "
                                 f"has {actual})")
        last = self.last_published_version()
        if version <= last:
            raise ValueError(f"version {version} is not greater than the last published version {last}")
        atomic_write_bytes(self.version_path(version), package_bytes)
        record = {"version": version, "sha256": actual, "created_s": time.time(),
                  "learner_step": int(learner_step), "size": len(package_bytes)}
        append_jsonl(self.versions_dir / MANIFEST_FILE, record)
        return record

    def version_record(self, version: int) -> dict | None:
        """The verified manifest record of ``version`` (None when absent or dropped)."""
        return next((r for r in self.versions() if r["version"] == int(version)), None)

    def read_version(self, version: int) -> bytes:
        """The package bytes of ``version``, verified against the manifest sha256. KeyError when the version is not
        in the manifest; FileNotFoundError when its file is missing; ValueError on a sha256 mismatch."""
        version = int(version)
        recs = [r for r in self._manifest_raw() if r.get("version") == version]
        if not recs:
            raise KeyError(f"version {version} is not in the manifest {self.versions_dir / MANIFEST_FILE}")
        want = recs[0].get("sha256")
        data = self.version_path(version).read_bytes()
        got = sha256_bytes(data)
        if got != want:
            raise ValueError(f"version {version}: sha256 of {self.version_path(version)} is {got}, the manifest has "
                             f"{want} (corrupted or replaced file)")
        return data

    # --------------------------------------------------------------------------------------------- actor log
    def record_actor_decision(self, version: int, sha256: str, *, accepted: bool, reason: str = "",
                              episode: int | None = None, step: int | None = None,
                              time_s: float | None = None) -> dict:
        """Append an actor decision to this robot's actor log (versions/actor.jsonl, or robots/<id>/actor.jsonl with
        ``robot``: the id); returns the record. An accepted version >= 1 must be a
        stored version with that sha256 (ValueError otherwise: store it with :meth:`publish_version` first);
        version 0 is the base policy (sha256 :attr:`base_sha256`). ``episode`` is the actor's episode when it
        decided; ``step`` the control step of that episode from which an accepted version runs (None: it was
        decided at the end of ``episode`` and runs from the next one)."""
        version, accepted = int(version), bool(accepted)
        if accepted:
            if version == 0:
                if sha256 != self.base_sha256:
                    raise ValueError(f"version 0 is the base policy (sha256 {self.base_sha256}), not {sha256}")
            else:
                rec = self.version_record(version)
                if rec is None or rec["sha256"] != sha256:
                    raise ValueError(f"version {version} (sha256 {sha256}) is not a stored version of this session: "
                                     "store the package before recording its acceptance")
        record = {"version": version, "sha256": sha256, "accepted": accepted, "reason": str(reason),
                  "episode": episode, "step": None if step is None else int(step),
                  "time_s": time.time() if time_s is None else float(time_s)}
        if self.robot_id != DEFAULT_ROBOT:
            record["robot"] = self.robot_id
        append_jsonl(self._actor_log, record)
        return record

    def actor_decisions(self) -> list[dict]:
        """This robot's actor decisions (its actor log's records)."""
        return read_jsonl(self._actor_log)

    def current_actor_version(self) -> int:
        """The last version the actor accepted (0: the base policy), verified: the latest accepted record whose
        version and sha256 match a verified manifest line (or the base). An accepted record that does not verify
        is skipped with a warning, falling back to the previous accepted one."""
        verified = {r["version"]: r["sha256"] for r in self.versions()}
        verified[0] = self.base_sha256
        for rec in reversed(self.actor_decisions()):
            if not rec.get("accepted"):
                continue
            v = rec.get("version")
            if isinstance(v, int) and verified.get(v) == rec.get("sha256"):
                return v
            warnings.warn(f"{self._actor_log}: accepted version {v!r} (sha256 {rec.get('sha256')}) "
                          "does not match the verified versions; falling back to the previous accepted one",
                          stacklevel=2)
        return 0


def _create_key(path: Path) -> None:
    """Write a new session key (secrets.token_hex(32)) at ``path`` with mode 0o600, complete or not at all; never
    overwrites an existing key (FileExistsError)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")  # mkstemp: mode 0o600
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write((secrets.token_hex(32) + "\n").encode())
            f.flush()
            os.fsync(f.fileno())
        os.link(tmp, path)  # atomic and exclusive
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    fsync_dir(path.parent)

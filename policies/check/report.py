"""The report card of ``sim2real check`` (see :mod:`sim2real.policies.check`): items, sections, the verdict (the
worst section), the fingerprint a ``check.json`` is valid for, and the JSON file (written atomically, read back by
the deploy gate)."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from sim2real.configs.durable import sha256_file
from sim2real.policies.artefact.metadata import METADATA_FILE, ONNX_FILE

PASS, WARN, FAIL = "PASS", "WARN", "FAIL"
_RANK = {PASS: 0, WARN: 1, FAIL: 2}
REPORT_SCHEMA = 1
CHECK_FILE = "check.json"


@dataclass
class Item:
    """One measured line of a section: ``name``, ``status``, ``message`` (numbers with units)."""

    name: str
    status: str
    message: str


@dataclass
class Section:
    """One section of the report: its ``status`` (the worst item's), a one-line ``summary``, its ``items`` and
    the measured ``data`` (written to the JSON report)."""

    name: str
    status: str
    summary: str
    items: list[Item] = field(default_factory=list)
    data: dict = field(default_factory=dict)


@dataclass
class Report:
    """The report card. ``verdict``: the worst section status."""

    policy: str
    robot: str
    sections: list[Section]
    fingerprint: dict
    wall_s: float = 0.0

    @property
    def verdict(self) -> str:
        return worst(s.status for s in self.sections)

    def failed(self) -> list[Section]:
        return [s for s in self.sections if s.status == FAIL]

    def to_dict(self) -> dict:
        return {"schema": REPORT_SCHEMA, "policy": self.policy, "robot": self.robot, "verdict": self.verdict,
                "fingerprint": self.fingerprint, "wall_s": round(self.wall_s, 2),
                "sections": [asdict(s) for s in self.sections]}

    def format(self) -> str:
        lines = [f"sim2real check: {self.policy} on {self.robot}"]
        for s in self.sections:
            bad = [i.name for i in s.items if i.status == s.status]
            head = s.summary if s.status == PASS or not bad else f"{s.status} in {', '.join(bad)}"
            lines.append(f"[{s.status}] {s.name}: {head}")
            for it in s.items:
                lines.append(f"    {it.status:4s}  {it.name}: {it.message}")
        lines.append(f"verdict: {self.verdict}" + (f" ({', '.join(s.name for s in self.failed())} failed)"
                                                   if self.failed() else "") + f"  [{self.wall_s:.1f} s]")
        return "\n".join(lines)


def worst(statuses) -> str:
    """The worst of ``statuses`` (``PASS`` < ``WARN`` < ``FAIL``; ``PASS`` for none)."""
    out = PASS
    for s in statuses:
        if _RANK[s] > _RANK[out]:
            out = s
    return out


def make_section(name: str, items: list[Item], ok: str, data: dict | None = None) -> Section:
    """Section ``name`` of ``items``: its status the worst item's, its summary ``ok`` when all PASS, else the
    worst items' messages."""
    status = worst(i.status for i in items) if items else PASS
    bad = [i for i in items if i.status == status and status != PASS]
    summary = ok if status == PASS else "; ".join(f"{i.name}: {i.message}" for i in bad)
    return Section(name, status, summary, items, data or {})


def fingerprint(policy_dir: Path, robot: dict) -> dict:
    """What a ``check.json`` is valid for: the policy files' sha256 and the robot config's hash."""
    from sim2real.configs import config_hash

    policy_dir = Path(policy_dir)

    def digest(name):
        path = policy_dir / name
        return sha256_file(path) if path.is_file() else None

    return {"onnx_sha256": digest(ONNX_FILE), "metadata_sha256": digest(METADATA_FILE),
            "robot_hash": config_hash(robot), "schema": REPORT_SCHEMA}


def check_json_path(path: str | Path) -> Path:
    """``path`` if :func:`write_json` can write it: checked before a check runs (its folder is not created).

    Raises:
        IsADirectoryError: ``path`` is a folder.
        FileNotFoundError: its folder does not exist.
        NotADirectoryError: its parent is not a folder.
        PermissionError: its folder is not writable.
    """
    path = Path(path)
    parent = path.parent
    if path.is_dir():
        raise IsADirectoryError(f"--json {path}: is a folder; give the report's file path, e.g. {path / CHECK_FILE}")
    if not parent.exists():
        raise FileNotFoundError(f"--json {path}: folder {parent} does not exist (it is not created)")
    if not parent.is_dir():
        raise NotADirectoryError(f"--json {path}: {parent} is not a folder")
    try:  # a file of the writer's kind, created and removed: what the write needs, whoever runs it
        fd, probe = tempfile.mkstemp(dir=parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise PermissionError(f"--json {path}: folder {parent} is not writable ({exc.strerror})") from None
    os.close(fd)
    os.unlink(probe)
    return path


def write_json(report: Report, path: str | Path) -> Path:
    """Write ``report.to_dict()`` to ``path`` atomically
    (:func:`~sim2real.configs.durable.atomic_write_bytes`: a temporary file in the same folder, fsync, os.replace).

    Raises:
        FileNotFoundError: ``path``'s folder is missing (it is not created: see :func:`check_json_path`).
        OSError: the folder is not writable.
    """
    from sim2real.configs.durable import atomic_write_bytes

    path = Path(path)
    if not path.parent.is_dir():  # the durable writer creates folders; a report goes only where asked
        raise FileNotFoundError(f"--json {path}: folder {path.parent} does not exist (it is not created)")
    atomic_write_bytes(path, json.dumps(report.to_dict(), indent=2).encode())
    return path


def stored_check(policy_dir: Path, fp: dict) -> tuple[dict | None, str | None, str | None]:
    """(a fresh ``check.json`` beside the policy or None, a note when one is stale, why one is unreadable or None).
    Unreadable: not readable, not JSON, or not a report (an object with a ``fingerprint`` object and a ``verdict``
    of PASS/WARN/FAIL); stale: a report for another fingerprint."""
    path = Path(policy_dir) / CHECK_FILE
    if not path.is_file():
        return None, None, None
    try:
        stored = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        return None, None, " ".join(str(exc).split())[:160]
    if not isinstance(stored, dict) or not isinstance(stored.get("fingerprint"), dict) \
            or stored.get("verdict") not in (PASS, WARN, FAIL):
        return None, None, "not a sim2real check report"
    if stored["fingerprint"] != fp:
        return None, f"{path} is stale (the policy or the robot config changed since): ignored", None
    return stored, None, None

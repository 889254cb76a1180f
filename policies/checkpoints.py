"""Run directories and checkpoints: atomic writes, keep-last-K, ``best.pt``, and ``PATH|latest|best`` selection.

A run directory (``runs/<task>/<timestamp>[_<name>]``) holds ``config.yaml`` (the resolved config), ``run.json``
(git revision, seed, command line), TensorBoard event files, ``model_<it>.pt`` checkpoints and ``best.pt``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path

import torch
import yaml

from sim2real.configs.durable import atomic_write_bytes
from sim2real.errors import CheckpointError  # noqa: F401  (defined there, without torch, for the command line)

RUNS_ROOT = Path(os.environ.get("SIM2REAL_RUNS", "runs"))
_MODEL_RE = re.compile(r"^model_(\d+)\.pt$")


def git_revision() -> str:
    """The project's git revision (with ``-dirty`` when the work tree has changes), or ``unknown``."""
    here = Path(__file__).resolve().parent.parent
    try:
        rev = subprocess.run(["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=5).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain"], capture_output=True, text=True,
                               timeout=5).stdout.strip()
        return (rev + ("-dirty" if dirty else "")) if rev else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def new_run_dir(task: str, name: str | None = None, root: Path | None = None) -> Path:
    """Create ``<root>/<task>/<YYYYmmdd-HHMMSS>[_name]`` (unique) and return it."""
    root = Path(root or RUNS_ROOT)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = root / task / (f"{stamp}_{name}" if name else stamp)
    path, k = base, 1
    while path.exists():
        path, k = Path(f"{base}-{k}"), k + 1
    path.mkdir(parents=True)
    return path


def write_run_files(run_dir: Path, cfg: dict, argv: list[str], resumed_from: Path | None = None) -> None:
    """Write the resolved ``config.yaml`` and ``run.json``; a resume appends to ``run.json``'s ``resumes``."""
    atomic_write_bytes(run_dir / "config.yaml", yaml.safe_dump(cfg, sort_keys=False).encode())
    info = {"git_revision": git_revision(), "seed": cfg["seed"], "argv": argv, "started": time.time()}
    path = run_dir / "run.json"
    if resumed_from is not None and path.is_file():  # continuing in place
        previous = json.loads(path.read_text())
        previous.setdefault("resumes", []).append({**info, "from": str(resumed_from)})
        info = previous
    elif resumed_from is not None:  # a new run branched from another run's checkpoint
        info["resumed_from"] = str(resumed_from)
    atomic_write_bytes(path, json.dumps(info, indent=2).encode())


def checkpoint_iteration(path: Path) -> int:
    """The iteration number in a ``model_<it>.pt`` file name."""
    m = _MODEL_RE.match(Path(path).name)
    if not m:
        raise CheckpointError(f"not a model_<iteration>.pt checkpoint name: {path}")
    return int(m.group(1))


def list_checkpoints(run_dir: Path) -> list[Path]:
    """``model_<it>.pt`` files of a run, oldest iteration first."""
    found = [p for p in Path(run_dir).glob("model_*.pt") if _MODEL_RE.match(p.name)]
    return sorted(found, key=checkpoint_iteration)


def prune_checkpoints(run_dir: Path, keep_last: int) -> None:
    for p in list_checkpoints(run_dir)[:-keep_last] if keep_last > 0 else []:
        p.unlink(missing_ok=True)


def latest_run(task: str, root: Path | None = None) -> Path:
    root = Path(root or RUNS_ROOT) / task
    runs = sorted((p for p in root.glob("*") if p.is_dir() and list_checkpoints(p)), key=lambda p: p.stat().st_mtime)
    if not runs:
        raise CheckpointError(f"no run with checkpoints under {root} (runs are looked for under --runs-root, default "
                              f"$SIM2REAL_RUNS or ./runs; or give --checkpoint PATH)")
    return runs[-1]


def resolve_checkpoint(spec: str, task: str, root: Path | None = None) -> Path:
    """``spec``: a checkpoint file, a run directory (its latest), ``latest`` or ``best`` (of the newest run)."""
    if spec in ("latest", "best"):
        run = latest_run(task, root)
        if spec == "best":
            best = run / "best.pt"
            if not best.is_file():
                raise CheckpointError(f"run {run} has no best.pt yet (no evaluation has run)")
            return best
        return list_checkpoints(run)[-1]
    path = Path(spec)
    if path.is_dir():
        ckpts = list_checkpoints(path)
        if not ckpts:
            raise CheckpointError(f"no checkpoint (model_<it>.pt) in {path}")
        return ckpts[-1]
    if not path.is_file():
        raise CheckpointError(f"checkpoint not found: {path}")
    return path


def load_task_checkpoint(spec: str, task: str | None, root: Path | None = None) -> tuple[Path, dict]:
    """Resolve ``spec`` (see :func:`resolve_checkpoint`) and load it; raises :class:`CheckpointError` if it is
    missing, corrupt, or was trained for another task. ``task`` None: the checkpoint's own (its saved config's
    ``task``), for a checkpoint file or run folder; ``latest`` and ``best`` need the task (they look in its runs)."""
    if task is None and spec in ("latest", "best"):
        raise CheckpointError(f"--task is required with --checkpoint {spec} (the newest run of which task?); a "
                              f"checkpoint file or run folder names its own task")
    path = resolve_checkpoint(spec, task, root)
    try:
        data = load_checkpoint(path)
    except CheckpointError as damaged:
        if spec != "latest" and not Path(spec).is_dir():
            raise
        # The newest checkpoint is damaged (a crash mid-write of a copy, a full disk): take the newest intact one
        # before it, with a note; the damaged file stays where it is.
        path, data = _newest_intact(path.parent, before=path, damaged=damaged)
    if task is not None and data["infos"]["config"]["task"] != task:
        raise CheckpointError(f"{path} belongs to task '{data['infos']['config']['task']}', not '{task}'")
    return path, data


def _newest_intact(run: Path, before: Path, damaged: CheckpointError) -> tuple[Path, dict]:
    """The newest checkpoint of ``run`` older than ``before`` that loads, with a note on stderr naming the damaged
    one; raises ``damaged`` when there is none."""
    import sys

    for older in reversed([p for p in list_checkpoints(run) if checkpoint_iteration(p) < checkpoint_iteration(before)]):
        try:
            data = load_checkpoint(older)
        except CheckpointError:
            continue
        print(f"note: {damaged}; using the newest intact checkpoint, {older.name}, instead (the damaged file is left "
              f"as it is)", file=sys.stderr)
        return older, data
    raise damaged


def _sentences(text: str, limit: int = 200) -> str:
    """``text`` on one line: all of it up to ``limit`` characters, else its whole sentences that fit (at least the
    first; a long first sentence is cut at a word, with "..."), never a sentence cut off mid-way unmarked."""
    line = " ".join(text.split()).rstrip(".")
    if len(line) <= limit:
        return line
    end = line.rfind(". ", 0, limit + 1)
    if end > 0:
        return line[:end]
    first = line.split(". ", 1)[0]
    return first if len(first) <= 2 * limit else first[:limit].rsplit(" ", 1)[0] + " ..."


def load_checkpoint(path: Path) -> dict:
    """Load a checkpoint dict; raises :class:`CheckpointError` if the file is corrupt or not ours."""
    try:
        data = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # torch raises many kinds for truncated/corrupt files
        raise CheckpointError(f"checkpoint {path} is damaged (cannot be read: {type(exc).__name__}: "
                              f"{_sentences(str(exc))})") from None
    if not isinstance(data, dict) or "actor_state_dict" not in data or not isinstance(data.get("infos"), dict) \
            or "config" not in data["infos"]:
        raise CheckpointError(f"{path} is not a sim2real checkpoint (missing actor weights or config)")
    return data

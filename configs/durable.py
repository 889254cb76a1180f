"""Crash-safe file writes and content hashes, the one implementation every package uses (checkpoints, exported
policies, fine-tuning sessions, recordings, reports).

Durability: a replaced file is written to a temporary file in the same folder, flushed and ``fsync``-ed, renamed
over the target with ``os.replace`` and the folder is ``fsync``-ed, so after a crash (power loss included) the file
holds either its old content or the new one, never a mix. JSON-lines files are appended one ``os.write`` per record
with ``O_APPEND`` and ``fsync``; a torn last line from a crash is repaired before the next append.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import tempfile
import warnings
from pathlib import Path


def fsync_dir(path) -> None:
    """fsync the directory ``path`` (so a file created or renamed in it survives a crash)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_writer(path, mode: int | None = None):
    """Context manager yielding a binary file object whose content replaces ``path`` atomically when the block
    exits without an exception (flush, fsync, ``os.replace``, fsync of the directory); on an exception the temp
    file is removed and ``path`` is left as it was. The folder is created when missing. ``mode``: the new file's
    permission bits (default: ``0o666`` less the umask, as ``open`` gives)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if mode is None:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def atomic_write_bytes(path, data: bytes, *, mode: int | None = None) -> None:
    """Replace ``path`` with ``data`` atomically: after a crash the file holds its old content or ``data``."""
    with atomic_writer(path, mode) as f:
        f.write(data)


def atomic_write_json(path, obj, *, mode: int | None = None) -> None:
    """:func:`atomic_write_bytes` of ``obj`` as indented, key-sorted JSON (NaN/Inf refused: ValueError)."""
    atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True, allow_nan=False) + "\n").encode(),
                       mode=mode)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _repair_tail(fd: int, path: Path) -> None:
    """If the file does not end with a newline (a write torn by a crash), complete the last line when it is a whole
    JSON object, else truncate it away."""
    size = os.fstat(fd).st_size
    if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
        return
    start, chunk = size, 1 << 16
    while start > 0:  # find the last newline, reading backwards
        lo = max(0, start - chunk)
        buf = os.pread(fd, start - lo, lo)
        i = buf.rfind(b"\n")
        if i >= 0:
            start = lo + i + 1
            break
        start = lo
    tail = os.pread(fd, size - start, start)
    try:
        ok = isinstance(json.loads(tail.decode()), dict)
    except (UnicodeDecodeError, ValueError):
        ok = False
    if ok:
        _write_all(fd, b"\n")
    else:
        warnings.warn(f"{path}: removed a truncated last line ({size - start} bytes, an interrupted write) "
                      "before appending", stacklevel=3)
        os.ftruncate(fd, start)


def append_jsonl(path, record: dict) -> None:
    """Append ``record`` as one JSON line (one ``os.write`` with ``O_APPEND``) and fsync it (and the directory when
    the file is new). A torn last line left by a crash is repaired first (see the module docstring). NaN/Inf values
    are refused (ValueError). One writer process per file."""
    path = Path(path)
    line = (json.dumps(record, sort_keys=True, allow_nan=False, separators=(",", ":")) + "\n").encode()
    new = not path.exists()
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        _repair_tail(fd, path)
        _write_all(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)
    if new:
        fsync_dir(path.parent)


def read_jsonl(path) -> list[dict]:
    """The records of a JSON-lines file ([] when it does not exist). A truncated or garbled LAST line (a crash
    mid-append) is ignored with a warning naming the file and line; a garbled line anywhere else raises
    ValueError naming the file and line. Blank lines are skipped."""
    path = Path(path)
    if not path.exists():
        return []
    lines = path.read_bytes().split(b"\n")
    last = max((i for i, raw in enumerate(lines) if raw.strip()), default=-1)
    records = []
    for i, raw in enumerate(lines):
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw.decode())
            if not isinstance(rec, dict):
                raise ValueError("not a JSON object")
        except (UnicodeDecodeError, ValueError) as e:
            if i == last:
                warnings.warn(f"{path}: line {i + 1} is truncated or garbled (an interrupted write?); ignored",
                              stacklevel=2)
                continue
            raise ValueError(f"{path}: line {i + 1} is garbled ({e}); the file is damaged") from None
        records.append(rec)
    return records


def sha256_bytes(data: bytes) -> str:
    """Hex SHA-256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def sha256_file(path) -> str:
    """Hex SHA-256 of the file ``path``, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def atomic_torch_save(obj, path) -> None:
    """``torch.save`` of ``obj`` through :func:`atomic_write_bytes`."""
    import torch

    buf = io.BytesIO()
    torch.save(obj, buf)
    atomic_write_bytes(Path(path), buf.getvalue())

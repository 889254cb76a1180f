"""The locks of a fine-tuning session (:mod:`sim2real.deploy.finetune.session`): the exclusive role locks
(``actor.lock`` per robot, ``learner.lock``), who holds one, and the short lock around storing a version."""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

#: Locks this process holds: resolved lock path -> [file descriptor, depth] (see :func:`hold_lock`).
_HELD_LOCKS: dict[Path, list] = {}


@contextlib.contextmanager
def hold_lock(path: Path, message: str):
    """Hold the lock file ``path`` for the ``with`` block: an advisory ``fcntl.flock`` (released by the kernel when
    the process dies, even by kill -9); the holder's pid is written into the file, and the holder removes the file
    when it lets go (a file left by a holder that died is taken over by the next start and removed when that one
    ends). Re-entrant within a process.

    Raises:
        RuntimeError: another process holds it: ``message`` with ``{pid}`` replaced by the holder's pid."""
    path = Path(path).resolve()
    held = _HELD_LOCKS.get(path)
    if held is not None:
        held[1] += 1
    else:
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.read(fd, 64).decode(errors="replace").strip() or "?"
                os.close(fd)
                raise RuntimeError(message.replace("{pid}", holder)) from None
            try:  # the file may have been removed by a holder letting go between our open and our lock
                if os.stat(path).st_ino == os.fstat(fd).st_ino:
                    break
            except FileNotFoundError:
                pass
            os.close(fd)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        _HELD_LOCKS[path] = held = [fd, 1]
    try:
        yield
    finally:
        held[1] -= 1
        if held[1] == 0:
            del _HELD_LOCKS[path]
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)  # while still locked: a waiting opener sees the inode change and retries
            os.close(held[0])  # closing the descriptor releases the lock


def lock_holder(path: Path) -> int | None:
    """The pid written in the lock file ``path`` when that process runs now (not a zombie), else None (no file, or
    one left by a holder that died). Linux (/proc)."""
    try:
        pid = int(Path(path).read_text().strip() or "0")
        stat_text = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    return pid if pid > 0 and stat_text.rsplit(")", 1)[1].split()[0] != "Z" else None


@contextlib.contextmanager
def file_lock(path: Path):
    """A blocking ``flock`` on ``path`` (created if missing, never removed) for the block: one holder at a time
    across processes, released by the kernel when the holder dies."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)

"""Exclusive runs: one writing process per run directory.

The lock is an ``flock`` on ``RUN_DIR/.lock``. The kernel drops it when the
holding process ends, however it ends (SIGKILL, OOM, a power cut of a
client on a shared filesystem once its lease lapses), so a stale lock needs
no guessing from pids or ages: if ``flock`` succeeds, nobody holds the run.
What the file adds is who: the holder writes a JSON record (pid, host,
command, start time) into it, so a refused writer can name the holder. A
holder that ends cleanly empties the record before letting go; a record
found by a process that just got the lock is therefore one left by a holder
that died, and is reported as taken over.

The file is never deleted: a process blocked on the old inode while another
unlinks and recreates the path would get a lock on a file nobody else looks
at, and two writers would each believe they are alone.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mindforge.errors import MindForgeError
from mindforge.procs import pid_alive
from mindforge.store import RunDir

LOCK_NAME = ".lock"


class RunLocked(MindForgeError):
    """The run directory is being written by another process."""

    def __init__(self, run_dir: Path, holder: dict[str, Any] | None):
        self.run_dir = Path(run_dir)
        self.holder = holder
        super().__init__(f"run directory {self.run_dir} is in use: {describe(holder)}")


def lock_path(run_dir: Path | RunDir) -> Path:
    root = run_dir.root if isinstance(run_dir, RunDir) else Path(run_dir)
    return root / LOCK_NAME


def describe(holder: dict[str, Any] | None) -> str:
    """One line naming a holder, for error messages and status output."""
    if not holder:
        return "held by a process that has not written its record yet"
    pid, host = holder.get("pid"), holder.get("host", "?")
    text = f"held by pid {pid} on {host} since {holder.get('started', '?')} ({holder.get('command', '?')})"
    if host == socket.gethostname() and isinstance(pid, int) and not pid_alive(pid):
        # flock is held by an open file, not a pid: a child the holder forked keeps it.
        text += "; that pid is gone, so a process it started still holds the lock"
    return text


def read_holder(run_dir: Path | RunDir) -> dict[str, Any] | None:
    """The record in the lock file, or None when there is none (no lock, or released cleanly).

    It says who holds the run only while the lock is held; use it to show
    who is running, not to decide whether one may write.
    """
    try:
        raw = lock_path(run_dir).read_bytes()
    except FileNotFoundError:
        return None
    return _parse(raw)


@contextmanager
def run_lock(run_dir: Path | RunDir, command: str | None = None) -> Iterator[RunLock]:
    """Hold ``RUN_DIR/.lock`` for the ``with`` block; raise ``RunLocked`` if another process does.

    ``command`` is what the record names as the holder's work (default: this
    process's argv). Never blocks: a second writer is refused at once.
    """
    lock = RunLock(run_dir, command)
    lock.acquire()
    try:
        yield lock
    finally:
        lock.release()


class RunLock:
    """The held lock: ``holder`` is this process's record; ``took_over`` the dead holder's, if any."""

    def __init__(self, run_dir: Path | RunDir, command: str | None = None):
        self.path = lock_path(run_dir)
        self.command = command or " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])
        self.holder: dict[str, Any] | None = None
        self.took_over: dict[str, Any] | None = None
        self._fd: int | None = None

    def acquire(self) -> None:
        if self._fd is not None:
            raise RuntimeError("this RunLock is already held")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise MindForgeError(f"cannot lock {self.path}: {exc}") from None
            raise RunLocked(self.path.parent, _wait_for_record(self.path)) from None
        # Ours now. A record still in the file belongs to a holder that died holding it.
        self.took_over = _parse(_read_fd(fd))
        self.holder = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "command": self.command,
            "started": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        _write_fd(fd, (json.dumps(self.holder, sort_keys=True) + "\n").encode())
        self._fd = fd

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            _write_fd(fd, b"")  # a clean end leaves no record, so the next holder takes over nothing
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def _read_fd(fd: int) -> bytes:
    size = os.fstat(fd).st_size
    return os.pread(fd, size, 0) if size else b""


def _write_fd(fd: int, data: bytes) -> None:
    os.ftruncate(fd, 0)
    if data:
        os.pwrite(fd, data, 0)
    os.fsync(fd)


def _parse(raw: bytes) -> dict[str, Any] | None:
    try:
        record = json.loads(raw)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None


def _wait_for_record(path: Path, wait_s: float = 1.0) -> dict[str, Any] | None:
    """The holder's record; a holder that has just taken the lock gets a moment to write it."""
    deadline = time.monotonic() + wait_s
    while True:
        holder = read_holder(path.parent)
        if holder is not None or time.monotonic() >= deadline:
            return holder
        time.sleep(0.05)

"""One writer per run folder: `RUN_DIR/.lock` names its holder (pid, host, start time, command).

Two `archlab train` processes writing one folder would interleave their metrics.jsonl rows,
overwrite each other's config.yaml and mix checkpoints of two models. So every writer (training,
`convert --from-hf`) takes the folder's lock before it writes anything, and a second one is refused
in one line naming the holder.

The lock is an advisory `flock` on the file, held for the life of the process: the kernel releases
it when the holder exits, however it exits, so a lock left by a killed run never blocks a new one.
Its contents then still name the dead holder, which is reported as a stale lock and replaced.
`flock` works on local filesystems and on NFS v4 (Linux maps it to a byte-range lock); where it does
not, the holder's pid and host are still written, so a user can see who holds the folder.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import socket
import sys
import time
from pathlib import Path

from archlab.storage import check_writable, writing

logger = logging.getLogger(__name__)

LOCK_FILE = ".lock"


class RunLocked(ValueError):
    """Another live process holds the run folder; the message names it (a ValueError: the
    CLI exits 2)."""


def _describe(holder: dict) -> str:
    started = holder.get("started")
    when = (
        time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started))
        if isinstance(started, (int, float))
        else "?"
    )
    pid, host, command = holder.get("pid", "?"), holder.get("host", "?"), holder.get("command", "?")
    return f"pid {pid} on host {host} (since {when}: {command})"


def _read(fd: int) -> dict:
    os.lseek(fd, 0, os.SEEK_SET)
    raw = os.read(fd, 1 << 16)
    try:
        holder = json.loads(raw.decode("utf-8")) if raw.strip() else {}
    except (UnicodeDecodeError, json.JSONDecodeError):
        holder = {"command": "unreadable lock file"}
    return holder if isinstance(holder, dict) else {}


def _command() -> str:
    """The holder's command line, shortened: enough to recognise the run."""
    line = " ".join(["archlab", *sys.argv[1:]])
    return line if len(line) <= 120 else line[:117] + "..."


def check_folder(folder: Path, flag: str = "--out") -> None:
    """Refuse, in one line, a folder path that names a file, or lies under one (mkdir would
    raise FileExistsError / NotADirectoryError with a traceback), and one that cannot be written
    (a read-only file system, no permission: `StorageError`); a missing folder is fine (it
    will be created)."""
    for path in (folder, *folder.parents):
        if path.exists():
            if not path.is_dir():
                under = "" if path == folder else f" (it lies under {path})"
                raise ValueError(
                    f"{flag} {folder} is not a folder: {path} is a file{under}; give a folder path"
                )
            break
    check_writable(folder, flag)


class RunLock:
    """The lock of one run folder; `acquire()` takes it or raises `RunLocked`, `release()`
    gives it back."""

    def __init__(self, run_dir: str | Path) -> None:
        self.path = Path(run_dir) / LOCK_FILE
        self._fd: int | None = None
        self.stale: dict | None = None  # the dead holder a stale lock named, when one was replaced
        # whether acquire() made the run folder (a failed start may remove it)
        self.created_folder = False

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> RunLock:
        """Create the folder if needed and lock it; refuse (one line) while another live
        process holds it."""
        if self._fd is not None:
            return self
        check_folder(self.path.parent)
        self.created_folder = not self.path.parent.exists()
        try:
            with writing(self.path.parent, "the run folder's lock"):
                self._lock()
        except BaseException:
            if self.created_folder:  # a full disk after mkdir: no empty folder is left behind
                shutil.rmtree(self.path.parent, ignore_errors=True)
            raise
        return self

    def _lock(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read(fd)
                os.close(fd)
                raise RunLocked(
                    f"{self.path.parent} is in use by {_describe(holder)}: one process writes a "
                    "run folder at a time; wait for it to finish or choose another --out"
                ) from None
            # the holder may have released and unlinked the file between our open and our flock
            if os.path.exists(self.path) and os.fstat(fd).st_ino == os.stat(self.path).st_ino:
                break
            os.close(fd)
        previous = _read(fd)
        if previous:
            self.stale = previous
            logger.warning(
                "%s: replaced a stale lock of %s: that process is no longer running",
                self.path.parent,
                _describe(previous),
            )
        me = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": time.time(),
            "command": _command(),
        }
        try:
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
            os.write(fd, json.dumps(me).encode("utf-8"))
            os.fsync(fd)
        except OSError:
            os.close(fd)
            raise
        self._fd = fd

    def release(self) -> None:
        """Remove the lock file and let go (idempotent). The unlink comes first, while the lock
        is still held."""
        if self._fd is None:
            return
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        os.close(self._fd)
        self._fd = None

    def discard(self) -> None:
        """After a refused or failed start: remove the run folder if acquire() made
        it, then release."""
        if self._fd is not None and self.created_folder:
            shutil.rmtree(self.path.parent, ignore_errors=True)
        self.release()

    # a lock object dropped without release() (e.g. a Trainer that never ran)
    def __del__(self) -> None:
        self.release()

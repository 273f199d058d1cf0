"""Writes the filesystem refuses (a full disk, a quota, a read-only or unwritable folder) as one
typed error naming the path and what happened: `StorageError`, an `OSError` that keeps the errno.

The libraries that write for archlab report such a fault in three spellings: Python's own writes
raise `OSError` with its errno; `torch.save` raises `RuntimeError: [enforce fail at
inline_container.cc] ... unexpected pos`, with the `OSError` of the file object it wrote to as its
context when it was given an open file (given a path it writes in C++ and the errno is lost, so
callers hand it a file); safetensors raises `SafetensorError: ... I/O error: No space left on device
(os error 28)`. `storage_fault` finds the errno in any of them; `writing(path, what)` turns such a
fault raised in its block into a `StorageError`. Any other error passes through unchanged.

The library raises, the commands print the one line (cli.py). What was on disk before stays: every
writer builds beside its target and renames (checkpoints, prepared data, config files).
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# errno -> what happened, in the words of the one-line message
FAULTS = {
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
}
# errno -> what lets the write through next time
FIXES = {
    errno.ENOSPC: "free some space",
    errno.EDQUOT: "free some space or raise the quota",
    errno.EROFS: "mount it writable",
    errno.EACCES: "make it writable",
}
# safetensors' Rust I/O errors end with "(os error N)"
_OS_ERROR = re.compile(r"\(os error (\d+)\)")


class StorageError(OSError):
    """A write the filesystem refused; the message names the path, what was written and why."""

    def __str__(self) -> str:  # the message alone, without OSError's "[Errno N]" prefix
        return self.strerror or super().__str__()


def storage_fault(err: BaseException) -> int | None:
    """The errno of a filesystem fault (FAULTS) behind `err`: its own, one in its cause or context
    chain, or one spelled in its message; None for any other error."""
    seen: set[int] = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno in FAULTS:
            return err.errno
        match = _OS_ERROR.search(str(err))
        if match and int(match.group(1)) in FAULTS:
            return int(match.group(1))
        err = err.__cause__ or err.__context__
    return None


def fault_line(err: BaseException) -> str | None:
    """One line for a filesystem fault no writer turned into a `StorageError` (the CLI's last net):
    the file the OSError names, if any, and what happened; None for any other error."""
    code = storage_fault(err)
    if code is None:
        return None
    seen: set[int] = set()
    while (
        err is not None and id(err) not in seen and not (isinstance(err, OSError) and err.filename)
    ):
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    verb = "cannot open" if code == errno.EACCES else "cannot write"  # EACCES: a read, too
    if isinstance(err, OSError) and err.filename:
        return f"{verb} {err.filename}: {describe(code)}"
    return f"a write failed: {describe(code)}"


def describe(code: int) -> str:
    return FAULTS.get(code, os.strerror(code))


def fix(code: int) -> str:
    return FIXES.get(code, "fix the folder")


@contextmanager
def writing(path: str | Path, what: str, after: str = "") -> Iterator[None]:
    """Turn a filesystem fault raised in the block into a `StorageError`: "cannot write WHAT to
    PATH: WHY" + `after` (what the user still has, how to go on)."""
    try:
        yield
    except StorageError:
        raise
    except Exception as err:
        code = storage_fault(err)
        if code is None:
            raise
        raise StorageError(code, f"cannot write {what} to {path}: {describe(code)}{after}") from err


def replace_text(path: str | Path, text: str) -> None:
    """Write `path` whole or not at all: into a temp file beside it, then renamed over it, so a full
    disk leaves the file as it was (a plain write_text would truncate it first)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def first_existing(path: Path) -> Path:
    """`path`, or the nearest of its parents that exists (where a missing folder would be made)."""
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path("/")


def check_writable(folder: str | Path, flag: str) -> None:
    """Refuse, before any work, a folder that cannot be written: on a read-only file system, or
    without write permission where it, or the nearest parent that exists, would be written. (root
    passes the permission test as it passes the kernel's; a read-only mount refuses everyone.)"""
    folder = Path(folder)
    where = first_existing(folder)
    if os.access(where, os.W_OK):
        return
    code = errno.EROFS if _read_only(where) else errno.EACCES
    into = "" if where == folder else f" (its parent {where})"
    raise StorageError(
        code, f"{flag} {folder} cannot be written{into}: {describe(code)}; give a writable folder"
    )


def _read_only(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False

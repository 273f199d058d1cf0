"""Filesystem faults (archlab/storage.py): the errno behind each library's spelling of a full disk,
found on a real full tmpfs; `writing` turns only those into a StorageError; the writable check of an
output folder on a read-only mount; a file replaced whole or not at all."""

from __future__ import annotations

import errno
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from archlab.storage import StorageError, check_writable, replace_text, storage_fault, writing
from tests.conftest import SmallFilesystem

BIG = {"x": torch.zeros(64 * 1024)}  # 256 KiB: more than the 64 KiB filesystems below hold


def _caught(write: Callable[[], object]) -> BaseException:
    with pytest.raises(Exception) as caught:  # each library raises its own type; the test names it
        write()
    return caught.value


def test_each_library_s_full_disk_is_found(
    small_filesystem: Callable[[int], SmallFilesystem],
) -> None:
    """Python's OSError, torch.save into a file object (a RuntimeError whose context is the OSError)
    and safetensors (its message says "os error 28") all name ENOSPC; torch.save given a path, and
    numpy's tofile, lose the errno, which is why the writers hand torch a file object and write
    token arrays with file.write."""
    fs = small_filesystem(64).path

    def torch_to_handle() -> None:
        with (fs / "a.pt").open("wb") as handle:
            torch.save(BIG, handle)

    def python() -> None:
        (fs / "b.bin").write_bytes(bytes(256 * 1024))

    def numpy_tofile() -> None:
        with (fs / "e.bin").open("wb") as handle:
            np.zeros(128 * 1024, dtype=np.uint16).tofile(handle)

    found = {
        name: _caught(write)
        for name, write in [
            ("torch, a file object", torch_to_handle),
            ("python", python),
            ("safetensors", lambda: save_file(BIG, str(fs / "c.safetensors"))),
            ("torch, a path", lambda: torch.save(BIG, fs / "d.pt")),
            ("numpy tofile", numpy_tofile),
        ]
    }
    assert type(found["torch, a file object"]).__name__ == "RuntimeError"
    assert "inline_container" in str(found["torch, a file object"])
    assert type(found["safetensors"]).__name__ == "SafetensorError"
    assert {name: storage_fault(err) for name, err in found.items()} == {
        "torch, a file object": errno.ENOSPC,
        "python": errno.ENOSPC,
        "safetensors": errno.ENOSPC,
        "torch, a path": None,
        "numpy tofile": None,
    }


def test_writing_turns_only_filesystem_faults_into_one_line(tmp_path: Path) -> None:
    with (
        pytest.raises(StorageError) as caught,
        writing(tmp_path / "out", "the report", "; nothing was kept"),
    ):
        raise RuntimeError("PytorchStreamWriter failed") from OSError(
            errno.ENOSPC, "No space left on device"
        )
    assert (
        str(caught.value)
        == f"cannot write the report to {tmp_path / 'out'}: no space left on device; "
        "nothing was kept"
    )
    assert caught.value.errno == errno.ENOSPC and isinstance(caught.value, OSError)
    for other in (
        ValueError("a bad value"),
        FileNotFoundError(errno.ENOENT, "gone"),
        OSError(errno.EIO, "I/O"),
    ):
        with pytest.raises(type(other)) as passed, writing(tmp_path, "x"):
            raise other
        assert passed.value is other  # unchanged, not wrapped


def test_a_read_only_folder_is_refused_before_any_write(
    small_filesystem: Callable[[int], SmallFilesystem],
) -> None:
    fs = small_filesystem(64)
    (fs.path / "run").mkdir()
    check_writable(fs.path / "run", "--out")  # writable: nothing to say
    check_writable(fs.path / "new" / "run", "--out")
    fs.remount("ro")
    with pytest.raises(StorageError) as caught:
        check_writable(fs.path / "run", "--out")
    assert (
        str(caught.value)
        == f"--out {fs.path / 'run'} cannot be written: read-only file system; give "
        "a writable folder"
    )
    with pytest.raises(StorageError) as caught:
        # a folder to make: the parent that exists is named
        check_writable(fs.path / "new" / "run", "--out")
    assert str(caught.value) == (
        f"--out {fs.path / 'new' / 'run'} cannot be written (its parent {fs.path}): "
        "read-only file system; give a writable folder"
    )
    assert caught.value.errno == errno.EROFS


def test_replace_text_keeps_the_old_file_on_a_full_disk(
    small_filesystem: Callable[[int], SmallFilesystem],
) -> None:
    fs = small_filesystem(64)
    path = fs.path / "config.json"
    path.write_text("the old text\n")
    fs.fill(leave=0)
    with pytest.raises(OSError) as caught:
        replace_text(path, "x" * (128 * 1024))
    assert caught.value.errno == errno.ENOSPC
    assert path.read_text() == "the old text\n"  # write_text would have truncated it first
    # no temp file left
    assert sorted(p.name for p in fs.path.iterdir()) == ["config.json", "filler-1"]
    fs.free()
    replace_text(path, "the new text\n")
    assert path.read_text() == "the new text\n" and sorted(p.name for p in fs.path.iterdir()) == [
        "config.json"
    ]

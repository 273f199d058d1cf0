"""Shared test helpers: tiny configs and deterministic seeds."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

# pytest-xdist runs two workers on CI's two cores: one intra-op thread each keeps OpenMP from
# spin-waiting against the other worker (tests are tiny; threads buy nothing there).
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


class SmallFilesystem:
    """A size-capped tmpfs mounted for one test: a disk that really fills up, or
    is really read-only."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fillers = 0

    def free_bytes(self) -> int:
        stat = os.statvfs(self.path)
        return stat.f_bavail * stat.f_frsize

    def fill(self, leave: int = 0) -> Path:
        """Take all but about `leave` bytes (to the filesystem's 4 KiB pages) with a filler file."""
        self._fillers += 1
        filler = self.path / f"filler-{self._fillers}"
        with filler.open("wb") as handle:
            handle.write(b"\0" * max(0, self.free_bytes() - leave))
        return filler

    def free(self) -> None:
        """Remove the fillers: the space a user frees before going on."""
        for filler in self.path.glob("filler-*"):
            filler.unlink()

    def remount(self, mode: str) -> None:
        """`ro` or `rw`: root ignores a folder's permissions, never a read-only mount."""
        subprocess.run(
            ["mount", "-o", f"remount,{mode}", str(self.path)], check=True, capture_output=True
        )


@pytest.fixture
def small_filesystem(tmp_path: Path) -> Iterator[Callable[[int], SmallFilesystem]]:
    """`small_filesystem(kib)` mounts a tmpfs of that size under tmp_path (root only: CI runs as
    root; elsewhere the test skips saying why). Every mount is unmounted when the test ends, passed
    or failed (lazily if a file on it is still open)."""
    mounted: list[Path] = []

    def mount(kib: int) -> SmallFilesystem:
        if os.geteuid() != 0:
            pytest.skip(
                "a full disk and a read-only folder are tested on a size-capped tmpfs, which only "
                "root can mount (CI runs as root)"
            )
        point = tmp_path / f"fs{len(mounted)}"
        point.mkdir()
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={kib}k,mode=0755", "tmpfs", str(point)],
            capture_output=True,
            text=True,
        )
        if done.returncode:
            pytest.skip(f"cannot mount a tmpfs here ({done.stderr.strip() or done.returncode})")
        mounted.append(point)
        return SmallFilesystem(point)

    try:
        yield mount
    finally:
        for point in reversed(mounted):
            if subprocess.run(["umount", str(point)], capture_output=True).returncode:
                subprocess.run(["umount", "-l", str(point)], capture_output=True)


def randomize_(model: torch.nn.Module, std: float = 0.3) -> torch.nn.Module:
    """Re-draw every parameter (norm gains and biases included) so a dropped term cannot hide at
    1 or 0."""
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, std)
            if p.dim() == 1:
                p.add_(1.0 if p.numel() > 0 else 0.0)
    return model


def snapshot(folder: Path) -> dict[str, tuple[int, str]]:
    """Every file under `folder` (relative path -> size, sha256): equal snapshots =
    nothing was changed."""
    if not folder.exists():
        return {}
    return {
        str(p.relative_to(folder)): (p.stat().st_size, hashlib.sha256(p.read_bytes()).hexdigest())
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


# Prepended to a script run by `run_without_torch`: records where torch is first imported from
# (the archlab frames of that import), without stopping it, so a failure names the import that
# brought torch in.
_TRACE_TORCH = """
import sys, traceback
class _TorchTrace:
    chain = None
    def find_spec(self, name, path=None, target=None):
        if name == "torch" and _TorchTrace.chain is None:
            frames = [f for f in traceback.extract_stack() if "archlab" in f.filename]
            _TorchTrace.chain = " <- ".join(f"{f.filename.rsplit('src/', 1)[-1]}:{f.lineno}" for f in reversed(frames))
        return None
sys.meta_path.insert(0, _TorchTrace())
"""  # noqa: E501
_CHECK_TORCH = """
assert "torch" not in sys.modules, f"torch was imported, first by: {_TorchTrace.chain}"
"""
SRC = Path(__file__).resolve().parents[1] / "src"


def run_without_torch(code: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter (this checkout's src first on the path) and fail,
    naming the import chain, if it imported torch; the process's output is returned for
    the caller's checks."""
    path = [str(SRC), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    out = subprocess.run(
        [sys.executable, "-c", _TRACE_TORCH + code + _CHECK_TORCH],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return out

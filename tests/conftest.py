"""Shared test helpers: tiny configs and deterministic seeds."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch

# pytest-xdist runs two workers on CI's two cores: one intra-op thread each keeps OpenMP from spin-waiting
# against the other worker (tests are tiny; threads buy nothing there).
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _seed() -> None:
    torch.manual_seed(0)


def randomize_(model: torch.nn.Module, std: float = 0.3) -> torch.nn.Module:
    """Re-draw every parameter (norm gains and biases included) so a dropped term cannot hide at 1 or 0."""
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, std)
            if p.dim() == 1:
                p.add_(1.0 if p.numel() > 0 else 0.0)
    return model


def snapshot(folder: Path) -> dict[str, tuple[int, str]]:
    """Every file under `folder` (relative path -> size, sha256): equal snapshots = nothing was changed."""
    if not folder.exists():
        return {}
    return {str(p.relative_to(folder)): (p.stat().st_size, hashlib.sha256(p.read_bytes()).hexdigest())
            for p in sorted(folder.rglob("*")) if p.is_file()}

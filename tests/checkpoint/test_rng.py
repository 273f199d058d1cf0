"""Random streams (checkpoint/rng.py): captured and restored through a weights-only load."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import torch

from archlab.checkpoint import capture_rng_state, restore_rng_state


def test_rng_state_round_trips_through_a_weights_only_load(tmp_path: Path) -> None:
    state = capture_rng_state()
    torch.save(state, tmp_path / "rng.pt")
    want = (torch.rand(3), random.random(), np.random.rand(2))
    restore_rng_state(torch.load(tmp_path / "rng.pt", weights_only=True))
    got = (torch.rand(3), random.random(), np.random.rand(2))
    assert torch.equal(want[0], got[0]) and want[1] == got[1] and np.array_equal(want[2], got[2])

"""Every global random stream a training step can draw from, captured for state.pt and restored on
resume, so a resumed run continues bit for bit.
"""

from __future__ import annotations

import random

import numpy as np
import torch


def capture_rng_state() -> dict:
    """Every global random stream a step can draw from: torch (CPU, CUDA), python `random`, numpy.

    Stored as tensors and plain values so `torch.load(weights_only=True)` can read it back.
    """
    name, key, pos, has_gauss, cached = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "python": random.getstate(),
        "numpy": {
            "name": name,
            "key": torch.from_numpy(key.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached": float(cached),
        },
    }


def restore_rng_state(state: dict) -> None:
    """Put back what `capture_rng_state` saved (CUDA states only where this machine
    has the devices)."""
    torch.set_rng_state(state["torch"])
    if (
        state["cuda"]
        and torch.cuda.is_available()
        and len(state["cuda"]) == torch.cuda.device_count()
    ):
        torch.cuda.set_rng_state_all(state["cuda"])
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    n = state["numpy"]
    np.random.set_state(
        (n["name"], n["key"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached"])
    )

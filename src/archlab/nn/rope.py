"""Rotary position embedding (RoPE, Su et al., arXiv 2104.09864).

Each pair of dimensions of q and k is rotated by the angle p * w_i, w_i = theta^(-2i/d_rot), so that
q_m . k_n depends only on m - n. Options:
- layout `half` (rotate_half: pairs (i, i + d_rot/2), as Llama in transformers, NeoX, nanochat) or
  `interleaved` (pairs (2i, 2i+1), as the RoFormer paper, the seeds' code and GPT-J);
- partial rotary: only the first d_rot = fraction * head_dim dims rotate, the rest pass through (NeoX 25%);
- a frequency schedule from `ROPE_SCALINGS`: pure functions (d_rot, theta, scaling) -> (inv_freq,
  attention_factor), with attention_factor multiplying cos and sin (YaRN's temperature).

Shapes: x (B, H, T, Dh); positions (B, T); cos/sin (B, 1, T, d_rot/2).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn as nn

ROPE_LAYOUTS = ("half", "interleaved")


@dataclass(frozen=True)
class RopeScaling:
    """How to stretch RoPE's frequencies past the training length; `kind` is a key of ROPE_SCALINGS."""

    kind: str = "none"  # "none" keeps theta^(-2i/d); more schedules are registered in ROPE_SCALINGS
    factor: float = 1.0  # context extension ratio s


ScalingFn = Callable[[int, float, RopeScaling], tuple[torch.Tensor, float]]


def base_inv_freq(d_rot: int, theta: float) -> torch.Tensor:
    """w_i = theta^(-2i/d_rot), i = 0..d_rot/2-1, in float64 for exactness before the cast."""
    return theta ** (-torch.arange(0, d_rot, 2, dtype=torch.float64) / d_rot)


def no_scaling(d_rot: int, theta: float, scaling: RopeScaling) -> tuple[torch.Tensor, float]:
    return base_inv_freq(d_rot, theta), 1.0


ROPE_SCALINGS: dict[str, ScalingFn] = {"none": no_scaling}


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str) -> torch.Tensor:
    """Rotate the first 2 * cos.size(-1) dims of x; the rest pass through unchanged."""
    d_rot = 2 * cos.size(-1)
    x_rot, x_pass = x[..., :d_rot], x[..., d_rot:]
    if layout == "half":
        x1, x2 = x_rot.chunk(2, dim=-1)  # (B, H, T, d_rot/2) each
        rotated = torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
    else:
        x1, x2 = x_rot[..., 0::2], x_rot[..., 1::2]
        rotated = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)
    return torch.cat((rotated.to(x.dtype), x_pass), dim=-1)  # (B, H, T, Dh)


class RotaryEmbedding(nn.Module):
    """cos/sin of p * inv_freq for given positions; holds no per-length cache, so any position works."""

    def __init__(self, d_rot: int, theta: float, layout: str = "half", scaling: RopeScaling | None = None) -> None:
        super().__init__()
        self.d_rot, self.theta, self.layout = d_rot, theta, layout
        self.scaling = scaling or RopeScaling()
        inv_freq, self.attention_factor = ROPE_SCALINGS[self.scaling.kind](d_rot, theta, self.scaling)
        self.register_buffer("inv_freq", inv_freq.float(), persistent=False)

    def forward(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """positions (B, T) -> cos, sin (B, 1, T, d_rot/2) in float32."""
        angles = positions.float()[..., None] * self.inv_freq  # (B, T, d_rot/2)
        cos = angles.cos() * self.attention_factor
        sin = angles.sin() * self.attention_factor
        return cos.unsqueeze(1), sin.unsqueeze(1)

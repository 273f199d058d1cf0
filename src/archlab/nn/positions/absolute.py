"""Absolute positions, added to the token embedding (the value of `ModelConfig.position`).

- `sinusoidal`: PE(p, 2i) = sin(p / 10000^(2i/D)), PE(p, 2i+1) = cos(...) (Vaswani et al. 2017,
  arXiv 1706.03762). Computed from the positions, so it has no length limit.
- `learned`: a trained table of `max_seq_len` rows (GPT-2).
RoPE is nn/positions/rope.py, the attention biases nn/positions/biases.py; `none` (NoPE) adds
nothing: the causal mask alone carries order.

Shapes: positions (B, T) int; outputs (B, T, D).
"""

from __future__ import annotations

import torch
import torch.nn as nn

SINUSOID_BASE = 10000.0  # the base of the original transformer


def sinusoidal_embedding(
    positions: torch.Tensor, dim: int, base: float = SINUSOID_BASE
) -> torch.Tensor:
    """Interleaved sin/cos table for `positions` (B, T) -> (B, T, dim), computed in float32."""
    i = torch.arange(0, dim, 2, device=positions.device, dtype=torch.float32)  # (D/2,)
    angles = positions.float()[..., None] / base ** (i / dim)  # (B, T, D/2)
    pe = torch.stack((angles.sin(), angles.cos()), dim=-1)  # (B, T, D/2, 2)
    return pe.flatten(-2)[..., :dim]  # (B, T, D)


class SinusoidalPositions(nn.Module):
    """Fixed sinusoidal absolute positions (no parameters)."""

    def __init__(self, dim: int, max_seq_len: int) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        return sinusoidal_embedding(positions, self.dim)


class LearnedPositions(nn.Module):
    """A learned table of absolute positions; positions past the table are an error, not a wrap."""

    def __init__(self, dim: int, max_seq_len: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(max_seq_len, dim))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, positions: torch.Tensor) -> torch.Tensor:
        return nn.functional.embedding(positions, self.weight)  # (B, T, D)

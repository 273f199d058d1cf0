"""Attention biases from positions, added to the scores (the value of `ModelConfig.position`).

- `relative`: a learned scalar bias per head and bucket of the distance i - j, shared by all
  layers, with exact buckets for short distances and log-spaced ones up to `max_distance`
  (T5, arXiv 1910.10683).
- `alibi`: a fixed bias -m_h * (i - j) with geometric head slopes m_h (Press et
  al., arXiv 2108.12409).

Shapes: positions (B, T) int; biases (1, H, T, S) over query i and key j.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn


def relative_bucket(distance: torch.Tensor, num_buckets: int, max_distance: int) -> torch.Tensor:
    """T5's causal bucket of a distance i - j >= 0: exact below num_buckets/2, then
    log-spaced to max_distance."""
    n = distance.clamp_min(0)
    exact = num_buckets // 2
    log_ratio = torch.log(n.float().clamp_min(1) / exact) / math.log(max_distance / exact)
    large = exact + (log_ratio * (num_buckets - exact)).long()
    large = large.clamp_max(num_buckets - 1)
    return torch.where(n < exact, n, large)


class RelativePositionBias(nn.Module):
    """T5-style learned bias per (head, distance bucket), one table shared by every layer."""

    def __init__(self, n_heads: int, num_buckets: int = 32, max_distance: int = 128) -> None:
        super().__init__()
        self.num_buckets, self.max_distance = num_buckets, max_distance
        self.weight = nn.Parameter(torch.empty(num_buckets, n_heads))
        nn.init.normal_(self.weight, std=0.02)

    def forward(self, distance: torch.Tensor) -> torch.Tensor:
        """distance (T, S) = query slot - key slot -> bias (1, H, T, S)."""
        buckets = relative_bucket(distance, self.num_buckets, self.max_distance)
        return self.weight[buckets].permute(2, 0, 1).unsqueeze(0)


def alibi_slopes(n_heads: int) -> torch.Tensor:
    """Head slopes 2^(-8h/n) for h = 1..n; for n not a power of two, the
    ALiBi paper's interleaving."""

    def power_of_two(n: int) -> list[float]:
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(n_heads).is_integer():
        return torch.tensor(power_of_two(n_heads))
    closest = 2 ** math.floor(math.log2(n_heads))
    extra = power_of_two(2 * closest)[0::2][: n_heads - closest]
    return torch.tensor(power_of_two(closest) + extra)


class ALiBi(nn.Module):
    """Linear distance penalty -m_h * (i - j); no parameters."""

    def __init__(self, n_heads: int) -> None:
        super().__init__()
        self.register_buffer("slopes", alibi_slopes(n_heads), persistent=False)

    def reset_buffers(self) -> None:
        """Recompute the slopes in place (after `to_empty` from the meta device
        they hold garbage)."""
        self.slopes.copy_(alibi_slopes(self.slopes.numel()))

    def forward(self, distance: torch.Tensor) -> torch.Tensor:
        """distance (T, S) = query slot - key slot -> bias (1, H, T, S)."""
        return -(self.slopes[:, None, None] * distance.clamp_min(0).float()).unsqueeze(0)

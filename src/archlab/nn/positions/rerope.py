"""ReRoPE and Leaky ReRoPE: RoPE with the relative position remapped per (query, key).

Su Jianlin, "Transformer upgrade 12: ReRoPE for infinite extrapolation" (kexue.fm/archives/9708) and
the follow-ups 9728 / 9731. With window W and slope 1/k, the relative position attention sees for
query m and key n (m >= n) is
    P(m, n) = m - n                      if m - n < W   (exact, as in training)
    P(m, n) = W + (m - n - W) / k        otherwise      (leaky_rerope; rerope is k = inf: P = W)
so no distance past the training length is ever fed to RoPE. P is not a difference of two per-token
positions, so one rotation of q and k cannot produce it; as Su's reference code does, two score
matrices are computed and merged per (m, n):
    in-window   q rotated at m,                k rotated at n       -> m - n
    outside     q rotated at W (1 - 1/k) + m/k, k rotated at n / k  -> W + (m - n - W) / k
(rerope: q at W, k unrotated). Inverse Leaky ReRoPE ("Transformer upgrade 13",
kexue.fm/archives/9728) is the same plan with slope s = 1/k > 1, in training mode only
(`RopeKind.training_only`): q at W (1 - s) + s m, k at s n, P = W + (m - n - W) s; in eval mode the
model is plain RoPE. The cache therefore holds unrotated keys and every step rotates all of them
(twice for leaky), computes two score matrices over all keys, and takes the eager attention path:
docs/long-context.md measures what that costs per decoding step.

Shapes: B batch, H query heads, K KV heads, T queries, S keys, Dh head dim, d_rot rotary dims.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from archlab.nn.positions.rope import RotaryEmbedding, apply_rope


def relative_positions(
    q_pos: torch.Tensor, k_pos: torch.Tensor, window: int, factor: float
) -> torch.Tensor:
    """P(m, n) of the module doc for q_pos (B, T) and k_pos (B|1, S) -> (B, T, S) in float64; factor
    = inf is ReRoPE. Used by the tests' reference and by `archlab plot rope`."""
    d = (q_pos[:, :, None] - k_pos[:, None, :]).double()
    beyond = (
        window + (d - window) / factor
        if math.isfinite(factor)
        else torch.full_like(d, float(window))
    )
    return torch.where(d < window, d, beyond)


@dataclass(frozen=True)
class ReRopePositions:
    """The ReRoPE plan of one forward (a `ScoringPlan` of nn/positions/rope.py, built by
    `rerope_plan`, asked by attention): q and k stay unrotated at projection time and in the cache;
    `scores` computes the two rotations' score matrices and `in_window` picks per score."""

    q_cos: torch.Tensor  # (B, 1, T, d_rot) queries at m, like q (B, H, T, Dh)
    q_sin: torch.Tensor
    q_cos_far: torch.Tensor  # (B, 1, T, d_rot) queries at W (1 - 1/k) + m / k
    q_sin_far: torch.Tensor
    k_cos: torch.Tensor  # (B, 1, S, d_rot) keys at n
    k_sin: torch.Tensor
    # (B, 1, S, d_rot) keys at n / k; None for rerope (keys unrotated)
    k_cos_far: torch.Tensor | None
    k_sin_far: torch.Tensor | None
    in_window: torch.Tensor  # bool (B, 1, T, S): m - n < W
    layout: str
    # keys stay unrotated: `rotate_both` rotates them per step
    rotates_cached_keys: ClassVar[bool] = False
    # two score matrices merged per (m, n): `scores`, eager kernel
    computes_scores: ClassVar[bool] = True

    def rotate_queries_keys(
        self, q: torch.Tensor, k: torch.Tensor, qk: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return q, k  # both rotations happen in `rotate_both`, after the cache update

    def rotate_cached_keys(self, k: torch.Tensor) -> torch.Tensor:
        return k

    def projection_tables(self, dtype: torch.dtype) -> None:
        return None  # no rotation at projection time

    def rotate_both(
        self, q: torch.Tensor, k: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """q (B, H, T, Dh), k (B, K, S, Dh) unrotated -> (q near, k near, q far, k far)."""
        q_near = apply_rope(q, self.q_cos, self.q_sin, self.layout)
        k_near = apply_rope(k, self.k_cos, self.k_sin, self.layout)
        q_far = apply_rope(q, self.q_cos_far, self.q_sin_far, self.layout)
        k_far = (
            k
            if self.k_cos_far is None
            else apply_rope(k, self.k_cos_far, self.k_sin_far, self.layout)
        )
        return q_near, k_near, q_far, k_far

    def rows(self, start: int, stop: int, keys: int) -> ReRopePositions:
        """The plan of queries start:stop attending to the first `keys` keys (the eager
        kernel's query chunks)."""

        def q(t: torch.Tensor) -> torch.Tensor:
            return t[:, :, start:stop]

        def k(t: torch.Tensor | None) -> torch.Tensor | None:
            return None if t is None else t[:, :, :keys]

        return ReRopePositions(
            q(self.q_cos),
            q(self.q_sin),
            q(self.q_cos_far),
            q(self.q_sin_far),
            k(self.k_cos),
            k(self.k_sin),
            k(self.k_cos_far),
            k(self.k_sin_far),
            self.in_window[:, :, start:stop, :keys],
            self.layout,
        )

    def scores(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """q (B, H, T, Dh), k (B, K, S, Dh), unrotated -> q_m . R(P(m, n)) k_n (B, H, T, S), query
        head h reading K/V head h // (H / K). Keys are rotated once per K/V head and the H / K query
        heads of a group are multiplied with them as one (group * T) row block, so GQA / MQA never
        copy the cache per query head."""
        q_near, k_near, q_far, k_far = self.rotate_both(q, k)
        B, H, T, Dh = q.shape
        K = k.shape[1]

        def grouped(qr: torch.Tensor, kr: torch.Tensor) -> torch.Tensor:
            return (qr.reshape(B, K, H // K * T, Dh) @ kr.transpose(-2, -1)).view(B, H, T, -1)

        return torch.where(self.in_window, grouped(q_near, k_near), grouped(q_far, k_far))


def rerope_plan(
    rotary: RotaryEmbedding, positions: torch.Tensor, key_positions: torch.Tensor
) -> ReRopePositions:
    """The plan for new tokens at positions (B, T) attending to keys at key_positions (B|1, S)."""
    s = rotary.scaling
    window = s.window
    # k: the far region's positions grow 1/k per token (leaky 1/factor, inverse leaky factor > 1,
    # rerope 0)
    k = {"leaky_rerope": s.factor, "inv_leaky_rerope": 1 / s.factor}.get(s.kind, math.inf)
    key_positions = key_positions.expand(positions.shape[0], -1)  # (B, S)

    def tables(pos: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        cos, sin = rotary(pos)  # (B, n, 1, d_rot), float positions allowed
        return cos.transpose(1, 2), sin.transpose(1, 2)  # (B, 1, n, d_rot)

    q_cos, q_sin = tables(positions)
    k_cos, k_sin = tables(key_positions)
    if math.isinf(k):
        q_cos_far, q_sin_far = tables(torch.full_like(positions, window))
        k_cos_far = k_sin_far = None
    else:
        q_cos_far, q_sin_far = tables(window * (1 - 1 / k) + positions.double() / k)
        k_cos_far, k_sin_far = tables(key_positions.double() / k)
    # (B, 1, T, S)
    in_window = (positions[:, :, None] - key_positions[:, None, :] < window)[:, None]
    return ReRopePositions(
        q_cos,
        q_sin,
        q_cos_far,
        q_sin_far,
        k_cos,
        k_sin,
        k_cos_far,
        k_sin_far,
        in_window,
        rotary.layout,
    )

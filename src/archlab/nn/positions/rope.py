"""Rotary position embedding (RoPE, Su et al., arXiv 2104.09864) and its frequency schedules.

Each pair of dimensions of q and k is rotated by the angle p * w_i, w_i = theta^(-2i/d_rot), so that
q_m . k_n depends only on m - n. Options:
- layout `half` (rotate_half: pairs (i, i + d_rot/2), as Llama in transformers, NeoX, nanochat) or
  `interleaved` (pairs (2i, 2i+1), as the RoFormer paper and GPT-J);
- partial rotary: only the first d_rot = fraction * head_dim dims rotate, the rest pass
  through (NeoX 25%);
- a frequency schedule per scaling kind (nn/positions/frequencies.py: PI, NTK, by-parts,
  Dynamic NTK, YaRN, Llama 3, NTK-mixed; ReRoPE's kinds keep the frequencies and
  remap positions, nn/positions/rerope.py).

How q and k get their positions in one forward is a `PositionPlan` (the protocol every plan follows;
attention asks it and never tests its class): `RopePositions`, built by `RotaryEmbedding.plan` for
nn/attention/inputs.py, is asked `rotate_queries_keys` at projection time and `rotate_cached_keys`
after the cache update. Static schedules rotate q and k together (one call) and cache rotated keys;
a length-dependent one (`dynamic`) caches keys unrotated and rotates all of them at the current
length after the update, since a key rotated at an earlier length would keep that length's base.

Shapes: x (B, T, H, Dh) (or any layout the tables broadcast over); positions (B, T); cos/sin (B, T,
1, d_rot); seq_len (B,); key positions (B|1, S) and their tables (B, 1, S, d_rot), S the keys a
layer attends to.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Protocol

import torch
import torch.nn as nn

from archlab.nn.positions.scaling import ROPE_KINDS, RopeScaling

# longest precomputed cos/sin table (2 x 8192 x d_rot floats); later positions are computed
MAX_TABLE_POSITIONS = 8192


def rope_partner(x: torch.Tensor, layout: str) -> torch.Tensor:
    """Each dim's partner in its rotation pair: [x2 | x1] for halves, (x1, x0, x3, x2,
    ...) for pairs."""
    if layout == "half":
        return x.roll(x.size(-1) // 2, dims=-1)
    return x.unflatten(-1, (-1, 2)).flip(-1).flatten(-2)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str) -> torch.Tensor:
    """x * cos + partner(x) * sin on the first cos.size(-1) dims of x; the rest
    pass through unchanged.

    cos and sin are the full-width tables of `RotaryEmbedding` (sin carries the rotation's minus
    sign), so a rotation costs three tensor ops, where the textbook two-halves form costs ten; the
    arithmetic is the same: [x1 cos - x2 sin | x2 cos + x1 sin] for halves."""
    d_rot = cos.size(-1)
    whole = d_rot == x.size(-1)
    x_rot = x if whole else x[..., :d_rot]
    rotated = torch.addcmul(x_rot * cos, rope_partner(x_rot, layout), sin)
    # float32 tables, bf16 activations
    rotated = rotated if rotated.dtype == x.dtype else rotated.to(x.dtype)
    if whole:  # whole head rotates: no pass-through slice and concat (a copy per call)
        return rotated
    return torch.cat((rotated, x[..., d_rot:]), dim=-1)


def full_tables(
    cos: torch.Tensor, sin: torch.Tensor, layout: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-pair cos/sin (..., d_rot/2) -> per-dim tables (..., d_rot) in the layout's order, with
    the minus sign of the rotation on the first element of each pair."""
    if layout == "half":
        return torch.cat((cos, cos), dim=-1), torch.cat((-sin, sin), dim=-1)
    return cos.repeat_interleave(2, dim=-1), torch.stack((-sin, sin), dim=-1).flatten(-2)


class RotaryEmbedding(nn.Module):
    """cos/sin of p * inv_freq for given positions; holds no per-length cache, so
    any position works.

    For a length-dependent schedule (`dynamic`) the frequencies are recomputed per call from each
    row's length l_b = seq_len[b] (default: its largest position + 1). transformers uses one l for
    the whole batch (the max) and keeps it between calls; per row is what makes a left-padded batch
    equal each row run alone, and equal for B = 1.
    """

    def __init__(
        self,
        d_rot: int,
        theta: float,
        layout: str = "half",
        scaling: RopeScaling | None = None,
        max_positions: int = 0,
    ) -> None:
        super().__init__()
        self.d_rot, self.theta, self.layout = d_rot, theta, layout
        self.scaling = scaling or RopeScaling()
        self.kind = ROPE_KINDS[self.scaling.kind]
        self.frequencies = self.kind.frequency_function()
        self.length_dependent = self.kind.length_dependent
        inv_freq, self.attention_factor = self.frequencies(d_rot, theta, self.scaling)
        self.register_buffer("inv_freq", inv_freq.float(), persistent=False)
        # tables for positions 0..n-1, gathered instead of recomputed (ten small ops per forward,
        # which is a few percent of a decode step); length-dependent schedules cannot have one
        n = 0 if self.length_dependent else min(max_positions, MAX_TABLE_POSITIONS)
        # (n, heads=1, d_rot)
        self.register_buffer("cos_table", torch.empty(n, 1, d_rot), persistent=False)
        self.register_buffer("sin_table", torch.empty(n, 1, d_rot), persistent=False)
        self.reset_buffers()

    def reset_buffers(self) -> None:
        """Recompute inv_freq and the tables in place (after `to_empty` from the meta device
        they hold garbage)."""
        if self.inv_freq.is_meta:
            return
        inv_freq, _ = self.frequencies(self.d_rot, self.theta, self.scaling)
        self.inv_freq.copy_(inv_freq.float())
        positions = torch.arange(self.cos_table.shape[0], device=self.inv_freq.device)
        cos, sin = self._tables(positions, self.inv_freq)
        self.cos_table.copy_(cos.unsqueeze(1))
        self.sin_table.copy_(sin.unsqueeze(1))

    def _tables(
        self, positions: torch.Tensor, inv_freq: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Full-width cos/sin (..., d_rot) of positions * inv_freq, times the attention factor."""
        angles = positions.float()[..., None] * inv_freq  # (..., d_rot/2)
        cos, sin = angles.cos(), angles.sin()
        if self.attention_factor != 1.0:
            cos, sin = cos * self.attention_factor, sin * self.attention_factor
        return full_tables(cos, sin, self.layout)

    def forward(
        self,
        positions: torch.Tensor,
        seq_len: torch.Tensor | None = None,
        max_position: int | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """positions (B, T), seq_len (B,) or None -> cos, sin (B, T, 1, d_rot) in float32:
        full-width tables for `apply_rope` (see `full_tables`), the head axis third to broadcast
        over q and k in the (B, T, heads, Dh) layout of the fused projection. `max_position`, a
        bound on the positions known without reading them (no host sync), lets positions inside the
        precomputed table be gathered."""
        if max_position is not None and max_position < self.cos_table.shape[0]:
            return self.cos_table[positions], self.sin_table[positions]  # (B, T, 1, d_rot)
        if self.length_dependent:
            seq_len = positions.amax(dim=-1) + 1 if seq_len is None else seq_len  # (B,)
            inv_freq, _ = self.frequencies(self.d_rot, self.theta, self.scaling, seq_len)
            cos, sin = self._tables(positions, inv_freq.float()[:, None, :])  # (B, T, d_rot)
        else:
            cos, sin = self._tables(positions, self.inv_freq)
        return cos.unsqueeze(2), sin.unsqueeze(2)

    @property
    def remaps_positions(self) -> bool:
        """Whether this forward remaps relative positions (the ReRoPE plan of
        nn/positions/rerope.py): a remapping kind, but one that is `training_only` (inverse Leaky
        ReRoPE) only in training mode, as dropout, and a scaling with `inference_only` (HWFA2's full
        layers) only in eval mode."""
        if not self.kind.remaps_positions:
            return False
        if self.kind.training_only:
            return self.training
        return not (self.scaling.inference_only and self.training)

    @property
    def mode_dependent(self) -> bool:
        """Whether training and eval mode give q and k their positions differently
        (`remaps_positions` in one mode only: a `training_only` kind, or a scaling with
        `inference_only`), so keys cached in one mode (unrotated for the remap, rotated for plain
        RoPE) mean something else in the other."""
        return self.kind.remaps_positions and (
            self.kind.training_only or self.scaling.inference_only
        )

    @property
    def caches_unrotated_keys(self) -> bool:
        """Whether a cached key's rotation depends on later steps, so the cache must hold it
        unrotated: a length-dependent schedule, or a position remap (ReRoPE) that rotates each key
        two ways per query."""
        return self.length_dependent or self.remaps_positions

    def plan(
        self,
        positions: torch.Tensor,
        bound: int | None = None,
        key_positions: torch.Tensor | None = None,
    ) -> RopePositions:
        """The rotary plan of one forward. positions (B, T) of the new tokens; `bound` as
        `max_position` of `forward`. `key_positions` (B|1, S), the positions of every key a layer
        will attend to (cached and new), is needed only when `caches_unrotated_keys` and a cache is
        used: then the plan rotates q alone at projection time and all S keys after the cache
        update, every one at each row's current length."""
        if key_positions is None or not self.caches_unrotated_keys:
            return RopePositions(*self(positions, max_position=bound), self.layout)
        seq_len = positions.amax(dim=-1) + 1  # (B,) each row's length after this step
        cos, sin = self(positions, seq_len)  # (B, T, 1, d_rot)
        # (B, S, 1, d_rot)
        key_cos, key_sin = self(key_positions.expand(positions.shape[0], -1), seq_len)
        return RopePositions(
            cos, sin, self.layout, key_cos.transpose(1, 2), key_sin.transpose(1, 2)
        )


class PositionPlan(Protocol):
    """How one forward gives q and k their positions, built once per kind of layer
    (nn/attention/inputs.py) and asked by attention, which never tests a plan's class.
    `RopePositions` below; ReRoPE's in nn/positions/rerope.py."""

    # the cache holds keys unrotated: `rotate_cached_keys` rotates every key after the cache update
    rotates_cached_keys: bool
    # the plan computes q . k itself (`scores(q, k)`, as `ScoringPlan`), so attention runs the eager
    # kernel with it
    computes_scores: bool
    layout: str  # a ROPE_LAYOUTS entry: how its tables pair the dims

    def rotate_queries_keys(
        self, q: torch.Tensor, k: torch.Tensor, qk: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """q (B, T, H, Dh), k (B, T, K, Dh) at projection time -> as the cache and the kernel
        should see them."""
        ...

    def rotate_cached_keys(self, k: torch.Tensor) -> torch.Tensor:
        """k (B, K, S, Dh), every key a layer reads after the cache update -> rotated where
        the plan waited."""
        ...

    def projection_tables(self, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor] | None:
        """cos, sin (B, T, 1, d_rot) in `dtype` when rotating q and k at projection time
        by one pair of tables is all the plan does (a fused split + rotate may then do it:
        nn/fast/install.py); else None."""
        ...


class ScoringPlan(PositionPlan, Protocol):
    """A plan that computes its own scores (`computes_scores` is True)."""

    def scores(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """q (B, H, T, Dh), k (B, K, S, Dh) -> unscaled q . k scores (B, H, T, S)."""
        ...

    def rows(self, start: int, stop: int, keys: int) -> ScoringPlan:
        """The plan of queries start:stop over the first `keys` keys (the eager kernel scores
        in query chunks)."""
        ...


@dataclass(frozen=True)
class RopePositions:
    """How one forward rotates q and k: the new tokens' tables, and, when the cache holds
    unrotated keys, the tables of every key a layer attends to (`RotaryEmbedding.plan` builds it;
    attention asks it)."""

    cos: torch.Tensor  # (B, T, 1, d_rot) new tokens, for q (and k when keys are cached rotated)
    sin: torch.Tensor
    layout: str  # a ROPE_LAYOUTS entry
    # (B, 1, S, d_rot) all keys after the cache update, like k (B, K, S, Dh)
    key_cos: torch.Tensor | None = None
    key_sin: torch.Tensor | None = None
    # whether `rotate_cached_keys` does anything: a field, so attention skips the call (a decode
    # step's Python work is most of its time at small widths)
    rotates_cached_keys: bool = field(init=False)
    # dtype -> (cos, sin)
    _cast: dict = field(init=False, default_factory=dict, repr=False, compare=False)
    computes_scores: ClassVar[bool] = False  # q . k of the rotated vectors: any kernel

    def __post_init__(self) -> None:
        object.__setattr__(self, "rotates_cached_keys", self.key_cos is not None)

    def tables(self, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """The new tokens' cos and sin in `dtype`: bf16 activations under autocast rotate with bf16
        tables in the fused training path (as transformers' Llama casts its tables to the
        activations' dtype), cast once per forward for every layer that shares this plan."""
        if dtype == self.cos.dtype:
            return self.cos, self.sin
        if dtype not in self._cast:
            self._cast[dtype] = (self.cos.to(dtype), self.sin.to(dtype))
        return self._cast[dtype]

    def projection_tables(self, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor] | None:
        """The new tokens' tables in `dtype` when keys are rotated at projection time (else
        None: they wait)."""
        return None if self.rotates_cached_keys else self.tables(dtype)

    def rotate_queries_keys(
        self, q: torch.Tensor, k: torch.Tensor, qk: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """q (B, T, H, Dh), k (B, T, K, Dh) at projection time -> q rotated, and k rotated unless
        keys wait for `rotate_cached_keys`. `qk` (B, T, H + K, Dh), when given, is [q | k] as one
        tensor (the fused projection's view): one RoPE call then rotates both, half the small ops of
        a decode step."""
        if self.rotates_cached_keys:  # keys are cached unrotated and rotated after the update
            return apply_rope(q, self.cos, self.sin, self.layout), k
        if qk is not None:
            return apply_rope(qk, self.cos, self.sin, self.layout).split(
                [q.shape[2], k.shape[2]], dim=2
            )
        return apply_rope(q, self.cos, self.sin, self.layout), apply_rope(
            k, self.cos, self.sin, self.layout
        )

    def rotate_cached_keys(self, k: torch.Tensor) -> torch.Tensor:
        """k (B, K, S, Dh), every key a layer attends to after the cache update: rotated here only
        when the cache holds unrotated keys (else they were rotated at projection time and are
        returned as they are)."""
        if not self.rotates_cached_keys:
            return k
        # all S keys at the current length
        return apply_rope(k, self.key_cos, self.key_sin, self.layout)

"""`AttentionInputs`: what attention needs besides x, built once per forward per kind of layer.

Layers of one kind (sliding window, RoPE "global" / "local" / None) share one `AttentionInputs`:
the positions plan (`PositionPlan`, nn/positions/rope.py; the ReRoPE plan of nn/positions/rerope.py
where the kind remaps positions), the causal / window / padding mask over the key slots the kind
reads (None where SDPA's is_causal is exact), an additive position bias (T5 relative, ALiBi; a
linear kernel gets ALiBi's slopes instead, as it never forms the (T, S) scores) and the log-n factor
per query (Su, kexue.fm/archives/8823; at least 1 with attn_logn_clip, kexue.fm/archives/9708;
dynamic cosine attention's 4 log n, 9859). How each is chosen: docs/architecture.md, "From config
to logits". A new way of giving positions is another plan here, not another thread through
model and attention.

Shapes: B batch, T new tokens, S keys a layer reads (cache + new), H heads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn

from archlab.nn.config import ModelConfig
from archlab.nn.functional import causal_mask
from archlab.nn.kv_cache import KVCache
from archlab.nn.positions.rerope import rerope_plan
from archlab.nn.positions.rope import PositionPlan, RotaryEmbedding

Kind = tuple[int | None, str | None]  # (sliding window or None, RoPE name or None) of a layer


def build_rotaries(c: ModelConfig) -> dict[str, RotaryEmbedding | None]:
    """The model's RoPE modules by name: "global" (None without RoPE) and "local", the window
    layers' RoPE when it differs (their own theta and, with rope.local_scaling off, unscaled: Gemma
    3; None otherwise). The model owns them; a probe of positions alone builds them here too."""
    rope, d_rot = c.rope, c.rope_dim
    if rope is None:
        return {"global": None, "local": None}
    rotary = RotaryEmbedding(d_rot, rope.theta, rope.layout, rope.scaling, c.max_seq_len)
    local_theta, local_scaling = rope.local
    local = (
        RotaryEmbedding(d_rot, local_theta, rope.layout, local_scaling, c.max_seq_len)
        if any(c.layer_rope(i) == "local" for i in range(c.n_layers))
        else None
    )
    return {"global": rotary, "local": local}


@dataclass
class AttentionInputs:
    """What a layer's attention needs besides x (see the module docstring)."""

    # how q and k get their positions; None without RoPE (or a NoPE layer)
    rope: PositionPlan | None
    mask: torch.Tensor | None  # bool (B|1, 1, T, S), True = visible; None = plain causal
    bias: torch.Tensor | None  # additive (1, H, T, S) position bias, or None
    cache: KVCache | None
    # (B, 1, T, 1) log-n factor per query (attn_logn), or None
    query_scale: torch.Tensor | None = None
    # (H,) ALiBi's slopes for a linear kernel (bias is then None), or None
    slopes: torch.Tensor | None = None


class AttentionInputsBuilder:
    """Builds each layer's `AttentionInputs` of one forward from the model's position modules (owned
    by the model, so their parameters keep their names: `rotary`, `rotary_local`, `rel_bias`)."""

    def __init__(
        self, config: ModelConfig, rotaries: dict[str, RotaryEmbedding], rel_bias: nn.Module | None
    ) -> None:
        c = config
        self.rotaries = rotaries
        # softmax adds the (T, S) bias; a linear kernel applies ALiBi itself from its slopes (the
        # config refuses T5's bias there), since a (T, S) tensor would undo its linear cost
        softmax = c.linear_kernel is None
        self.rel_bias, self.kernel_bias = (rel_bias, None) if softmax else (None, rel_bias)
        self.n_layers = c.n_layers
        self.logn_base = (c.attn_logn_base or c.max_seq_len) if c.attn_logn else None
        if c.dynamic_cosine:  # 4 log(N/2) x log(n) / log(N/2) = 4 log n
            self.logn_base = c.max_seq_len / 2
        # max(1, .): log-n at inference only, queries past L scaled
        self.logn_clip = c.attn_logn_clip
        # each layer's sliding window (None: full attention); a KVCache keeps that many slots for it
        self.layer_windows = tuple(
            c.sliding_window if c.layer_is_sliding(i) else None for i in range(c.n_layers)
        )
        self.layer_ropes = tuple(c.layer_rope(i) for i in range(c.n_layers))
        self.layer_kinds: tuple[Kind, ...] = tuple(zip(self.layer_windows, self.layer_ropes))
        # the distinct kinds, each built once per forward
        self.kinds = tuple(dict.fromkeys(self.layer_kinds))

    def __call__(
        self, positions: torch.Tensor, cache: KVCache | None = None, bound: int | None = None
    ) -> list[AttentionInputs]:
        """Per layer, for new tokens at positions (B, T); `bound` bounds them without reading them.
        A static RoPE plan is shared by every kind with that RoPE; one whose cached keys wait
        (Dynamic NTK, ReRoPE) needs each kind's key positions, so each kind builds its own."""
        shared = {}
        for name in dict.fromkeys(r for r in self.layer_ropes if r is not None):
            if cache is None or not self.rotaries[name].caches_unrotated_keys:
                shared[name] = self.plan(self.rotaries[name], positions, bound)
        # every layer alike (no comprehension: a decode step's Python work counts)
        if len(self.kinds) == 1:
            kind = self.kinds[0]
            return [
                self.kind_inputs(positions, cache, bound, kind, shared.get(kind[1]))
            ] * self.n_layers
        kinds = {
            kind: self.kind_inputs(positions, cache, bound, kind, shared.get(kind[1]))
            for kind in self.kinds
        }
        return [kinds[kind] for kind in self.layer_kinds]

    def kind_inputs(
        self,
        positions: torch.Tensor,
        cache: KVCache | None,
        bound: int | None,
        kind: Kind,
        rope: PositionPlan | None,
    ) -> AttentionInputs:
        """Inputs for the layers of `kind`: the keys they read are token slots 0..offset+T-1 in
        order, or with a ring cache past the window those `KVCache.key_slots` lists. `rope` is the
        shared plan, if any."""
        window, rope_name = kind
        t, device = positions.shape[1], positions.device
        offset = cache.pos if cache is not None else 0
        key_mask = cache.key_mask if cache is not None else None
        wrapped = (
            window is not None
            and cache is not None
            and cache.has_rings
            and not cache.reads_in_order(t, window)
        )
        # a mask tensor is needed for padding, for a chunk after cached keys and past the window;
        # otherwise SDPA's is_causal (or, for one query, no mask at all) is exact. One query reading
        # a ring reads exactly its window; a chunk reading kept + new keys needs the window mask.
        if wrapped:
            needs_mask = key_mask is not None or t > 1
        else:
            needs_mask = (
                key_mask is not None
                or (offset > 0 and t > 1)
                or (window is not None and offset + t > window)
            )
        # keys cached unrotated: tables for every key read
        unrotated = rope_name is not None and rope is None
        # which token slot each key holds, built only when something reads it: a plain decode step
        # past the window (no padding, no bias, keys cached rotated) needs none, and skips its five
        # small ops
        needed = wrapped and (needs_mask or self.rel_bias is not None or unrotated)
        key_slots = cache.key_slots(t, window) if needed else None  # (S,) or None: slots in order
        mask = bias = None
        if needs_mask or self.rel_bias is not None:
            q_slots = torch.arange(offset, offset + t, device=device)  # (T,)
            # (S,)
            k_slots = torch.arange(offset + t, device=device) if key_slots is None else key_slots
            mask = causal_mask(q_slots, k_slots, window, key_mask) if needs_mask else None
            if self.rel_bias is not None:
                bias = self.rel_bias(q_slots[:, None] - k_slots[None, :])  # (1, H, T, S)
        if unrotated:
            rope = self.plan(
                self.rotaries[rope_name],
                positions,
                key_positions=cache.slot_positions(offset + t if key_slots is None else key_slots),
            )
        # per call: .to(device) replaces it
        slopes = None if self.kernel_bias is None else self.kernel_bias.slopes
        return AttentionInputs(rope, mask, bias, cache, self.logn_scale(positions, window), slopes)

    @staticmethod
    def plan(
        rotary: RotaryEmbedding,
        positions: torch.Tensor,
        bound: int | None = None,
        key_positions: torch.Tensor | None = None,
    ) -> PositionPlan:
        """The rotary plan: ReRoPE's two rotations for a kind that remaps positions (keys at
        `key_positions`, without a cache the new tokens themselves), else `RotaryEmbedding.plan`."""
        if rotary.remaps_positions:  # inverse Leaky ReRoPE: in training mode only
            return rerope_plan(
                rotary, positions, positions if key_positions is None else key_positions
            )
        return rotary.plan(positions, bound, key_positions)

    def logn_scale(self, positions: torch.Tensor, window: int | None) -> torch.Tensor | None:
        """log(n) / log(L) per query (B, 1, T, 1): n = the keys it sees, its position + 1 (a window
        layer: at most the window), L = attn_logn_base or max_seq_len; at least 1 with
        attn_logn_clip (at inference only)."""
        if self.logn_base is None:
            return None
        n = positions + 1 if window is None else (positions + 1).clamp_max(window)
        scale = n.double().log() / math.log(self.logn_base)
        return (scale.clamp_min(1.0) if self.logn_clip else scale).float()[:, None, :, None]

"""Causal self-attention with every attention switch archlab offers, in one module.

- MHA / GQA / MQA: `n_kv_heads` K/V heads, query head h reads K/V head h // (H / K) (Ainslie et al.
  arXiv 2305.13245; Shazeer arXiv 1911.02150).
- QK-norm: RMSNorm or LayerNorm on q and k before RoPE, per head (`head`, Qwen3) or over the whole
  projection (`proj`, OLMo 2) (Dehghani et al. arXiv 2302.05442).
- KeyNorm: keys L2-normalised, and the scale defaults to 1 since |q| now sets the temperature
  (Su, "Transformer upgrade 15", kexue.fm/archives/9859).
- attention logit softcapping: cap * tanh(scores / cap) before the mask (Gemma 2).
- sliding window: a layer may see only its last `window` keys (Mistral; Gemma 2 alternates); its cache
  keeps only the window (nn/kv_cache.py), and its mask and bias come with its `AttentionInputs`.
- RoPE (how q and k are rotated is the `RopePositions` plan of nn/rope.py, asked at projection time and after
  the cache update), or an additive bias from positions.py (relative, ALiBi), or nothing. ReRoPE (nn/rerope.py)
  builds two score matrices itself and so always takes the eager path.
- log-n scaling: q times log(n) / log(L_train), n the keys the query sees (Su, kexue.fm/archives/8823); the
  model computes the factor per query (`AttentionInputs.query_scale`), so SDPA stays usable.
The fast path is F.scaled_dot_product_attention (is_causal, no mask tensor, when nothing needs one); the
eager path in functional.eager_attention supports everything and is tested against it. In training, plain RoPE
on q and k (no QK-norm, no KeyNorm, keys rotated at projection time) runs `fused.rope_qkv`, whose backward
writes the projection's gradient in one buffer; and bf16 causal attention of up to 512 tokens runs
`fused.causal_attention` (SDPA's forward kernel, a faster backward on the CPU).

Shapes: B batch, T queries, S keys, D model width, H query heads, K KV heads, Dh head dim; slots are token
slots of the cache (query slots (T,), key slots (S,)).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from archlab.nn.config import ModelConfig
from archlab.nn.functional import attention_from_scores, eager_attention
from archlab.nn.fused import causal_attention, rope_qkv, use_causal_attention, use_fused
from archlab.nn.kv_cache import KVCache
from archlab.nn.norms import build_norm
from archlab.nn.rerope import ReRopePositions
from archlab.nn.rope import RopePositions


@dataclass
class AttentionInputs:
    """What a layer's attention needs besides x, computed once per forward by the model for each kind of
    layer (full, sliding-window): the keys a kind reads, and so its mask and bias, differ with its cache."""

    rope: RopePositions | ReRopePositions | None  # how q and k are rotated; None without RoPE (or a NoPE layer)
    mask: torch.Tensor | None  # bool (B|1, 1, T, S), True = visible; None = plain causal
    bias: torch.Tensor | None  # additive (1, H, T, S) position bias, or None
    cache: KVCache | None
    query_scale: torch.Tensor | None = None  # (B, 1, T, 1) log-n factor per query (attn_logn), or None


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """(B, K, S, Dh) -> (B, K * n_rep, S, Dh), each K/V head serving n_rep consecutive query heads."""
    if n_rep == 1:
        return x
    b, k, s, d = x.shape
    return x[:, :, None].expand(b, k, n_rep, s, d).reshape(b, k * n_rep, s, d)


class Attention(nn.Module):
    """Fused-QKV causal self-attention; see the module docstring for the switches."""

    def __init__(self, config: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        c = config
        self.layer_idx = layer_idx
        self.n_heads, self.n_kv_heads, self.head_dim = c.n_heads, c.n_kv_heads, c.head_dim
        self.qkv_proj = nn.Linear(c.d_model, (c.n_heads + 2 * c.n_kv_heads) * c.head_dim, bias=c.attn_bias)  # [q|k|v]
        self.o_proj = nn.Linear(c.n_heads * c.head_dim, c.d_model, bias=c.attn_bias)
        self.qk_norm_scope = c.qk_norm_scope
        if c.qk_norm != "none":
            q_dim, k_dim = (c.head_dim, c.head_dim) if c.qk_norm_scope == "head" else (
                c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim)
            norm_args = dict(eps=c.norm_eps, unit_offset=c.norm_unit_offset)
            self.q_norm = build_norm(c.qk_norm, q_dim, **norm_args)
            self.k_norm = build_norm(c.qk_norm, k_dim, **norm_args)
        else:
            self.q_norm = self.k_norm = None
        self.key_norm = c.key_norm
        self.plain_qk = self.q_norm is None and not c.key_norm  # q and k reach RoPE straight from the projection
        self.scale = c.resolved_attn_scale
        self.softcap = c.attn_softcap
        self.use_sdpa = c.attn_impl == "sdpa" or (c.attn_impl == "auto" and c.attn_softcap is None)
        self.dropout = c.attn_dropout

    def project(
        self, x: torch.Tensor, inp: AttentionInputs, qkv: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, ...]:
        """x (B, T, D) -> q (B, H, T, Dh), k and v (B, K, T, Dh), with norms and RoPE applied; `qkv` (B, T,
        (H + 2K) Dh) is the projection when the caller computed it (a fused parallel block's input GEMM).

        Norms and RoPE act in the (B, T, heads, Dh) layout that the fused projection gives; when q and k
        get the same treatment (no norm on either), the plan gets them as one tensor and one RoPE call
        rotates both. Keys the cache holds unrotated are left for `RopePositions.rotate_cached_keys`."""
        B, T, _ = x.shape
        H, K, Dh = self.n_heads, self.n_kv_heads, self.head_dim
        heads = (self.qkv_proj(x) if qkv is None else qkv).view(B, T, H + 2 * K, Dh)  # [q heads | k heads | v heads]
        rope = inp.rope
        if (self.plain_qk and isinstance(rope, RopePositions) and not rope.rotates_cached_keys
                and use_fused(heads)):  # training: split + RoPE, one backward (bf16 heads: bf16 tables)
            q, k, v = rope_qkv(heads, *rope.tables(heads.dtype), H, K, rope.layout)
            return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, heads, T, Dh)
        q, k, v = heads.split([H, K, K], dim=2)  # (B, T, H, Dh), (B, T, K, Dh) x 2
        if self.q_norm is not None and self.qk_norm_scope == "proj":  # over all heads at once (OLMo 2)
            q = self.q_norm(q.flatten(2)).view(B, T, H, Dh)
            k = self.k_norm(k.flatten(2)).view(B, T, K, Dh)
        elif self.q_norm is not None:  # per head (Qwen3)
            q, k = self.q_norm(q), self.k_norm(k)
        if self.key_norm:
            k = F.normalize(k, dim=-1)
        if rope is not None:
            qk = heads[:, :, : H + K] if self.plain_qk else None  # still [q | k]
            q, k = rope.rotate_queries_keys(q, k, qk)
        return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, heads, T, Dh)

    def forward(self, x: torch.Tensor, inp: AttentionInputs) -> torch.Tensor:
        q, k, v = self.project(x, inp)
        return self.o_proj(self.core(q, k, v, inp, inp.cache))  # (B, T, D)

    def core(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, inp: AttentionInputs, cache: KVCache | None
    ) -> torch.Tensor:
        """Projected q (B, H, T, Dh), k and v (B, K, T, Dh) -> the heads' output (B, T, H*Dh) before o_proj:
        query scaling, the cache, late key rotation, masks and the attention itself. A fused parallel block
        (nn/block.py) projects q, k, v itself and applies o_proj in its own output GEMM."""
        B, _, T, _ = q.shape
        if inp.query_scale is not None:
            q = q * inp.query_scale.to(q.dtype)  # scales each query's scores: log-n
        if cache is not None:
            k, v = cache.update(self.layer_idx, k, v)  # (B, K, S, Dh)
        if inp.rope is not None and inp.rope.rotates_cached_keys:
            k = inp.rope.rotate_cached_keys(k)  # (B, K, S, Dh)
        rerope = isinstance(inp.rope, ReRopePositions)
        mask = inp.mask
        if mask is None and T > 1 and (inp.bias is not None or not self.use_sdpa or rerope):
            S = k.shape[2]  # plain causal over keys in slot order, made explicit
            mask = causal_mask(torch.arange(S - T, S, device=q.device), torch.arange(S, device=q.device), None, None)
        causal = mask is None and T > 1  # SDPA's is_causal: no mask tensor needed
        dropout = self.dropout if self.training else 0.0
        if rerope:
            n_rep = self.n_heads // self.n_kv_heads
            scores = inp.rope.scores(q, k) * self.scale  # (B, H, T, S), keys rotated per K/V head
            y = attention_from_scores(scores, repeat_kv(v, n_rep), inp.bias, mask, self.softcap, dropout,
                                      self.training)
            return y.transpose(1, 2).reshape(B, T, self.n_heads * self.head_dim)
        q, k, v, bias = self._match_heads(q, k, v, inp.bias)
        if self.use_sdpa:
            y = self._sdpa(q, k, v, mask, bias, dropout, causal)
        else:
            y = eager_attention(q, k, v, self.scale, bias, mask, self.softcap, dropout, self.training)
        if T == 1:  # heads are already consecutive in memory (also in the grouped decode layout)
            return y.reshape(B, 1, self.n_heads * self.head_dim)  # (B, 1, H*Dh)
        return y.transpose(1, 2).reshape(B, T, self.n_heads * self.head_dim)  # (B, T, H*Dh)

    def _match_heads(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Pair query heads with their K/V head. For one query (decoding) the n_rep query heads of a group
        become that group's query rows, q (B, K, n_rep, Dh), so the cache is read in place; repeating K/V
        would copy the whole cache every step. Otherwise K/V are repeated to (B, H, S, Dh)."""
        n_rep = self.n_heads // self.n_kv_heads
        if n_rep == 1:
            return q, k, v, bias
        if q.shape[2] == 1:
            B, _, _, Dh = q.shape
            bias = None if bias is None else bias.reshape(bias.shape[0], self.n_kv_heads, n_rep, -1)  # (1, K, n_rep, S)
            return q.reshape(B, self.n_kv_heads, n_rep, Dh), k, v, bias
        return q, repeat_kv(k, n_rep), repeat_kv(v, n_rep), bias

    def _sdpa(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
        bias: torch.Tensor | None, dropout: float, causal: bool,
    ) -> torch.Tensor:
        """SDPA with is_causal when no mask tensor is needed, else with a bool or additive float mask."""
        if causal and dropout == 0.0 and bias is None and use_causal_attention(q, k):
            return causal_attention(q, k, v, self.scale)  # bf16 training on the CPU, T <= 512
        if bias is not None:
            bias = bias.to(q.dtype)
            mask = bias if mask is None else bias.masked_fill(~mask, float("-inf"))
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=causal, scale=self.scale
        )  # (B, H, T, Dh) or grouped (B, K, n_rep, Dh)


def causal_mask(
    q_slots: torch.Tensor, k_slots: torch.Tensor, window: int | None, key_mask: torch.Tensor | None
) -> torch.Tensor:
    """bool (B|1, 1, T, S): the query in token slot q_slots[i] sees the key in token slot k_slots[j] iff
    k <= q, within `window` (q - k < window), and k holds a real token (key_mask (B, L) by token slot); a
    query always sees itself, so padded rows stay finite. Key slots in any order (a window's ring) work."""
    q_slot, k_slot = q_slots[:, None], k_slots[None, :]  # (T, 1), (1, S)
    visible = k_slot <= q_slot
    if window is not None:
        visible = visible & (q_slot - k_slot < window)
    visible = visible[None, None]  # (1, 1, T, S)
    if key_mask is not None:
        visible = visible & (key_mask[:, None, None, k_slots] | (k_slot == q_slot))
    return visible

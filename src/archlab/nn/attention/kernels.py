"""Attention kernels: what a layer does with its projected, rotated q, k, v, behind one interface.

A kernel is a function `(q, k, v, call) -> y` registered in `ATTENTION_KERNELS`:
    q     (B, H, T, Dh)  the new tokens' queries, rotated (and log-n scaled)
    k, v  (B, K, S, Dh)  every key and value the layer attends to (the cache's and the new ones),
                         K dividing H: query head h reads K/V head h // (H / K)
    call  `KernelCall`   scale, mask, bias, softcap, dropout, a position plan's own scores (ReRoPE)
    y     (B, T, H * Dh) the heads' outputs side by side, ready for o_proj
`Attention` (nn/attention/attention.py) calls the kernel that `ModelConfig.attn_impl` names ("auto":
sdpa unless the scores are needed, i.e. softcapping); a position plan that computes its own scores
takes `eager`, the only kernel that takes `call.scores`. Kernels:
- `sdpa`: F.scaled_dot_product_attention, is_causal when no mask tensor is needed; one
  query (decoding) reads a GQA cache in place, the n_rep query heads of a group as that
  group's query rows.
- `eager`: the scores written out (functional.attention_from_scores): the reference every kernel is
  tested against, and the one that supports softcapping and plan-computed scores.
A new kernel (linear attention, say) is a function here or in
its own file, one entry in ATTENTION_KERNELS and a test against
`eager` (tests/nn/attention/test_kernels.py); docs/adding-a-variant.md.

Shapes: B batch, H query heads, K KV heads, T queries, S keys, Dh head dim.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from archlab.nn.functional import attention_from_scores, causal_mask

Scores = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (q, k) -> scores (B, H, T, S)
ChunkedScores = Callable[[int, int, int], Scores]  # (start, stop, keys) -> those queries' scores


@dataclass(frozen=True)
class KernelCall:
    """What a kernel needs besides q, k and v."""

    scale: float  # multiplies q . k
    # bool (B|1, 1, T, S), True = visible; None = causal over keys in slot order
    mask: torch.Tensor | None
    bias: torch.Tensor | None  # additive (1, H, T, S) position bias (T5 relative, ALiBi), or None
    softcap: float | None = None  # cap * tanh(scores / cap) before bias and mask (Gemma 2)
    dropout: float = 0.0  # on the probabilities; 0 outside training
    # (q, k) -> unscaled scores (B, H, T, S) from a position plan that computes its own (ReRoPE);
    # eager only
    scores: Scores | None = None
    # (start, stop, keys) -> the same plan's scores for queries start:stop over the first `keys`
    # keys, so eager can score long inputs in query chunks; None: all queries at once
    chunk: ChunkedScores | None = None


Kernel = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, KernelCall], torch.Tensor]

# Queries per chunk when a plan computes its own scores over more queries than this (ReRoPE read at
# 8x the training length): each chunk's (chunk, S) tiles stay in cache, and under the plain causal
# mask a chunk skips the keys after its last query, about half of all scores. One 2048-token forward
# of a d128 4-layer model on one core: 6.35 s in one pass, 1.80 s in chunks of 128, SDPA RoPE 0.58 s
# (benchmarks/bench_rerope_read.py).
SCORE_CHUNK = 128


def repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """(B, K, S, Dh) -> (B, K * n_rep, S, Dh), each K/V head serving n_rep
    consecutive query heads."""
    if n_rep == 1:
        return x
    b, k, s, d = x.shape
    return x[:, :, None].expand(b, k, n_rep, s, d).reshape(b, k * n_rep, s, d)


def explicit_mask(call: KernelCall, t: int, s: int, device: torch.device) -> torch.Tensor | None:
    """`call.mask`, or for T > 1 queries the plain causal mask over keys in slot order made explicit
    (the T queries are the last T of the S keys); one query with no mask sees every key."""
    if call.mask is not None or t == 1:
        return call.mask
    return causal_mask(
        torch.arange(s - t, s, device=device), torch.arange(s, device=device), None, None
    )


def merge_heads(y: torch.Tensor) -> torch.Tensor:
    """(B, H, T, Dh) -> (B, T, H * Dh)."""
    B, H, T, Dh = y.shape
    return y.transpose(1, 2).reshape(B, T, H * Dh)


def attention_scores(q: torch.Tensor, k: torch.Tensor, call: KernelCall) -> torch.Tensor:
    """The scaled scores of every query head against every key, before softcap, bias and mask: (B,
    H, T, S). A plan's own scores (ReRoPE: it reads the keys per K/V head itself), or q . k with
    each K/V head serving its n_rep query heads. The one score path: `eager` and the GAU's relu2
    kernel compute their scores here, and `Attention.scores` (what the lab's largest-logit measure
    reads) calls it too."""
    if call.scores is not None:
        return call.scores(q, k) * call.scale
    return (q @ repeat_kv(k, q.shape[1] // k.shape[1]).transpose(-2, -1)) * call.scale


def eager(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, call: KernelCall) -> torch.Tensor:
    """Scores -> softcap -> + bias -> mask -> softmax -> @ v, written out
    (functional.attention_from_scores). One query (decoding) reads a GQA cache in place,
    as `sdpa` does."""
    B, H, T, Dh = q.shape
    if call.chunk is not None and T > SCORE_CHUNK:
        return merge_heads(
            torch.cat(
                [
                    _scored_rows(q, k, v, call, a, min(a + SCORE_CHUNK, T))
                    for a in range(0, T, SCORE_CHUNK)
                ],
                dim=2,
            )
        )
    n_rep, bias = H // k.shape[1], call.bias
    mask = explicit_mask(call, T, k.shape[2], q.device)
    # one query: a group's query heads as its rows, in place
    if T == 1 and n_rep > 1 and call.scores is None:
        q, bias = _grouped(q, k.shape[1], bias)
        scores = (q @ k.transpose(-2, -1)) * call.scale  # (B, K, n_rep, S)
    else:
        scores = attention_scores(q, k, call)  # (B, H, T, S)
        v = repeat_kv(v, n_rep)
    y = attention_from_scores(scores, v, bias, mask, call.softcap, call.dropout, call.dropout > 0)
    if T == 1:  # (B, H, 1, Dh) or grouped (B, K, n_rep, Dh): heads already consecutive
        return y.reshape(B, 1, -1)  # H * Dv: values may be wider than keys (a GAU)
    return merge_heads(y)  # (B, T, H*Dh)


def _scored_rows(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, call: KernelCall, a: int, b: int
) -> torch.Tensor:
    """Queries a:b of a plan-scored `eager` call -> (B, H, b - a, Dh). Under the plain causal mask
    (the T queries are the last T of the S keys) the keys after query b - 1 are invisible to the
    whole chunk and are skipped."""
    T, S = q.shape[2], k.shape[2]
    if call.mask is None:
        keys = S - T + b
        mask = causal_mask(
            torch.arange(S - T + a, keys, device=q.device),
            torch.arange(keys, device=q.device),
            None,
            None,
        )
    else:
        keys, mask = S, call.mask[:, :, a:b]
    bias = None if call.bias is None else call.bias[:, :, a:b, :keys]
    # (B, H, b - a, keys)
    scores = call.chunk(a, b, keys)(q[:, :, a:b], k[:, :, :keys]) * call.scale
    v = repeat_kv(v[:, :, :keys], q.shape[1] // k.shape[1])
    return attention_from_scores(
        scores, v, bias, mask, call.softcap, call.dropout, call.dropout > 0
    )


def _grouped(
    q: torch.Tensor, n_kv: int, bias: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One query: q (B, H, 1, Dh) -> (B, K, n_rep, Dh), a group's query heads as its
    rows; bias alike."""
    B, H, _, Dh = q.shape
    # (1, K, n_rep, S)
    bias = None if bias is None else bias.reshape(bias.shape[0], n_kv, H // n_kv, -1)
    return q.reshape(B, n_kv, H // n_kv, Dh), bias


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, call: KernelCall) -> torch.Tensor:
    """F.scaled_dot_product_attention: is_causal when no mask tensor is needed, else a bool or
    additive mask. For one query (decoding) the n_rep query heads of a group become that group's
    query rows, q (B, K, n_rep, Dh), so the cache is read in place; repeating K/V would copy the
    whole cache every step."""
    if call.softcap is not None or call.scores is not None:
        raise ValueError(
            "the sdpa kernel cannot softcap scores or take a plan's own scores: use eager"
        )
    B, H, T, Dh = q.shape
    K = k.shape[1]
    n_rep, bias = H // K, call.bias
    mask = (
        call.mask
        if call.mask is not None or bias is None
        else explicit_mask(call, T, k.shape[2], q.device)
    )
    causal = mask is None and T > 1
    if n_rep > 1 and T == 1:
        q, bias = _grouped(q, K, bias)  # (B, K, n_rep, Dh)
    elif n_rep > 1:
        k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)  # (B, H, S, Dh)
    if bias is not None:
        bias = bias.to(q.dtype)
        mask = bias if mask is None else bias.masked_fill(~mask, float("-inf"))
    y = F.scaled_dot_product_attention(
        q,
        k,
        v,
        attn_mask=mask,
        dropout_p=call.dropout,
        is_causal=causal,
        # (B, H, T, Dh) or grouped (B, K, n_rep, Dh)
        scale=call.scale,
    )
    if T == 1:  # heads are already consecutive in memory (also in the grouped layout)
        return y.reshape(B, 1, -1)  # H * Dv: values may be wider than keys (a GAU)
    return merge_heads(y)

"""Reference math shared by `nn/`, the trainer and the tests.

Everything here is a pure function of tensors: numerically stable softmax and cross entropy (with
the optional PaLM z-loss), tanh softcapping, the causal / window / padding mask, and a readable
eager attention that the fast SDPA path is tested against.

Shapes: B batch, H query heads, T queries, S keys, Dh head dim, V vocabulary.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

IGNORE_INDEX = -100  # targets that are not scored (torch's F.cross_entropy default)
Z_LOSS_COEF = 1e-4  # PaLM (arXiv 2204.02311, sec. 5): 1e-4 * log(Z)^2 keeps log Z near 0


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Softmax with the max subtracted first, so exp never overflows; rows of all
    -inf give zeros."""
    m = x.amax(dim=dim, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(x - m)
    return e / e.sum(dim=dim, keepdim=True).clamp_min(torch.finfo(e.dtype).tiny)


def softcap(x: torch.Tensor, cap: float | None) -> torch.Tensor:
    """cap * tanh(x / cap): smooth, ~identity near 0, |out| < cap (Gemma 2, arXiv 2408.00118)."""
    if cap is None:
        return x
    return cap * torch.tanh(x / cap)


def z_loss(
    logits: torch.Tensor, coef: float = Z_LOSS_COEF, ignore: torch.Tensor | None = None
) -> torch.Tensor:
    """Mean over rows of coef * logsumexp(logits)^2; `ignore` (bool, same rows) drops rows."""
    lse = torch.logsumexp(logits.float(), dim=-1)
    sq = lse.square()
    if ignore is not None:
        keep = ~ignore
        return coef * (sq * keep).sum() / keep.sum().clamp_min(1)
    return coef * sq.mean()


def cross_entropy(
    logits: torch.Tensor,
    targets: torch.Tensor,
    z_loss_coef: float = 0.0,
    ignore_index: int = IGNORE_INDEX,
) -> torch.Tensor:
    """Mean token cross entropy from logits (..., V) and targets (...), plus z_loss_coef * log(Z)^2.

    Computed in float32 via log-softmax (stable for any logit size); targets equal to `ignore_index`
    count in neither term. (`nn.fast.losses.cross_entropy` is the same value with a backward that
    reuses the forward's buffer.)
    """
    logits = logits.reshape(-1, logits.size(-1)).float()  # (N, V)
    targets = targets.reshape(-1)  # (N,)
    loss = F.cross_entropy(logits, targets, ignore_index=ignore_index)
    if z_loss_coef:
        loss = loss + z_loss(logits, z_loss_coef, ignore=targets == ignore_index)
    return loss


def eager_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float | None = None,
    bias: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    cap: float | None = None,
    dropout_p: float = 0.0,
    training: bool = False,
) -> torch.Tensor:
    """Attention written out step by step: scores -> softcap -> + bias -> mask -> softmax -> @ v.

    q (B, H, T, Dh), k/v (B, H, S, Dh) (K/V heads already repeated); bias broadcastable to (B, H, T,
    S); mask bool broadcastable to (B, H, T, S), True where a key is visible. Returns (B, H, T, Dh).
    """
    scale = 1.0 / math.sqrt(q.size(-1)) if scale is None else scale
    return attention_from_scores(
        (q @ k.transpose(-2, -1)) * scale, v, bias, mask, cap, dropout_p, training
    )


def attention_from_scores(
    scores: torch.Tensor,
    v: torch.Tensor,
    bias: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    cap: float | None = None,
    dropout_p: float = 0.0,
    training: bool = False,
) -> torch.Tensor:
    """The rest of `eager_attention` once the scaled scores (B, H, T, S) are known (ReRoPE
    builds its own)."""
    scores = softcap(scores, cap)
    if bias is not None:
        scores = scores + bias
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    probs = softmax(scores.float(), dim=-1).to(v.dtype)
    if dropout_p and training:
        probs = F.dropout(probs, dropout_p)
    return probs @ v  # (B, H, T, Dh)


def causal_mask(
    q_slots: torch.Tensor, k_slots: torch.Tensor, window: int | None, key_mask: torch.Tensor | None
) -> torch.Tensor:
    """bool (B|1, 1, T, S): the query in token slot q_slots[i] sees the key in token slot k_slots[j]
    iff k <= q, within `window` (q - k < window), and k holds a real token (key_mask (B, L) by token
    slot); a query always sees itself, so padded rows stay finite. Key slots in any order (a
    window's ring) work."""
    q_slot, k_slot = q_slots[:, None], k_slots[None, :]  # (T, 1), (1, S)
    visible = k_slot <= q_slot
    if window is not None:
        visible = visible & (q_slot - k_slot < window)
    visible = visible[None, None]  # (1, 1, T, S)
    if key_mask is not None:
        visible = visible & (key_mask[:, None, None, k_slots] | (k_slot == q_slot))
    return visible


def swap_halves(x: torch.Tensor) -> torch.Tensor:
    """(..., D) -> the last dim's halves swapped, [x[D/2:], x[:D/2]]: a permutation and an
    involution. After the final norm of a tied model it makes the self-logit S(w_i) . w_i ~ 0
    at init instead of ~ d sigma (Su, kexue.fm/archives/9698), like splitting the table into
    two untied halves."""
    half = x.shape[-1] // 2
    return torch.cat([x[..., half:], x[..., :half]], dim=-1)  # (..., D)

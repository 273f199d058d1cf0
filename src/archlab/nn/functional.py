"""Reference math shared by `nn/`, the trainer and the tests.

Everything here is a pure function of tensors: numerically stable softmax and cross entropy (with the
optional PaLM z-loss), tanh softcapping, and a readable eager attention that the fast SDPA path is tested
against.

Shapes: B batch, H query heads, T queries, S keys, Dh head dim, V vocabulary.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from archlab.nn.fused import cross_entropy as fused_cross_entropy
from archlab.nn.fused import use_fused

IGNORE_INDEX = -100  # targets that are not scored (torch's F.cross_entropy default)
Z_LOSS_COEF = 1e-4  # PaLM (arXiv 2204.02311, sec. 5): 1e-4 * log(Z)^2 keeps log Z near 0


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Softmax with the max subtracted first, so exp never overflows; rows of all -inf give zeros."""
    m = x.amax(dim=dim, keepdim=True)
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    e = torch.exp(x - m)
    return e / e.sum(dim=dim, keepdim=True).clamp_min(torch.finfo(e.dtype).tiny)


def softcap(x: torch.Tensor, cap: float | None) -> torch.Tensor:
    """cap * tanh(x / cap): smooth, ~identity near 0, |out| < cap (Gemma 2, arXiv 2408.00118)."""
    if cap is None:
        return x
    return cap * torch.tanh(x / cap)


def z_loss(logits: torch.Tensor, coef: float = Z_LOSS_COEF, ignore: torch.Tensor | None = None) -> torch.Tensor:
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
    fused: bool = True,
) -> torch.Tensor:
    """Mean token cross entropy from logits (..., V) and targets (...), plus z_loss_coef * log(Z)^2.

    Computed in float32 via log-softmax (stable for any logit size); targets equal to `ignore_index` count in
    neither term. With autograd recording, `nn.fused.cross_entropy` (same value, a backward that reuses the
    forward's buffer) runs unless `fused=False`.
    """
    logits = logits.reshape(-1, logits.size(-1)).float()  # (N, V)
    targets = targets.reshape(-1)  # (N,)
    if fused and use_fused(logits):
        loss = fused_cross_entropy(logits, targets, ignore_index)
    else:
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

    q (B, H, T, Dh), k/v (B, H, S, Dh) (K/V heads already repeated); bias broadcastable to (B, H, T, S);
    mask bool broadcastable to (B, H, T, S), True where a key is visible. Returns (B, H, T, Dh).
    """
    scale = 1.0 / math.sqrt(q.size(-1)) if scale is None else scale
    return attention_from_scores((q @ k.transpose(-2, -1)) * scale, v, bias, mask, cap, dropout_p, training)


def attention_from_scores(
    scores: torch.Tensor,
    v: torch.Tensor,
    bias: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    cap: float | None = None,
    dropout_p: float = 0.0,
    training: bool = False,
) -> torch.Tensor:
    """The rest of `eager_attention` once the scaled scores (B, H, T, S) are known (ReRoPE builds its own)."""
    scores = softcap(scores, cap)
    if bias is not None:
        scores = scores + bias
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    probs = softmax(scores.float(), dim=-1).to(v.dtype)
    if dropout_p and training:
        probs = F.dropout(probs, dropout_p)
    return probs @ v  # (B, H, T, Dh)


def swap_halves(x: torch.Tensor) -> torch.Tensor:
    """(..., D) -> the last dim's halves swapped, [x[D/2:], x[:D/2]]: a permutation and an involution. After the
    final norm of a tied model it makes the self-logit S(w_i) . w_i ~ 0 at init instead of ~ d sigma (Su,
    kexue.fm/archives/9698), like splitting the table into two untied halves."""
    half = x.shape[-1] // 2
    return torch.cat([x[..., half:], x[..., :half]], dim=-1)  # (..., D)

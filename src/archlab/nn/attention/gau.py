"""The gated attention unit (GAU): one single-head layer that replaces attention and the FFN.

Hua et al., "Transformer Quality in Linear Time" (arXiv 2202.10447, section 2), in Su's softmax form
("FLASH: perhaps the most interesting efficient transformer of late", kexue.fm/archives/8934; the
block of all his long-context tables, and of Transformer-VQ). For x (T, d), with e the value width
and s the key width:
    U, V, Z = act(x W_uvz) split into widths e, e, s     one input GEMM [u | v | z], act = silu
    Q = Z * gamma_q + beta_q,  K = Z * gamma_k + beta_k  a per-dimension scale and offset of Z
    A = softmax(scale * R(Q) R(K)^T + mask)              scale = 1/sqrt(s) (attn_scale), R = RoPE
    O = (U * A V) W_o
The paper's A is a squared ReLU normalised by the length; Su (8934) found softmax (with the log-n
scale, kexue.fm/archives/8823) better for language models and length extrapolation, so softmax is
the default (`gau.attention="softmax"`): A is the project's attention kernel
(nn/attention/kernels.py), so masks, sliding windows, RoPE plans (ReRoPE included), log-n
(`attn_logn`), softcapping and the KV cache work exactly as in `Attention`. `gau.attention="relu2"`
runs `relu2_attention` below instead: A = relu(scale Q K^T + b)^2 / n with n the keys each query
sees (per query, so decoding with the cache equals the full forward), under the same masks, plans
and cache. The cache holds K (width s) and V (width e) of the one head; `core` is `Attention.core`
itself. In archlab's config: block="gau", n_heads = n_kv_heads = 1, head_dim = s (128 in the paper),
d_ff = e (default 2 d_model), `activation` the act; Hua et al. stack twice as many GAU layers as a
transformer has blocks to match its parameters (a GAU layer has ~ 3 e d + s d weights, an attention
+ FFN block ~ 12 d^2). gamma starts at 1 and beta at 0 (bert4keras' ScaleOffset, Su's
implementation), so Q = K = Z at init.

Shapes: B batch, T new tokens, S keys, D d_model, E value width e, Dk key width s.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from archlab.nn.activations import get_activation
from archlab.nn.attention.attention import AttentionCore
from archlab.nn.attention.inputs import AttentionInputs
from archlab.nn.attention.kernels import KernelCall, attention_scores, explicit_mask, merge_heads
from archlab.nn.config import ModelConfig
from archlab.nn.config.choices import ATTENTION_KERNELS
from archlab.nn.functional import softcap


class GatedAttentionUnit(AttentionCore, nn.Module):
    """A single-head gated attention unit (module docstring); a Block holds it as its `attn`. What
    follows its projection (query scaling, the cache, late key rotation, the kernel) is
    `AttentionCore`, as in Attention."""

    # `AttentionCore.core` asks for a linear kernel: a GAU is softmax attention (config refuses
    # others)
    linear = None

    def __init__(self, config: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        c = config
        self.layer_idx = layer_idx
        self.e, self.s = c.d_ff, c.head_dim
        self.uvz_proj = nn.Linear(c.d_model, 2 * self.e + self.s, bias=c.attn_bias)  # [u | v | z]
        self.o_proj = nn.Linear(self.e, c.d_model, bias=c.attn_bias)
        self.q_scale, self.q_offset = (
            nn.Parameter(torch.empty(self.s)),
            nn.Parameter(torch.empty(self.s)),
        )
        self.k_scale, self.k_offset = (
            nn.Parameter(torch.empty(self.s)),
            nn.Parameter(torch.empty(self.s)),
        )
        self.act = get_activation(c.activation, c.swish_beta)
        self.scale = c.resolved_attn_scale
        self.softcap = c.attn_softcap
        self.kernel = ATTENTION_KERNELS[c.resolved_attn_impl]
        if c.gau.attention == "relu2":  # every call, a plan's own scores (ReRoPE) included
            self.kernel = self.scoring_kernel = relu2_attention
        self.dropout = c.attn_dropout
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """gamma = 1, beta = 0 (the projections are drawn by `TransformerLM.init_weights`)."""
        for p in (self.q_scale, self.k_scale):
            nn.init.ones_(p)
        for p in (self.q_offset, self.k_offset):
            nn.init.zeros_(p)

    def project(self, x: torch.Tensor, inp: AttentionInputs) -> tuple[torch.Tensor, ...]:
        """x (B, T, D) -> u (B, T, E), and q (B, 1, T, Dk), k (B, 1, T, Dk), v (B, 1, T, E) as the
        kernel takes them (one head), q and k rotated by the plan (keys it caches unrotated are
        left for it)."""
        # (B, T, E), (B, T, E), (B, T, Dk)
        u, v, z = self.act(self.uvz_proj(x)).split([self.e, self.e, self.s], dim=-1)
        z = z[:, :, None]  # (B, T, 1, Dk): one head
        q, k = z * self.q_scale + self.q_offset, z * self.k_scale + self.k_offset  # (B, T, 1, Dk)
        if inp.rope is not None:
            q, k = inp.rope.rotate_queries_keys(q, k)
        # (B, T, E), (B, 1, T, Dk) x 2, (B, 1, T, E)
        return u, q.transpose(1, 2), k.transpose(1, 2), v[:, None]

    def forward(self, x: torch.Tensor, inp: AttentionInputs) -> torch.Tensor:
        u, q, k, v = self.project(x, inp)
        return self.o_proj(u * self.core(q, k, v, inp, inp.cache))  # (B, T, D)


def relu2_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, call: KernelCall
) -> torch.Tensor:
    """The squared-ReLU attention of Hua et al. (`gau.attention="relu2"`), an attention kernel `(q,
    k, v, call) -> y`: A = relu(scale q . k [softcapped] + bias)^2 / n over the visible keys, n the
    number a query sees (its position + 1, or its window), so a cached decode step equals the full
    forward; no softmax, rows need not sum to 1. q (B, 1, T, Dk), k (B, 1, S, Dk), v (B, 1, S, E) ->
    (B, T, E)."""
    T, S = q.shape[2], k.shape[2]
    scores = softcap(attention_scores(q, k, call), call.softcap)  # (B, 1, T, S)
    if call.bias is not None:
        scores = scores + call.bias
    a = F.relu(scores).square()  # (B, 1, T, S)
    mask = explicit_mask(call, T, S, q.device)  # None: one query that sees every key
    if mask is not None:
        a = a.masked_fill(~mask, 0.0)
    n = mask.sum(-1, keepdim=True).clamp_min(1) if mask is not None else S  # (B|1, 1, T, 1) or S
    a = F.dropout(a / n, call.dropout) if call.dropout else a / n
    return merge_heads(a @ v)  # (B, T, E)

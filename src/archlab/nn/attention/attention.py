"""Causal self-attention with every attention switch archlab offers, in one module.

- MHA / GQA / MQA: `n_kv_heads` K/V heads, query head h reads K/V head h // (H / K) (Ainslie et al.
  arXiv 2305.13245; Shazeer arXiv 1911.02150).
- QK-norm: RMSNorm or LayerNorm on q and k before RoPE, per head (`head`, Qwen3) or over the whole
  projection (`proj`, OLMo 2) (Dehghani et al. arXiv 2302.05442).
- KeyNorm: keys L2-normalised, and the scale defaults to 1 since |q| now sets the temperature (Su,
  "Transformer upgrade 15", kexue.fm/archives/9859); QueryNorm (`query_norm`) is its mirror, queries
  L2-normalised and |k| the temperature. Scaled cosine attention (`cosine`, same post)
  normalises both, so q . k = cos(q, k), and multiplies by lambda = 4 log n: n = max_seq_len / 2
  (`cosine.scale="fixed"`), or the keys each query sees (`"dynamic"`: the fixed lambda times the
  log-n factor log(n) / log(max_seq_len / 2), which nn/attention/inputs.py computes per query).
  Every normalisation acts before RoPE, which keeps lengths.
- attention logit softcapping: cap * tanh(scores / cap) before the mask (Gemma 2).
- sliding window: a layer may see only its last `window` keys (Mistral; Gemma 2
  alternates); its cache keeps only the window (nn/kv_cache.py), and its mask and bias come
  with its `AttentionInputs`.
- RoPE (how q and k are rotated is the `PositionPlan` of nn/positions/rope.py, asked at projection
  time and after the cache update), or an additive bias from positions.py (relative, ALiBi), or
  nothing. A plan that computes its own scores (ReRoPE, nn/positions/rerope.py) says so
  (`computes_scores`) and its scores go to the eager kernel.
- log-n scaling: q times log(n) / log(L_train), n the keys the query sees (Su,
  kexue.fm/archives/8823); the model computes the factor per query (`AttentionInputs.query_scale`),
  so SDPA stays usable.
The attention itself is a kernel of nn/attention/kernels.py (`attn_impl`): SDPA, or the eager
reference that supports everything and is tested against it. `core` is everything after the
projection (cache, late key rotation, kernel), so a block that projects q, k, v itself (a fused
parallel block) reuses it. The CPU training fast paths (`ops.rope_qkv`, `ops.causal_attention` of
nn/fast/) are installed from outside by `fast.install`. With `attn_kernel` favor or vq, `core` hands
the projected (and rotated) q, k, v to a linear kernel instead (nn/attention/linear/layer.py), which
keeps a fixed-size state in the cache rather than keys and values.

Shapes: B batch, T queries, S keys, D model width, H query heads, K KV heads, Dh head dim; slots are
token slots of the cache (query slots (T,), key slots (S,)).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from archlab.nn.attention.inputs import AttentionInputs
from archlab.nn.attention.kernels import KernelCall, attention_scores, merge_heads
from archlab.nn.attention.linear.layer import LinearAttention
from archlab.nn.config import ModelConfig
from archlab.nn.config.choices import ATTENTION_KERNELS
from archlab.nn.kv_cache import KVCache
from archlab.nn.norms import build_norm


class AttentionCore:
    """What attention does after its projection, shared by `Attention` and the GAU
    (nn/attention/gau.py): the query scaling, the cache, late key rotation, then the kernel
    (`core`), and the scores the kernel sees (`scores`). Its module sets `layer_idx`, `scale`,
    `softcap`, `dropout`, `kernel`, `scoring_kernel` and `linear`."""

    # the kernel that takes a plan's own scores (ReRoPE)
    scoring_kernel = staticmethod(ATTENTION_KERNELS["eager"])

    def core(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        inp: AttentionInputs,
        cache: KVCache | None,
    ) -> torch.Tensor:
        """Projected q (B, H, T, Dh), k and v (B, K, T, Dh) -> the heads' output (B, T, H*Dh) before
        o_proj: query scaling, the cache, late key rotation, then the kernel. A fused parallel block
        (nn/block.py) projects q, k, v itself and applies o_proj in its own output GEMM."""
        q = self._scaled_queries(q, inp)
        if self.linear is not None:  # FAVOR+ / VQ: the kernel's state replaces the K/V cache
            return merge_heads(self.linear(q, k, v, cache, inp.slopes))  # (B, T, H*Dh)
        if cache is not None:
            k, v = cache.update(self.layer_idx, k, v)  # (B, K, S, Dh)
        call = self.kernel_call(inp)
        # sdpa never takes a plan's scores
        kernel = self.kernel if call.scores is None else self.scoring_kernel
        return kernel(q, self._rotated_keys(k, inp), v, call)  # (B, T, H*Dh)

    def scores(self, q: torch.Tensor, k: torch.Tensor, inp: AttentionInputs) -> torch.Tensor:
        """The scaled scores (B, H, T, T) of the projected q (B, H, T, Dh) and k (B, K, T, Dh)
        `core` receives, without a cache, before softcap, bias and mask: what the eager kernel
        computes (the lab's largest attention logit reads them, lab/measures/eval_set.py)."""
        return attention_scores(
            self._scaled_queries(q, inp), self._rotated_keys(k, inp), self.kernel_call(inp)
        )

    def kernel_call(self, inp: AttentionInputs) -> KernelCall:
        """What the kernel needs besides q, k and v: scale, masks, bias, softcap, dropout, a
        plan's own scores."""
        rope = inp.rope
        plan = rope if rope is not None and rope.computes_scores else None
        scores, chunk = (
            (None, None)
            if plan is None
            else (plan.scores, lambda a, b, s: plan.rows(a, b, s).scores)
        )
        return KernelCall(
            self.scale,
            inp.mask,
            inp.bias,
            self.softcap,
            self.dropout if self.training else 0.0,
            scores,
            chunk,
        )

    @staticmethod
    def _scaled_queries(q: torch.Tensor, inp: AttentionInputs) -> torch.Tensor:
        # each query's scores: log-n
        return q if inp.query_scale is None else q * inp.query_scale.to(q.dtype)

    @staticmethod
    def _rotated_keys(k: torch.Tensor, inp: AttentionInputs) -> torch.Tensor:
        """Keys the cache holds unrotated (a length-dependent plan), rotated now; others
        as they are."""
        rope = inp.rope
        # (B, K, S, Dh)
        return rope.rotate_cached_keys(k) if rope is not None and rope.rotates_cached_keys else k


class Attention(AttentionCore, nn.Module):
    """Fused-QKV causal self-attention; see the module docstring for the switches."""

    def __init__(self, config: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        c = config
        self.layer_idx = layer_idx
        self.n_heads, self.n_kv_heads, self.head_dim = c.n_heads, c.n_kv_heads, c.head_dim
        self.qkv_proj = nn.Linear(
            c.d_model, (c.n_heads + 2 * c.n_kv_heads) * c.head_dim, bias=c.attn_bias
        )  # [q|k|v]
        self.o_proj = nn.Linear(c.n_heads * c.head_dim, c.d_model, bias=c.attn_bias)
        self.qk_norm_scope = c.qk_norm_scope
        if c.qk_norm != "none":
            q_dim, k_dim = (
                (c.head_dim, c.head_dim)
                if c.qk_norm_scope == "head"
                else (c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim)
            )
            norm_args = dict(eps=c.norm_eps, unit_offset=c.norm_unit_offset)
            self.q_norm = build_norm(c.qk_norm, q_dim, **norm_args)
            self.k_norm = build_norm(c.qk_norm, k_dim, **norm_args)
        else:
            self.q_norm = self.k_norm = None
        cosine = c.cosine is not None
        self.key_norm = c.key_norm or cosine  # L2-normalised keys (KeyNorm, cosine)
        self.query_norm = c.query_norm or cosine  # L2-normalised queries (QueryNorm, cosine)
        # q and k reach RoPE straight from the projection (the fused split + RoPE of
        # nn/fast/install.py may take them)
        self.plain_qk = self.q_norm is None and not self.key_norm and not self.query_norm
        self.scale = c.resolved_attn_scale
        self.softcap = c.attn_softcap
        self.kernel = ATTENTION_KERNELS[c.resolved_attn_impl]
        self.dropout = c.attn_dropout
        self.linear = LinearAttention(c, layer_idx) if c.linear_kernel is not None else None

    def project(
        self, x: torch.Tensor, inp: AttentionInputs, qkv: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, ...]:
        """x (B, T, D) -> q (B, H, T, Dh), k and v (B, K, T, Dh), with norms and RoPE applied;
        `qkv` (B, T, (H + 2K) Dh) is the projection when the caller computed it (a fused parallel
        block's input GEMM).

        Norms and RoPE act in the (B, T, heads, Dh) layout that the fused projection gives;
        when q and k get the same treatment (no norm on either), the plan gets them as one
        tensor and one RoPE call rotates both. Keys the cache holds unrotated are left for
        the plan's `rotate_cached_keys`."""
        B, T, _ = x.shape
        H, K, Dh = self.n_heads, self.n_kv_heads, self.head_dim
        # [q heads | k heads | v heads]
        heads = (self.qkv_proj(x) if qkv is None else qkv).view(B, T, H + 2 * K, Dh)
        q, k, v = heads.split([H, K, K], dim=2)  # (B, T, H, Dh), (B, T, K, Dh) x 2
        # over all heads at once (OLMo 2)
        if self.q_norm is not None and self.qk_norm_scope == "proj":
            q = self.q_norm(q.flatten(2)).view(B, T, H, Dh)
            k = self.k_norm(k.flatten(2)).view(B, T, K, Dh)
        elif self.q_norm is not None:  # per head (Qwen3)
            q, k = self.q_norm(q), self.k_norm(k)
        if self.key_norm:
            k = F.normalize(k, dim=-1)
        if self.query_norm:
            q = F.normalize(q, dim=-1)
        if inp.rope is not None:
            qk = heads[:, :, : H + K] if self.plain_qk else None  # still [q | k]
            q, k = inp.rope.rotate_queries_keys(q, k, qk)
        return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, heads, T, Dh)

    def forward(self, x: torch.Tensor, inp: AttentionInputs) -> torch.Tensor:
        q, k, v = self.project(x, inp)
        return self.o_proj(self.core(q, k, v, inp, inp.cache))  # (B, T, D)

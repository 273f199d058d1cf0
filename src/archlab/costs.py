"""What a configuration costs, computed from the config alone: parameters by part, FLOPs per token
and KV-cache bytes. Tests check the parameter count against `sum(p.numel())` of the built model, and
the KV bytes against what `KVCache` really allocates.

FLOPs per token (one multiply-add = 2 FLOPs; PaLM, arXiv 2204.02311, appendix B):
    forward  = 2 * N_matmul + 4 * sum over layers of (H * Dh * T_layer)
    training = 3 * forward                       (backward costs twice the forward)
N_matmul counts every weight that multiplies activations (all linear layers, the head included even
when tied; the embedding lookup is free). The attention term is QK^T plus probs @ V for one query
against T_layer keys: T_layer = T for full layers and min(T, window) for sliding-window layers, T
the context. Norms, activations, softmax and RoPE are elementwise and left out, as in PaLM's count.
A GAU layer (block="gau", nn/attention/gau.py; s = head_dim, e = d_ff) has matmul weights d (2e + s)
+ e d and attention 2 (s + e) T_layer (Q K^T over s dims, A V over e dims); its cache holds (s + e)
values per token and layer.

KV-cache bytes (the one formula; `archlab inspect`, `archlab generate --report-memory` and the
tests use it):
    bytes = batch * 2 (K and V) * n_kv_heads * head_dim * bytes per element * sum_layers slots
with slots = T for full layers and min(T, window) for sliding-window layers, whose cache is a ring
of their window (nn/kv_cache.py). Per token, below every window: 2 * n_layers * n_kv_heads *
head_dim * bytes.

Linear attention kernels (`attn_kernel`, docs/linear-attention.md) keep a state instead, 0
bytes per token:
    favor: batch * n_layers * n_kv_heads * M * (head_dim + 1) * 4    ([S | z], float32, M features)
    vq:    batch * n_layers * (n_kv_heads * tail * (C + head_dim) + heads * C * (head_dim + 1))
           * max(bytes, 4)
with tail = the last complete block and the current one's tokens (L + t mod L once t >= L, else t),
C codes and heads = n_kv_heads, or n_heads with ALiBi (its decayed code sums are per query head,
nn/attention/linear/vq.py). FAVOR+'s state is one size at any context; VQ's is bounded, not
constant: it rises and falls with t mod L, at most the size at a tail of 2L - 1
(`state_bytes_bound`), and each tail token holds its assignment row (C values) besides its value, so
the tail dominates at C = 512. Both states are float32 at least whatever the weights' dtype: the
kernels run in float32 (`LinearAttention`), float64 for a float64 model. Their attention FLOPs per
token replace 4 H Dh T: favor 4 (H + K) M Dh (features, and reading or adding to the state); vq H (4
C Dh + 4 Dh min(T, 2L)) + 2 K C Dh (scores against the codes and the cache, the two exact blocks,
the keys' nearest codes).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from archlab.nn.config import ModelConfig
from archlab.nn.config.choices import placement_norms

DTYPE_BYTES = {
    "float64": 8,
    "fp64": 8,
    "float32": 4,
    "fp32": 4,
    "bfloat16": 2,
    "bf16": 2,
    "float16": 2,
    "fp16": 2,
    # keys include torch's dtype names (str(torch.float32) less "torch.")
    "int8": 1,
    "fp8": 1,
}


def _norm_params(c: ModelConfig, dim: int) -> int:
    return dim * (2 if c.norm_bias else 1)


def parameter_counts(c: ModelConfig) -> OrderedDict[str, int]:
    """Parameters by part; `total` counts a tied head once, exactly as `model.parameters()` does."""
    q, kv = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
    attn = c.d_model * (q + 2 * kv) + q * c.d_model + (q + 2 * kv + c.d_model if c.attn_bias else 0)
    if c.qk_norm != "none":
        per = (c.head_dim, c.head_dim) if c.qk_norm_scope == "head" else (q, kv)
        attn += sum(per)  # QK-norms carry a gain only
    n_mats = 3 if c.ffn == "glu" else 2
    mlp = n_mats * c.d_model * c.d_ff + ((n_mats - 1) * c.d_ff + c.d_model if c.mlp_bias else 0)
    # [u | v | z] (d x (2e + s)), W_o (e x d), scale and offset of q and k (4 s); no FFN
    if c.block == "gau":
        e, s = c.d_ff, c.head_dim
        attn = (
            c.d_model * (2 * e + s)
            + e * c.d_model
            + 4 * s
            + (2 * e + s + c.d_model if c.attn_bias else 0)
        )
        mlp = 0
    counts: OrderedDict[str, int] = OrderedDict()
    counts["embedding"] = c.vocab_size * c.d_model
    counts["positions"] = c.max_seq_len * c.d_model if c.position == "learned" else 0
    counts["position bias"] = c.relative_buckets * c.n_heads if c.position == "relative" else 0
    counts["attention"] = c.n_layers * attn
    counts["mlp"] = c.n_layers * mlp
    per_layer = len(
        placement_norms(c.norm_position, c.block == "parallel", c.parallel_norms, c.block == "gau")
    )
    counts["norms"] = c.n_layers * per_layer * _norm_params(c, c.d_model) + (
        _norm_params(c, c.d_model) if c.final_norm else 0
    )
    head = 0 if c.tie_embeddings else c.vocab_size * c.d_model
    # the tied head's d x d projection (9698)
    proj = c.d_model * c.d_model if c.tied_head == "proj" else 0
    counts["lm_head"] = head + proj + (c.vocab_size if c.lm_head_bias else 0)
    counts["total"] = sum(counts.values())
    return counts


def matmul_params(c: ModelConfig) -> int:
    """Weights that multiply activations: attention and FFN matrices of every layer, plus the head
    (and a tied head's projection)."""
    q, kv = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
    per_layer = (
        c.d_model * (q + 2 * kv) + q * c.d_model + (3 if c.ffn == "glu" else 2) * c.d_model * c.d_ff
    )
    if c.block == "gau":
        per_layer = c.d_model * (2 * c.d_ff + c.head_dim) + c.d_ff * c.d_model
    proj = c.d_model * c.d_model if c.tied_head == "proj" else 0
    return c.n_layers * per_layer + proj + c.vocab_size * c.d_model


def flops_per_token(c: ModelConfig, context: int | None = None) -> dict[str, int]:
    """Forward and training FLOPs per token at `context` tokens (default max_seq_len);
    see module doc."""
    t = context or c.max_seq_len
    keys = sum(min(t, c.sliding_window) if c.layer_is_sliding(i) else t for i in range(c.n_layers))
    attention = 4 * c.n_heads * c.head_dim * keys
    if c.block == "gau":  # Q K^T over s dims, A V over e dims
        attention = 2 * (c.head_dim + c.d_ff) * keys
    if c.linear_kernel is not None:  # the kernel's own formula (nn/config/kernels.py)
        attention = c.n_layers * c.linear_kernel.attention_flops(
            c.n_heads, c.n_kv_heads, c.head_dim, t
        )
    forward = 2 * matmul_params(c) + attention
    return {
        "matmul": 2 * matmul_params(c),
        "attention": attention,
        "forward": forward,
        "training": 3 * forward,
    }


def kv_cache_slots(c: ModelConfig, context: int) -> int:
    """Cache slots summed over layers for `context` tokens: full layers keep every token,
    sliding-window layers their last `sliding_window` (a ring in `KVCache`)."""
    return sum(
        min(context, c.sliding_window) if c.layer_is_sliding(i) else context
        for i in range(c.n_layers)
    )


def _slot_bytes(c: ModelConfig, dtype: str) -> int:
    """K and V of one layer for one token: 2 * n_kv_heads * head_dim * bytes (a GAU: (s +
    e) * bytes)."""
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"dtype={dtype!r} is not allowed: one of {', '.join(DTYPE_BYTES)}")
    if c.block == "gau":
        return (c.head_dim + c.d_ff) * DTYPE_BYTES[dtype]
    return 2 * c.n_kv_heads * c.head_dim * DTYPE_BYTES[dtype]


def kv_cache_bytes(
    c: ModelConfig, context: int | None = None, dtype: str = "bf16", batch: int = 1
) -> dict[str, int]:
    """Bytes of K and V: per token below every window (2 * layers * kv_heads * head_dim * bytes)
    and for a `context` of tokens (default max_seq_len) x `batch` sequences, sliding-window
    layers keeping their window. `context` equals what `KVCache(..., max_len=context)` of the
    model allocates (`KVCache.nbytes()`)."""
    t = context or c.max_seq_len
    per_slot = _slot_bytes(c, dtype)
    if c.linear_kernel is not None:
        return {"per_token": 0, "context": state_bytes(c, t, dtype, batch)}
    return {"per_token": c.n_layers * per_slot, "context": batch * kv_cache_slots(c, t) * per_slot}


def state_bytes(c: ModelConfig, context: int, dtype: str = "bf16", batch: int = 1) -> int:
    """Bytes of a linear kernel's decoding state after `context` tokens (module doc); what
    `KVCache.nbytes()` holds then. 0 for softmax attention."""
    kernel = c.linear_kernel
    if kernel is None:
        return 0
    # the kernels run in float32 at least (nn/attention/linear/layer.py)
    element = max(DTYPE_BYTES[dtype], 4)
    alibi = c.position == "alibi"  # VQ decays its code sums per query head then
    return (
        batch
        * c.n_layers
        * kernel.state_bytes(c.n_heads, c.n_kv_heads, c.head_dim, context, element, alibi)
    )


def state_bytes_bound(c: ModelConfig, dtype: str = "bf16", batch: int = 1) -> int:
    """The most a linear kernel's decoding state ever holds, at any context: FAVOR+'s is one size;
    VQ's tail runs from L to 2L - 1 tokens as the context grows (module doc), so its largest is at a
    tail of 2L - 1."""
    if c.linear_kernel is None:
        return 0
    return state_bytes(c, c.linear_kernel.largest_state_context(c.max_seq_len), dtype, batch)


def kv_tokens_within(c: ModelConfig, budget: int, dtype: str = "bf16") -> int | None:
    """The longest context whose cache for one sequence fits in `budget` bytes, or None when
    every context does (every layer windowed: the cache stops growing at the window; a linear
    kernel's fixed state)."""
    per_slot = _slot_bytes(c, dtype)
    if c.linear_kernel is not None:
        return None
    windowed = [i for i in range(c.n_layers) if c.layer_is_sliding(i)]
    n_full = c.n_layers - len(windowed)
    t = budget // (c.n_layers * per_slot)  # while every window still grows
    if not windowed or t < c.sliding_window:
        return t
    if n_full == 0:
        return None
    # past the window only full layers grow
    return (budget // per_slot - len(windowed) * c.sliding_window) // n_full


@dataclass
class Report:
    """Everything `archlab inspect` shows for one config."""

    config: ModelConfig
    params: OrderedDict[str, int]
    flops: dict[str, int]
    kv: dict[str, int]
    context: int
    dtype: str


def report(c: ModelConfig, context: int | None = None, dtype: str = "bf16") -> Report:
    t = context or c.max_seq_len
    return Report(
        c, parameter_counts(c), flops_per_token(c, t), kv_cache_bytes(c, t, dtype), t, dtype
    )

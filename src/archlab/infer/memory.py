"""What generation costs in memory: KV-cache bytes for this model and for MHA / GQA / MQA
at its width, and the measured peak (`archlab generate --report-memory`). Bytes come from
`archlab.costs`, the one formula (sliding-window layers keep only their window), which is also
what `KVCache.nbytes()` allocates.
"""

from __future__ import annotations

import resource
import sys

import torch

from archlab.costs import flops_per_token, kv_cache_bytes, kv_tokens_within, state_bytes_bound
from archlab.infer.generate import Generation
from archlab.nn.config import ModelConfig
from archlab.nn.model import TransformerLM


def dtype_name(dtype: torch.dtype) -> str:
    """torch.bfloat16 -> "bfloat16", the key `archlab.costs.DTYPE_BYTES` knows it by."""
    return str(dtype).removeprefix("torch.")


def kv_bytes_table(
    config: ModelConfig,
    dtype: torch.dtype,
    context_len: int,
    batch_size: int = 1,
    budget: int | None = None,
) -> list[dict]:
    """KV-cache bytes per token and for the whole context (x batch), for this model and for MHA /
    GQA / MQA at its width; with a `budget` in bytes, also the longest context one sequence's cache
    fits in (None: any)."""
    h = config.n_heads
    gqa = config.n_kv_heads if 1 < config.n_kv_heads < h else _gqa_heads(h)
    variants = [("MHA", h), *([("GQA", gqa)] if gqa else []), ("MQA", 1)]
    rows = []
    for name, k in variants:
        variant = config if k == config.n_kv_heads else config.replace(n_kv_heads=k)
        kv = kv_cache_bytes(variant, context_len, dtype_name(dtype), batch_size)
        fits = kv_tokens_within(variant, budget, dtype_name(dtype)) if budget is not None else None
        rows.append(
            dict(
                attention=name,
                n_kv_heads=k,
                this_model=k == config.n_kv_heads,
                bytes_per_token=kv["per_token"],
                context_bytes=kv["context"],
                tokens_within_budget=fits,
            )
        )
    return rows


def _gqa_heads(n_heads: int) -> int | None:
    """A GQA example for an MHA model: the divisor of n_heads strictly between 1 and
    n_heads nearest n_heads/4."""
    divisors = [k for k in range(2, n_heads) if n_heads % k == 0]
    return min(divisors, key=lambda k: abs(k - n_heads / 4), default=None)


def peak_memory(device: torch.device) -> tuple[str, int]:
    """The measured peak: CUDA's allocator high-water mark, or on CPU the process's
    peak resident set."""
    if device.type == "cuda":
        return "peak CUDA memory allocated", torch.cuda.max_memory_allocated(device)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return "peak process resident memory (RSS)", rss if sys.platform == "darwin" else rss * 1024


def state_description(config: ModelConfig, dtype: torch.dtype, batch: int = 1) -> str:
    """What a linear kernel's decoding state holds, and whether its size depends on
    the context (costs.py)."""
    bound = state_bytes_bound(config, dtype_name(dtype), batch)
    return config.linear_kernel.describe_state(bound, config.position == "alibi")


def memory_report(model: TransformerLM, result: Generation, device: torch.device) -> str:
    """KV bytes per token and per context for MHA / GQA / MQA at this width (a linear kernel: its
    state, and its attention FLOPs per token), and the measured peak, as lines."""
    config = model.config
    dtype = next(model.parameters()).dtype
    batch = len(result.tokens)
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    windows = sum(w is not None for w in model.layer_windows)
    kept = (
        f"; {windows} sliding-window layers keep {config.sliding_window} slots" if windows else ""
    )
    linear = config.linear_kernel is not None
    what = f"Decoding state of attn_kernel={config.attn_kernel!r}" if linear else "KV cache"
    lines = [
        f"{what} ({dtype}, {config.n_layers} layers, head_dim {config.head_dim}, "
        f"context {result.context_len} tokens x batch {batch}{kept}); "
        f"allocated {result.cache_bytes:,} bytes"
    ]
    if linear:
        lines.append("  " + state_description(config, dtype, batch))
    # what the kernel costs instead of softmax's 4 H Dh T per layer (costs.py, as inspect prints it)
    if linear:
        softmax = 4 * config.n_heads * config.head_dim * result.context_len * config.n_layers
        lines.append(
            "  attention FLOPs per token: "
            f"{flops_per_token(config, result.context_len)['attention']:,} "
            f"(softmax attention at this context: {softmax:,})"
        )
    for row in kv_bytes_table(config, dtype, result.context_len, batch, budget=param_bytes):
        marker = "  <- this model" if row["this_model"] else ""
        fits = row["tokens_within_budget"]
        fixed = config.linear_kernel.state_kind if linear else "every layer keeps only its window"
        outweighs = f"past {fits:,} tokens" if fits is not None else f"at no length ({fixed})"
        lines.append(
            f"  {row['attention']} ({row['n_kv_heads']} KV heads): {row['bytes_per_token']:,} "
            f"B/token, {row['context_bytes']:,} B for the context; outweighs the {param_bytes:,} B "
            f"of weights {outweighs}{marker}"
        )
    label, peak = peak_memory(device)
    lines.append(f"{label}: {peak / 2**20:,.1f} MiB")
    return "\n".join(lines)

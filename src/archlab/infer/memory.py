"""What generation costs in memory: KV-cache bytes for this model and for MHA / GQA / MQA at its width,
and the measured peak (`archlab generate --report-memory`). Bytes come from `archlab.costs`, the one formula.
"""

from __future__ import annotations

import resource
import sys

import torch

from archlab.infer.generate import Generation
from archlab.nn.config import ModelConfig
from archlab.nn.kv_cache import KVCache
from archlab.nn.model import TransformerLM


def kv_bytes_table(config: ModelConfig, dtype: torch.dtype, context_len: int, batch_size: int = 1) -> list[dict]:
    """KV-cache bytes per token and for the whole context, for this model and for MHA / GQA / MQA at its width."""
    h = config.n_heads
    gqa = config.n_kv_heads if 1 < config.n_kv_heads < h else _gqa_heads(h)
    variants = [("MHA", h), *([("GQA", gqa)] if gqa else []), ("MQA", 1)]
    rows = []
    for name, k in variants:
        per_token = KVCache.bytes_per_token(config.n_layers, k, config.head_dim, dtype)
        rows.append(dict(attention=name, n_kv_heads=k, this_model=k == config.n_kv_heads,
                         bytes_per_token=per_token, context_bytes=per_token * context_len * batch_size))
    return rows


def _gqa_heads(n_heads: int) -> int | None:
    """A GQA example for an MHA model: the divisor of n_heads strictly between 1 and n_heads nearest n_heads/4."""
    divisors = [k for k in range(2, n_heads) if n_heads % k == 0]
    return min(divisors, key=lambda k: abs(k - n_heads / 4), default=None)


def peak_memory(device: torch.device) -> tuple[str, int]:
    """The measured peak: CUDA's allocator high-water mark, or on CPU the process's peak resident set."""
    if device.type == "cuda":
        return "peak CUDA memory allocated", torch.cuda.max_memory_allocated(device)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return "peak process resident memory (RSS)", rss if sys.platform == "darwin" else rss * 1024


def memory_report(model: TransformerLM, result: Generation, device: torch.device) -> str:
    """KV bytes per token and per context for MHA / GQA / MQA at this width, and the measured peak, as lines."""
    config = model.config
    dtype = next(model.parameters()).dtype
    batch = len(result.tokens)
    param_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    lines = [f"KV cache ({dtype}, {config.n_layers} layers, head_dim {config.head_dim}, context "
             f"{result.context_len} tokens x batch {batch}); allocated {result.cache_bytes:,} bytes"]
    for row in kv_bytes_table(config, dtype, result.context_len, batch):
        marker = "  <- this model" if row["this_model"] else ""
        outweighs = param_bytes // row["bytes_per_token"]
        lines.append(f"  {row['attention']} ({row['n_kv_heads']} KV heads): {row['bytes_per_token']:,} B/token, "
                     f"{row['context_bytes']:,} B for the context; outweighs the {param_bytes:,} B of weights "
                     f"past {outweighs:,} tokens{marker}")
    label, peak = peak_memory(device)
    lines.append(f"{label}: {peak / 2**20:,.1f} MiB")
    return "\n".join(lines)

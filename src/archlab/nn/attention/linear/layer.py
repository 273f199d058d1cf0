"""Linear attention behind `ModelConfig.attn_kernel`: the call `Attention` makes, the cached state.

A linear kernel replaces softmax attention over the keys with a fixed-size state per layer: FAVOR+
keeps the running sums [S | z] per K/V head (nn/attention/linear/favor.py), Transformer-VQ and soft
VQ the last two blocks and the per-code value sums and counts (nn/attention/linear/vq.py). Each
kernel is a module with
    forward(q, k, v, state, key_mask, decoding, slopes) -> (o, new state)
with q (B, H, T, Dh), k and v (B, K, T, Dh)
(`slopes` (H,): ALiBi's, which the kernel applies itself, since it never forms the (T, S) scores a
bias is added to; only VQ takes them, nn/attention/linear/vq.py) and an `aux_loss` attribute (a
scalar tensor after a training forward, or None) that the model adds to its loss. Its option group
(`Favor`, `VQ` in nn/config/kernels.py, each an entry of `LINEAR_KERNELS`) builds it and knows
its costs. `LinearAttention` reads and writes the state in the `KVCache` (its state layers hold no
keys) and keeps the aux loss.

Shapes: B batch, H query heads, K K/V heads, T new tokens, Dh head dim.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from archlab.nn.config import ModelConfig
from archlab.nn.kv_cache import KVCache


class LinearAttention(nn.Module):
    """The state-cache side of a linear kernel: q, k, v of the new tokens in, their
    attention output out."""

    def __init__(self, config: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        options = config.linear_kernel
        self.kernel = options.build(
            config.n_kv_heads, config.head_dim, config.resolved_attn_scale, layer_idx
        )
        # False: every decode step's state has a new shape
        self.static_decode_shape = options.static_decode_shape

    @property
    def aux_loss(self) -> torch.Tensor | None:
        return self.kernel.aux_loss

    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        cache: KVCache | None,
        slopes: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """q (B, H, T, Dh), k and v (B, K, T, Dh) -> o (B, H, T, Dh) in v's dtype; with a cache,
        from and into its state; `slopes` (H,) ALiBi's, or None. The kernels run in float32 at
        least, autocast off: their sums (a code's count, a feature's running total) would lose their
        low digits in bf16."""
        dtype = torch.promote_types(v.dtype, torch.float32)
        with torch.autocast(q.device.type, enabled=False):
            return self._run(q.to(dtype), k.to(dtype), v.to(dtype), cache, slopes).to(v.dtype)

    def _run(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        cache: KVCache | None,
        slopes: torch.Tensor | None,
    ) -> torch.Tensor:
        if cache is None:
            return self.kernel(q, k, v, None, slopes=slopes)[0]
        t = q.shape[2]
        if cache.pos + t > cache.max_len:
            raise ValueError(
                f"KV cache full: {cache.pos + t} tokens needed, capacity max_len={cache.max_len}"
            )
        if not cache.state_layers[self.layer_idx]:
            raise ValueError(
                f"layer {self.layer_idx} uses a linear kernel but its cache layer holds keys: "
                "build the cache with KVCache.for_model"
            )
        o, cache.states[self.layer_idx] = self.kernel(
            q, k, v, cache.states[self.layer_idx], cache.chunk_mask, decoding=True, slopes=slopes
        )
        return o

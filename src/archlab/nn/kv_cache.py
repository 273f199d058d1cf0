"""The key/value cache that turns the model's forward into incremental decoding.

It preallocates, per layer, K and V of shape (B, K, L, Dh) with K the number of KV heads, so grouped-query
and multi-query models really store fewer bytes. It stores keys and values only (plus which slots hold
real tokens, for left-padded batches); positions, masks and RoPE are the model's business.

Shapes: B batch, K KV heads, L capacity (slots), T new tokens, Dh head dim.
"""

from __future__ import annotations

import torch


class KVCache:
    """Per-layer K/V buffers filled slot by slot; `pos` is the number of slots already written."""

    def __init__(
        self,
        n_layers: int,
        batch_size: int,
        max_len: int,
        n_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> None:
        shape = (batch_size, n_kv_heads, max_len, head_dim)
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)]
        self.max_len = max_len
        self.pos = 0
        # (B, L) True where a slot holds a real token; None means every slot does (no padding)
        self.key_mask: torch.Tensor | None = None

    @classmethod
    def for_model(cls, model: torch.nn.Module, batch_size: int, max_len: int) -> KVCache:
        """A cache sized for `model` (a TransformerLM), on its device and in its parameters' dtype."""
        cfg = model.config
        p = next(model.parameters())
        return cls(cfg.n_layers, batch_size, max_len, cfg.n_kv_heads, cfg.head_dim, p.dtype, p.device)

    def get_pos(self) -> int:
        return self.pos

    def set_padding(self, attention_mask: torch.Tensor) -> None:
        """Record which of the next slots are real tokens: attention_mask (B, T), 1 = token, 0 = padding."""
        if self.key_mask is None:
            self.key_mask = torch.ones(self.k[0].shape[0], self.max_len, dtype=torch.bool, device=self.k[0].device)
        t = attention_mask.shape[1]
        self.key_mask[:, self.pos : self.pos + t] = attention_mask.bool()

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write k, v (B, K, T, Dh) at slots pos..pos+T-1 of `layer`; return all filled slots (B, K, S, Dh)."""
        end = self.pos + k.shape[2]
        if end > self.max_len:
            raise ValueError(f"KV cache full: {end} tokens needed, capacity max_len={self.max_len}")
        self.k[layer][:, :, self.pos : end] = k
        self.v[layer][:, :, self.pos : end] = v
        return self.k[layer][:, :, :end], self.v[layer][:, :, :end]

    def advance(self, n: int) -> None:
        """Mark n more slots as written (the model calls this once all layers have been updated)."""
        self.pos += n

    def reset(self) -> None:
        self.pos = 0
        self.key_mask = None

    def nbytes(self) -> int:
        """Bytes held by the K and V buffers of all layers."""
        return sum(t.numel() * t.element_size() for t in self.k + self.v)

"""The key/value cache that turns the model's forward into incremental decoding.

It preallocates, per layer, K and V of shape (B, K, L, Dh) with K the number of KV heads (after GQA
grouping, before `repeat_kv`), so grouped-query and multi-query models really store fewer bytes:
2 * n_layers * K * Dh * bytes per element, per token. Writes go into the preallocated slots (no torch.cat),
so a decode step costs the same Python work at any length.

Besides keys and values it keeps only what says which slots hold tokens: `key_mask` (B, L) once a
left-padded batch records its padding, and `lengths` (B,), each row's count of real tokens, from which the
next positions follow in O(1) (the position of a real token is its index among its row's real tokens).
What the keys are (RoPE applied or not, see `AttentionInputs.key_cos_sin`), masks and biases are the model's
business.

Shapes: B batch, K KV heads, L capacity (slots), T new tokens, S filled slots, Dh head dim.
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
        self.batch_size, self.max_len = batch_size, max_len
        self.pos = 0
        # (B, L) True where a slot holds a real token; None means every slot does (no padding)
        self.key_mask: torch.Tensor | None = None
        # (B,) real tokens per row once padding was recorded (else every row holds `pos`)
        self.lengths: torch.Tensor | None = None
        self._chunk_mask: torch.Tensor | None = None  # (B, T) mask of the chunk about to be written

    @classmethod
    def for_model(cls, model: torch.nn.Module, batch_size: int, max_len: int) -> KVCache:
        """A cache sized for `model` (a TransformerLM), on its device and in its parameters' dtype."""
        cfg = model.config
        p = next(model.parameters())
        return cls(cfg.n_layers, batch_size, max_len, cfg.n_kv_heads, cfg.head_dim, p.dtype, p.device)

    @staticmethod
    def bytes_per_token(n_layers: int, n_kv_heads: int, head_dim: int, dtype: torch.dtype = torch.float32) -> int:
        """K and V of every layer for one token of one sequence: 2 * n_layers * n_kv_heads * head_dim * bytes."""
        return 2 * n_layers * n_kv_heads * head_dim * torch.empty(0, dtype=dtype).element_size()

    def get_pos(self) -> int:
        return self.pos

    def set_padding(self, attention_mask: torch.Tensor) -> None:
        """Record which of the next T slots are real tokens: attention_mask (B, T), 1 = token, 0 = padding.

        Call it before the forward that writes those slots (e.g. a left-padded prompt)."""
        b, t = attention_mask.shape
        if b != self.batch_size or self.pos + t > self.max_len:
            raise ValueError(f"attention_mask of shape {(b, t)} does not fit a cache of batch {self.batch_size} "
                             f"with {self.max_len - self.pos} free slots")
        device = self.k[0].device
        if self.key_mask is None:
            self.key_mask = torch.ones(b, self.max_len, dtype=torch.bool, device=device)
            self.lengths = torch.full((b,), self.pos, dtype=torch.long, device=device)
        self._chunk_mask = attention_mask.to(device=device, dtype=torch.bool)
        self.key_mask[:, self.pos : self.pos + t] = self._chunk_mask

    def positions(self, t: int) -> torch.Tensor:
        """Positions of the next t tokens: (T,) = pos + arange(t) without padding, else (B, T) counting
        only each row's real tokens (padding slots get the position of the token before them, or 0)."""
        device = self.k[0].device
        if self.lengths is None:
            return torch.arange(self.pos, self.pos + t, device=device)
        if self._chunk_mask is None:
            return self.lengths[:, None] + torch.arange(t, device=device)  # (B, T)
        return (self.lengths[:, None] + self._chunk_mask.long().cumsum(dim=1) - 1).clamp_min(0)  # (B, T)

    def slot_positions(self, s: int) -> torch.Tensor:
        """Positions of the tokens in slots 0..s-1: (S,) without padding, else (B, S)."""
        device = self.k[0].device
        if self.key_mask is None:
            return torch.arange(s, device=device)
        return (self.key_mask[:, :s].long().cumsum(dim=1) - 1).clamp_min(0)  # (B, S)

    def update(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write k, v (B, K, T, Dh) at slots pos..pos+T-1 of `layer`; return all filled slots (B, K, S, Dh)."""
        end = self.pos + k.shape[2]
        if end > self.max_len:
            raise ValueError(f"KV cache full: {end} tokens needed, capacity max_len={self.max_len}")
        k_buf, v_buf = self.k[layer], self.v[layer]
        k_buf.narrow(2, self.pos, k.shape[2]).copy_(k)  # narrow: one view op, where [:, :, a:b] costs three
        v_buf.narrow(2, self.pos, v.shape[2]).copy_(v)
        return k_buf.narrow(2, 0, end), v_buf.narrow(2, 0, end)

    def advance(self, n: int) -> None:
        """Mark n more slots as written (the model calls this once all layers have been updated)."""
        if self.lengths is not None:
            self.lengths += n if self._chunk_mask is None else self._chunk_mask.sum(dim=1)
        self._chunk_mask = None
        self.pos += n

    def reset(self) -> None:
        self.pos = 0
        self.key_mask = self.lengths = self._chunk_mask = None

    def nbytes(self) -> int:
        """Bytes held by the K and V buffers of all layers."""
        return sum(t.numel() * t.element_size() for t in self.k + self.v)

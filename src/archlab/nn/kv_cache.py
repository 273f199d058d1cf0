"""The key/value cache that turns the model's forward into incremental decoding.

It preallocates, per layer, K and V of shape (B, K, L_layer, Dh) with K the number of KV heads
(after GQA grouping, before `repeat_kv`), so grouped-query and multi-query models really store fewer
bytes. A full layer keeps every slot, L_layer = L (the capacity); a sliding-window layer of window W
keeps only its window, a ring of L_layer = min(W, L) slots where token slot a lives at ring slot a
mod W (Mistral's rolling buffer, Jiang et al., arXiv 2310.06825, section 2). So the cache holds
    bytes = 2 * K * Dh * bytes per element * B * sum over layers of L_layer,
(K * (Dh + Dv) in place of 2 K Dh for a GAU, whose one value head is Dv = e wide), the formula of
`archlab.costs.kv_cache_bytes` (tests check `nbytes()` against it). Writes go into the preallocated
slots, so a decode step costs the same Python work at any length.

What a ring layer's `update` returns, for T new tokens after `pos` written ones (`key_slots` says
which token slot each returned key holds, for the model's masks, biases and key positions):
- pos + T <= W: the ring has not wrapped; slots 0..pos+T-1 in order, as a full layer.
- T = 1 past the window: the token is written over the oldest one and the whole ring is returned (W
  keys, exactly the query's window, in ring order; attention does not care about key order, masks
  follow the slots).
- a chunk of T > 1 past the window: the kept keys followed by the T new ones (a temporary of up to W
  + T keys: the chunk's first queries still need keys the chunk overwrites), then the newest min(T,
  W) tokens are written into the ring. Only the ring persists between calls.

Besides keys and values it keeps only what says which slots hold tokens: `key_mask` (B, L) once a
left-padded batch records its padding (one byte per slot, indexed by token slot for every layer),
and `lengths` (B,), each row's count of real tokens, from which the next positions follow in O(1)
(the position of a real token is its index among its row's real tokens). What the keys are (RoPE
applied or not, see `archlab.nn.rope.RopePositions`), masks and biases are the model's business;
where that depends on the model's mode (training or eval), `written_training` records the mode the
keys were written in, for the model to check.

A layer with a linear attention kernel (`state_layers[i]`, nn/attention/linear/layer.py) keeps no
keys at all: it holds its kernel's fixed-size decoding state in `states[i]` (FAVOR+: the running
sums; VQ: the last two blocks and the per-code sums), whatever the context length, and `nbytes()`
counts it. Positions and padding work the same.

Shapes: B batch, K KV heads, L capacity (token slots), W window (ring slots), T new tokens, S keys
returned by `update`, Dh head dim.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


class KVCache:
    """Per-layer K/V buffers (full layers: every slot; window layers: a ring of their window); `pos`
    is the number of token slots already written."""

    def __init__(
        self,
        n_layers: int,
        batch_size: int,
        max_len: int,
        n_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
        windows: Sequence[int | None] | None = None,
        state_layers: Sequence[bool] | None = None,
        value_dim: int | None = None,
    ) -> None:
        """`windows[i]` is layer i's sliding window (it keeps that many slots), or None for a full
        layer; None for the whole argument keeps every slot in every layer (a window layer then
        reads them all and masks, which is exact too). `state_layers[i]` True: layer i keeps a
        kernel state, no K/V. `value_dim` is the width of a value head when it differs from the
        key's (a GAU: e against s)."""
        self.windows = tuple(windows) if windows is not None else (None,) * n_layers
        if len(self.windows) != n_layers or any(w is not None and w < 1 for w in self.windows):
            raise ValueError(
                f"windows={list(self.windows)} is not allowed: one entry per layer ({n_layers}), "
                "each None (full) or a positive window"
            )
        self.has_rings = any(w is not None for w in self.windows)
        # ring slots per layer
        self.rings = [None if w is None else min(w, max_len) for w in self.windows]
        self.state_layers = tuple(state_layers) if state_layers is not None else (False,) * n_layers
        if len(self.state_layers) != n_layers:
            raise ValueError(
                f"state_layers has {len(self.state_layers)} entries for {n_layers} layers"
            )
        shapes = [
            (batch_size, n_kv_heads, 0 if stateful else ring or max_len, head_dim)
            for ring, stateful in zip(self.rings, self.state_layers)
        ]
        # a state layer's kernel state (with nbytes()), or None
        self.states: list[object | None] = [None] * n_layers
        self.k = [torch.zeros(shape, dtype=dtype, device=device) for shape in shapes]
        self.v = [
            torch.zeros((*shape[:3], value_dim or head_dim), dtype=dtype, device=device)
            for shape in shapes
        ]
        self.batch_size, self.max_len = batch_size, max_len
        self.pos = 0
        # (B, L) True where a token slot holds a real token; None means every slot does (no padding)
        self.key_mask: torch.Tensor | None = None
        # (B,) real tokens per row once padding was recorded (else every row holds `pos`)
        self.lengths: torch.Tensor | None = None
        self._chunk_mask: torch.Tensor | None = None  # (B, T) mask of the chunk about to be written
        # the mode (model.training) the first slots were written in, recorded by a model whose
        # positions depend on the mode (inverse Leaky ReRoPE, inference-only ReRoPE), which refuses
        # to continue in the other one
        self.written_training: bool | None = None

    @classmethod
    def for_model(cls, model: torch.nn.Module, batch_size: int, max_len: int) -> KVCache:
        """A cache sized for `model` (a TransformerLM), on its device and in its parameters' dtype,
        whose sliding-window layers keep only their window."""
        cfg = model.config
        p = next(model.parameters())
        # a linear kernel's layer keeps a state
        stateful = [kind == "state" for kind in model.layer_caches]
        return cls(
            cfg.n_layers,
            batch_size,
            max_len,
            cfg.n_kv_heads,
            cfg.head_dim,
            p.dtype,
            p.device,
            model.layer_windows,
            stateful,
            model.cache_value_dim,
        )

    def set_padding(self, attention_mask: torch.Tensor) -> None:
        """Record which of the next T slots are real tokens: attention_mask (B, T), 1 = token,
        0 = padding.

        Call it before the forward that writes those slots (e.g. a left-padded prompt)."""
        b, t = attention_mask.shape
        if b != self.batch_size or self.pos + t > self.max_len:
            raise ValueError(
                f"attention_mask of shape {(b, t)} does not fit a cache of batch {self.batch_size} "
                f"with {self.max_len - self.pos} free slots"
            )
        device = self.k[0].device
        if self.key_mask is None:
            self.key_mask = torch.ones(b, self.max_len, dtype=torch.bool, device=device)
            self.lengths = torch.full((b,), self.pos, dtype=torch.long, device=device)
        self._chunk_mask = attention_mask.to(device=device, dtype=torch.bool)
        self.key_mask[:, self.pos : self.pos + t] = self._chunk_mask

    @property
    def chunk_mask(self) -> torch.Tensor | None:
        """(B, T) True for the real tokens of the chunk about to be written (set_padding), or
        None: all real."""
        return self._chunk_mask

    def positions(self, t: int) -> torch.Tensor:
        """Positions of the next t tokens: (T,) = pos + arange(t) without padding, else (B, T)
        counting only each row's real tokens (padding slots get the position of the token before
        them, or 0)."""
        device = self.k[0].device
        if self.lengths is None:
            return torch.arange(self.pos, self.pos + t, device=device)
        if self._chunk_mask is None:
            return self.lengths[:, None] + torch.arange(t, device=device)  # (B, T)
        # (B, T)
        return (self.lengths[:, None] + self._chunk_mask.long().cumsum(dim=1) - 1).clamp_min(0)

    def slot_positions(self, slots: int | torch.Tensor) -> torch.Tensor:
        """Positions of the tokens in the first `slots` token slots, or in the token slots a (S,)
        tensor lists (`key_slots`): (S,) without padding, else (B, S)."""
        device = self.k[0].device
        index = torch.arange(slots, device=device) if isinstance(slots, int) else slots  # (S,)
        if self.key_mask is None:
            return index
        # (B, L); slots past those written are never read
        counts = self.key_mask.long().cumsum(dim=1) - 1
        return counts[:, index].clamp_min(0)  # (B, S)

    def reads_in_order(self, t: int, window: int) -> bool:
        """Whether `update` of t tokens returns a ring layer's slots 0..pos+t-1 in order (nothing
        was overwritten before the call), in pure Python: the model asks it every step, `key_slots`
        only when a mask, a bias or key positions need the slots."""
        p, ring = self.pos, min(window, self.max_len)
        return p + t < ring or (t > 1 and p <= ring)

    def key_slots(self, t: int, window: int) -> torch.Tensor | None:
        """Token slot of each key `update` returns (S,) for a ring of `window` slots when t tokens
        are written next; None when those are slots 0..pos+t-1 in order (the ring has not wrapped).
        See the module doc."""
        if self.reads_in_order(t, window):
            return None
        p, ring = self.pos, min(window, self.max_len)
        device = self.k[0].device
        j = torch.arange(ring, device=device)
        # the ring after writing slot p: ring slot j holds the latest token slot a <= p, a = j mod W
        if t == 1:
            return p - (p - j) % ring  # (W,)
        kept = (p - 1) - (p - 1 - j) % ring  # the ring before this chunk: token slots p-W..p-1
        return torch.cat((kept, torch.arange(p, p + t, device=device)))  # (W + T,)

    def update(
        self, layer: int, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write k, v (B, K, T, Dh) as token slots pos..pos+T-1 of `layer`; return the keys and
        values the new queries attend to (B, K, S, Dh): every filled slot, or for a ring layer what
        the module doc says."""
        t = k.shape[2]
        end = self.pos + t
        if end > self.max_len:
            raise ValueError(f"KV cache full: {end} tokens needed, capacity max_len={self.max_len}")
        k_buf, v_buf, ring = self.k[layer], self.v[layer], self.rings[layer]
        # every slot so far fits: write in place, read the filled prefix
        if ring is None or end < ring:
            # narrow: one view op, where [:, :, a:b] costs three
            k_buf.narrow(2, self.pos, t).copy_(k)
            v_buf.narrow(2, self.pos, t).copy_(v)
            return k_buf.narrow(2, 0, end), v_buf.narrow(2, 0, end)
        if t == 1:  # decoding past the window: overwrite the oldest token, attend to the whole ring
            # an index tensor, not narrow(pos % W): a compiled step would specialise on the slice's
            # offset (whether it is 0) and compile twice; arange with host ints launches no sync
            slot = torch.arange(self.pos % ring, self.pos % ring + 1, device=k.device)
            k_buf.index_copy_(2, slot, k)
            v_buf.index_copy_(2, slot, v)
            return k_buf, v_buf
        kept = min(self.pos, ring)
        keys, values = (
            torch.cat((k_buf.narrow(2, 0, kept), k), dim=2),
            torch.cat((v_buf.narrow(2, 0, kept), v), dim=2),
        )
        n = min(t, ring)  # the newest n tokens are what the ring keeps
        index = torch.arange(end - n, end, device=k.device) % ring
        k_buf.index_copy_(2, index, k[:, :, t - n :])
        v_buf.index_copy_(2, index, v[:, :, t - n :])
        return keys, values  # (B, K, kept + T, Dh)

    def advance(self, n: int) -> None:
        """Mark n more slots as written (the model calls this once all layers have been updated)."""
        if self.lengths is not None:
            self.lengths += n if self._chunk_mask is None else self._chunk_mask.sum(dim=1)
        self._chunk_mask = None
        self.pos += n

    def rewind(self, pos: int) -> None:
        """Forget the slots from `pos` on, so the next tokens are written there again (re-timing one
        decode step at a fixed cache length, discarding a rejected draft). Only without recorded
        padding (`lengths` and `key_mask` would have to forget per row) and before any ring has
        wrapped (the tokens the forgotten ones overwrote are gone)."""
        wrapped = any(ring is not None and self.pos > ring for ring in self.rings)
        if not 0 <= pos <= self.pos or self.key_mask is not None or wrapped:
            raise ValueError(
                f"rewind({pos}) is not allowed: a position in 0..{self.pos} (the slots written) of "
                "a cache without recorded padding whose sliding-window rings have not wrapped"
            )
        self.pos = pos
        if pos == 0:  # nothing written is kept: the next forward may write in either mode
            self.written_training = None

    def nbytes(self) -> int:
        """Bytes held by the K and V buffers of all layers (what the cache really allocated) and by
        the state layers' kernel states."""
        kv = sum(t.numel() * t.element_size() for t in self.k + self.v)
        return kv + sum(s.nbytes() for s in self.states if s is not None)

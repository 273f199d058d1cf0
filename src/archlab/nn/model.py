"""TransformerLM: token embedding (+ scale, + positions), N blocks, final norm, head, softcap.

One forward serves training, evaluation and decoding: `forward(input_ids, positions=None,
cache=None)`. Positions default to the cache offset + arange(T); with a KVCache the same forward
appends the new tokens' keys and values and returns only their logits. Given `targets`, it returns
the loss instead (`LossOutput`: mean cross entropy + z-loss + the attention kernels' losses such
as VQ's commitment, each term for the logs); the loss lives in the forward so that DDP, FSDP and
torch.compile wrap it with the model. What attention needs besides x (masks, RoPE plans, ring
slots, log-n) is built once per forward per kind of layer by nn/attention/inputs.py. The training
fast paths (nn/fast/install.py) are installed from outside (`fast.install`); this module runs
only the formulas.

Shapes: B batch, T new tokens, D d_model, V vocabulary.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn as nn

from archlab.nn.attention.gau import GatedAttentionUnit
from archlab.nn.attention.inputs import AttentionInputsBuilder, build_rotaries
from archlab.nn.attention.linear.layer import LinearAttention
from archlab.nn.block import Block
from archlab.nn.config import ModelConfig
from archlab.nn.config.choices import ABSOLUTE_POSITIONS, ATTENTION_BIASES
from archlab.nn.functional import IGNORE_INDEX, cross_entropy, softcap, swap_halves, z_loss
from archlab.nn.init import init_model
from archlab.nn.kv_cache import KVCache
from archlab.nn.norms import build_norm
from archlab.nn.positions.absolute import LearnedPositions

# activation dtypes the embedding multiplier is rounded to
LOW_PRECISION = (torch.bfloat16, torch.float16)


class LossOutput(NamedTuple):
    """What `TransformerLM.forward` returns given targets: `loss` = ce + z, the objective; `ce`
    and `z` (z_loss_coef * mean log(Z)^2, exactly 0 when off) are for the logs: detach them
    before keeping them."""

    loss: torch.Tensor
    ce: torch.Tensor
    z: torch.Tensor
    # the attention kernels' own losses (VQ commitment), already in `loss`
    aux: torch.Tensor | None = None


class TransformerLM(nn.Module):
    """A decoder-only language model whose every architectural choice comes from `config`."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        c = self.config = config
        self.embed_tokens = nn.Embedding(c.vocab_size, c.d_model)
        self.embed_multiplier = math.sqrt(c.d_model) if c.embed_scale == "sqrt_d" else 1.0
        # the multiplier rounded to each activation dtype, as Gemma does (bf16: sqrt(3072) = 55.43
        # -> 55.5), so Gemma checkpoints give transformers' low-precision logits; float32 is
        # unchanged
        self.embed_multipliers = {
            dt: torch.tensor(self.embed_multiplier, dtype=dt, device="cpu").item()
            for dt in LOW_PRECISION
        }
        absolute = ABSOLUTE_POSITIONS.get(c.position)
        self.pos_embed = absolute(c.d_model, c.max_seq_len) if absolute is not None else None
        self.rel_bias = self._build_attention_bias(c)
        rotaries = build_rotaries(c)
        self.rotary, self.rotary_local = rotaries["global"], rotaries["local"]
        self.drop = nn.Dropout(c.dropout) if c.dropout else None  # p = 0: no call at all
        self.layers = nn.ModuleList(Block(c, i) for i in range(c.n_layers))
        self.attention_inputs = AttentionInputsBuilder(c, rotaries, self.rel_bias)
        # per layer: its window (None: full)
        self.layer_windows = self.attention_inputs.layer_windows
        # per layer: "global", "local" or None (NoPE)
        self.layer_ropes = self.attention_inputs.layer_ropes
        # the rotaries whose positions differ between training and eval mode: a cache must stay in
        # one mode
        self.mode_dependent_rotaries = [
            r for r in rotaries.values() if r is not None and r.mode_dependent
        ]
        self.norm = (
            build_norm(c.norm, c.d_model, c.norm_eps, c.norm_bias, c.norm_unit_offset)
            if c.final_norm
            else None
        )
        # a tied head's projection after the final norm (tied_head="proj": BERT's MLM transform,
        # orthogonal init)
        self.head_proj = (
            nn.Linear(c.d_model, c.d_model, bias=False) if c.tied_head == "proj" else None
        )
        self.lm_head = nn.Linear(c.d_model, c.vocab_size, bias=c.lm_head_bias)
        if c.tie_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        self.init_weights()

    @staticmethod
    def _build_attention_bias(c: ModelConfig) -> nn.Module | None:
        if c.position == "relative":
            return ATTENTION_BIASES["relative"](
                c.n_heads, c.relative_buckets, c.relative_max_distance
            )
        if c.position == "alibi":
            return ATTENTION_BIASES["alibi"](c.n_heads)
        return None

    @torch.no_grad()
    def materialise_buffers(self, device: torch.device) -> None:
        """After building on the meta device and assigning weights: make every buffer still on meta
        on `device` and let its module compute it (RoPE tables, ALiBi slopes, FAVOR projections).
        A module whose buffers all came with the weights (a VQ codebook's statistics) is
        left as loaded."""
        for module in self.modules():
            meta = [
                name
                for name, buffer in module._buffers.items()
                if buffer is not None and buffer.is_meta
            ]
            for name in meta:
                module._buffers[name] = torch.empty_like(module._buffers[name], device=device)
            if meta and hasattr(module, "reset_buffers"):
                module.reset_buffers()

    def init_weights(self, seed: int | None = None) -> None:
        """Initialise every parameter and computed buffer (nn/init.py has the table);
        safe to call again, and the way to materialise a model built on the meta device:
        `model.to_empty(device=d); model.init_weights(seed)`. Each tensor is drawn from
        its own generator seeded by (`seed`, its name); `seed=None` draws one from
        torch's global generator."""
        init_model(self, seed)

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor | None = None,
        cache: KVCache | None = None,
        logits_to_keep: int | None = None,
        targets: torch.Tensor | None = None,
        z_loss_coef: float = 0.0,
    ) -> torch.Tensor | LossOutput:
        """input_ids (B, T) -> logits (B, T, V); positions (T,) or (B, T) default to arange(T), or
        with a cache to the next positions of each row (`KVCache.positions`). `logits_to_keep` = n
        returns only the last n positions' logits (B, n, V): a generation prefill needs one, not a
        (B, T, V) tensor. With `targets` (B, T) (IGNORE_INDEX = not scored) it returns `LossOutput`
        instead of the logits."""
        check_token_ids(input_ids, self.config.vocab_size)
        if targets is not None and (cache is not None or logits_to_keep is not None):
            raise ValueError(
                "TransformerLM: targets score every position of a training batch; they cannot be "
                "combined with a cache or logits_to_keep"
            )
        if cache is not None and self.mode_dependent_rotaries:
            self._check_cache_mode(cache)
        # (B, T), a bound on them or None
        positions, bound = self._positions(input_ids, positions, cache)
        x = self._embed(input_ids, positions)  # (B, T, D)
        for layer, inputs in zip(self.layers, self.attention_inputs(positions, cache, bound)):
            x = layer(x, inputs)  # (B, T, D)
        if cache is not None:
            cache.advance(input_ids.shape[1])
        if logits_to_keep is not None:
            x = x[:, -logits_to_keep:]  # (B, n, D)
        if self.norm is not None:
            x = self.norm(x)
        x = self._tied_head_input(x)  # (B, T, D)
        if targets is not None:
            out = self._loss(x, targets, z_loss_coef)
            aux = self._aux_loss()
            return out if aux is None else LossOutput(out.loss + aux, out.ce, out.z, aux)
        return softcap(self.lm_head(x), self.config.final_softcap)  # (B, T, V)

    def _positions(
        self, input_ids: torch.Tensor, positions: torch.Tensor | None, cache: KVCache | None
    ) -> tuple[torch.Tensor, int | None]:
        """The new tokens' positions (B, T), checked, and an upper bound on them known without
        reading them (no host sync; None when the caller gave positions)."""
        B, T = input_ids.shape
        bound = None
        if positions is None:  # a cache knows each row's real-token count (left padding)
            positions = (
                cache.positions(T)
                if cache is not None
                else torch.arange(T, device=input_ids.device)
            )
            # a padded row has fewer real tokens, never more
            bound = (cache.pos if cache is not None else 0) + T - 1
        positions = positions.expand(B, T) if positions.dim() == 1 else positions  # (B, T)
        self._check_positions(positions, bound)
        if cache is not None and cache.has_rings and cache.windows != self.layer_windows:
            raise ValueError(
                f"a KVCache with windows {list(cache.windows)} does not fit this model's layers "
                f"{list(self.layer_windows)}: build it with KVCache.for_model"
            )
        return positions, bound

    def _check_cache_mode(self, cache: KVCache) -> None:
        """Record the mode a cache's first slots are written in, and refuse to continue it in the
        other: with a remap in one mode only (inverse Leaky ReRoPE in training, inference-only
        ReRoPE in eval) the cache holds keys unrotated in that mode and rotated in the other, and
        reading one as the other is silently wrong."""
        if cache.pos == 0:
            cache.written_training = self.training
            return
        if cache.written_training is None or cache.written_training == self.training:
            return
        rotary = self.mode_dependent_rotaries[0]
        remaps_in = "training" if rotary.kind.training_only else "eval"
        modes = ("training", "eval") if cache.written_training else ("eval", "training")
        raise ValueError(
            f"this KVCache was filled in {modes[0]} mode and is continued in {modes[1]} mode, but "
            f"rope.scaling kind={rotary.scaling.kind!r} remaps positions in {remaps_in} mode only, "
            "so its cached keys mean other positions in the other mode: fill a new cache in the "
            "mode you decode in (model.eval() before the prefill)"
        )

    def _embed(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Token embeddings (times the embedding scale), plus absolute positions,
        then embedding dropout."""
        x = self.embed_tokens(input_ids)  # (B, T, D)
        if self.embed_multiplier != 1.0:
            x = x * self.embed_multipliers.get(x.dtype, self.embed_multiplier)
        if self.pos_embed is not None:
            x = x + self.pos_embed(positions).to(x.dtype)
        return x if self.drop is None else self.drop(x)

    def _tied_head_input(self, x: torch.Tensor) -> torch.Tensor:
        """What the (tied) head reads: the final hidden states, channel halves
        swapped, or projected."""
        match self.config.tied_head:
            case "swap":
                return swap_halves(x)
            case "proj":
                return self.head_proj(x)
        return x

    def _loss(self, x: torch.Tensor, targets: torch.Tensor, z_loss_coef: float) -> LossOutput:
        """Head and loss from the final hidden states x (B, T, D), through the (B, T, V) logits
        (Inductor, under compile, fuses those itself; `fast.install` replaces this with a chunked
        head + loss)."""
        logits = softcap(self.lm_head(x), self.config.final_softcap)  # (B, T, V)
        ce = cross_entropy(logits, targets)
        ignore = targets.flatten() == IGNORE_INDEX
        z = (
            z_loss(logits.flatten(0, 1), z_loss_coef, ignore)
            if z_loss_coef
            else torch.zeros_like(ce)
        )
        # ce and z stay attached: torch 2.13's compile drops the gradient of `loss` when detached
        # aliases of its terms are returned beside it (LossOutput's readers detach them)
        return LossOutput(ce + z, ce, z)

    def _aux_loss(self) -> torch.Tensor | None:
        """The sum of the linear attention kernels' losses of this forward (VQ's
        commitment), or None."""
        terms = [
            m.aux_loss
            for m in self.modules()
            if isinstance(m, LinearAttention) and m.aux_loss is not None
        ]
        return sum(terms[1:], terms[0]) if terms else None

    def _check_positions(self, positions: torch.Tensor, bound: int | None) -> None:
        if isinstance(self.pos_embed, LearnedPositions):
            if bound is not None and bound < self.config.max_seq_len:
                return
            top = int(positions.max())
            if top >= self.config.max_seq_len:
                raise ValueError(
                    f"position {top} is past the learned position table (max_seq_len="
                    f"{self.config.max_seq_len}); learned positions cannot extrapolate"
                )

    @property
    def layer_caches(self) -> list[str]:
        """What each layer keeps in a KVCache: "keys" (its keys and values) or "state"
        (a linear kernel's)."""
        return ["keys" if layer.attn.linear is None else "state" for layer in self.layers]

    @property
    def cache_value_dim(self) -> int | None:
        """The width of a cached value when it differs from head_dim (a GAU's values are e = d_ff
        wide), or None."""
        return self.config.d_ff if isinstance(self.layers[0].attn, GatedAttentionUnit) else None

    @property
    def static_decode_shape(self) -> bool:
        """Whether every decode step sees a cache of the same shapes, so a compiled step never
        recompiles: not with a linear kernel whose state grows and shrinks (VQ's tail of one
        to two blocks)."""
        return all(m.static_decode_shape for m in self.modules() if isinstance(m, LinearAttention))

    def num_parameters(self) -> int:
        """Distinct parameters (a tied head counts once)."""
        return sum(p.numel() for p in self.parameters())


def check_token_ids(ids: torch.Tensor, vocab_size: int) -> None:
    """Integer ids in 0..vocab_size-1, or one line saying which is not. The range is read
    only on the CPU (and not while compiling): on an accelerator reading it would sync the
    host every step."""
    if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
        raise ValueError(f"input_ids must hold integer token ids, got dtype {ids.dtype}")
    if ids.device.type == "cpu" and ids.numel() and not torch.compiler.is_compiling():
        lo, hi = (int(v) for v in torch.aminmax(ids))
        if lo < 0 or hi >= vocab_size:
            raise ValueError(
                f"token id {hi if hi >= vocab_size else lo} is outside the "
                f"model's vocabulary (0..{vocab_size - 1})"
            )

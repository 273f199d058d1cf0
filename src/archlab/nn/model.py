"""TransformerLM: token embedding (+ scale, + absolute positions), N blocks, final norm, head, softcap.

One forward serves training, evaluation and decoding: `forward(input_ids, positions=None, cache=None)`.
Positions default to the cache offset + arange(T); with a KVCache the same forward appends the new
tokens' keys and values and returns only their logits. Given `targets`, it returns the loss instead
(`LossOutput`: mean cross entropy + z-loss + the attention kernels' losses such as VQ's commitment, each
term for the logs); the loss lives in the forward so that DDP, FSDP and torch.compile wrap it with the model.
What attention needs besides x (masks, RoPE plans, ring
slots, log-n) is built once per forward per kind of layer by nn/attention_inputs.py. The training fast paths
(nn/fused.py) are installed from outside (`fused.install`); this module runs only the formulas.

Shapes: B batch, T new tokens, D d_model, V vocabulary.
"""

from __future__ import annotations

import hashlib
import math
from typing import NamedTuple

import torch
import torch.nn as nn

from archlab.nn.attention_inputs import AttentionInputsBuilder
from archlab.nn.block import Block
from archlab.nn.config import ModelConfig
from archlab.nn.functional import IGNORE_INDEX, cross_entropy, softcap, swap_halves, z_loss
from archlab.nn.gau import GAU
from archlab.nn.kv_cache import KVCache
from archlab.nn.linear_kernels import LinearAttention
from archlab.nn.norms import RMSNorm, build_norm, deepnorm_constants
from archlab.nn.positions import ABSOLUTE_POSITIONS, ATTENTION_BIASES, LearnedPositions
from archlab.nn.rope import RotaryEmbedding

GPT2_INIT_STD = 0.02  # Radford et al. 2019
TRUNC_STDS = 3.0  # the CS336 lecture notes' trunc_normal clips at +-3 standard deviations
LOW_PRECISION = (torch.bfloat16, torch.float16)  # activation dtypes the embedding multiplier is rounded to


class LossOutput(NamedTuple):
    """What `TransformerLM.forward` returns given targets: `loss` = ce + z, the objective; `ce` and `z`
    (z_loss_coef * mean log(Z)^2, exactly 0 when off) are for the logs: detach them before keeping them."""

    loss: torch.Tensor
    ce: torch.Tensor
    z: torch.Tensor
    aux: torch.Tensor | None = None  # the attention kernels' own losses (VQ commitment), already in `loss`


class TransformerLM(nn.Module):
    """A decoder-only language model whose every architectural choice comes from `config`."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        c = self.config = config
        self.embed_tokens = nn.Embedding(c.vocab_size, c.d_model)
        self.embed_multiplier = math.sqrt(c.d_model) if c.embed_scale == "sqrt_d" else 1.0
        # the multiplier rounded to each activation dtype, as Gemma does (bf16: sqrt(3072) = 55.43 -> 55.5), so
        # Gemma checkpoints give transformers' low-precision logits; float32 is unchanged
        self.embed_multipliers = {dt: torch.tensor(self.embed_multiplier, dtype=dt, device="cpu").item()
                                  for dt in LOW_PRECISION}
        absolute = ABSOLUTE_POSITIONS.get(c.position)
        self.pos_embed = absolute(c.d_model, c.max_seq_len) if absolute is not None else None
        self.rel_bias = self._build_attention_bias(c)
        self.rotary = (RotaryEmbedding(c.rope_dim, c.rope_theta, c.rope_layout, c.rope_scaling, c.max_seq_len)
                       if c.position == "rope" else None)
        # window layers' RoPE when it differs (their own theta and, with rope_scaling_local off, unscaled: Gemma 3)
        self.rotary_local = (RotaryEmbedding(
            c.rope_dim, c.rope_theta if c.rope_theta_local is None else c.rope_theta_local, c.rope_layout,
            c.rope_scaling if c.rope_scaling_local else None, c.max_seq_len)
            if any(c.layer_rope(i) == "local" for i in range(c.n_layers)) else None)
        self.drop = nn.Dropout(c.dropout) if c.dropout else None  # p = 0: no call at all
        self.layers = nn.ModuleList(Block(c, i) for i in range(c.n_layers))
        rotaries = {"global": self.rotary, "local": self.rotary_local}
        self.attention_inputs = AttentionInputsBuilder(c, rotaries, self.rel_bias)
        self.layer_windows = self.attention_inputs.layer_windows  # per layer: its window (None: full)
        self.layer_ropes = self.attention_inputs.layer_ropes  # per layer: "global", "local" or None (NoPE)
        self.norm = build_norm(c.norm, c.d_model, c.norm_eps, c.norm_bias, c.norm_unit_offset) if c.final_norm else None
        # a tied head's projection after the final norm (tied_head="proj": BERT's MLM transform, orthogonal init)
        self.head_proj = nn.Linear(c.d_model, c.d_model, bias=False) if c.tied_head == "proj" else None
        self.lm_head = nn.Linear(c.d_model, c.vocab_size, bias=c.lm_head_bias)
        if c.tie_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        self.init_weights()

    @staticmethod
    def _build_attention_bias(c: ModelConfig) -> nn.Module | None:
        if c.position == "relative":
            return ATTENTION_BIASES["relative"](c.n_heads, c.relative_buckets, c.relative_max_distance)
        if c.position == "alibi":
            return ATTENTION_BIASES["alibi"](c.n_heads)
        return None

    @torch.no_grad()
    def materialise_buffers(self, device: torch.device) -> None:
        """After building on the meta device and assigning weights: make every buffer still on meta on `device`
        and let its module compute it (RoPE tables, ALiBi slopes, FAVOR projections). A module whose buffers all
        came with the weights (a VQ codebook's statistics) is left as loaded."""
        for module in self.modules():
            meta = [name for name, buffer in module._buffers.items() if buffer is not None and buffer.is_meta]
            for name in meta:
                module._buffers[name] = torch.empty_like(module._buffers[name], device=device)
            if meta and hasattr(module, "reset_buffers"):
                module.reset_buffers()

    def init_weights(self, seed: int | None = None) -> None:
        """Initialise every parameter and computed buffer; safe to call again, and the way to materialise a
        model built on the meta device: `model.to_empty(device=d); model.init_weights(seed)`.

        | parameter                     | trunc_normal (CS336 lecture notes)        | gpt2                         |
        |-------------------------------|-------------------------------------------|------------------------------|
        | Linear weight [out, in]       | N(0, 2/(in+out)) clipped at +-3 std       | N(0, 0.02^2)                 |
        | o_proj, down_proj (residual)  | same                                      | std 0.02 / sqrt(2 n_layers)  |
        | token embedding               | N(0, 1) clipped at +-3; tied: std d^-1/2  | N(0, 0.02^2)                 |
        | learned positions, rel. bias  | N(0, 0.02^2)                              | N(0, 0.02^2)                 |
        | biases                        | 0                                         | 0                            |
        | norm gains                    | 1 (0 when stored as 1 + w)                | same                         |
        | tied head projection          | orthogonal (P^T P = I)                    | same                         |
        | GAU scale gamma / offset beta | 1 / 0                                     | same                         |
        | deepnorm: v rows of qkv_proj, | the std above times beta = (8 n_layers)^(-1/4) (DeepNet, arXiv         |
        |   o_proj, FFN; GAU u, v, o    |   2203.00555); q, k (a GAU's z) unscaled                                 |
        A tied embedding is also the output matrix, so under trunc_normal it takes std d^-1/2 (unit-scale
        logits from unit-RMS features) instead of 1, which would start the loss far above log V. With residual
        branches near zero a plain tied model still starts as "repeat the input": loss ~ log(e^(d std) + V - 1)
        (Su, kexue.fm/archives/9698), ~ sqrt(d) nats at std d^-1/2; `tied_embed_init="log_n_over_d"` (std log(V)/d,
        ~ log(2V - 1)) and `tied_head` "swap" / "proj" (~ log V + 1/2) are his remedies.

        Each random tensor is drawn on the CPU from its own generator, seeded by a SHA-256 of
        (`seed`, its parameter name) (`param_seed`): an arm that changes one tensor's shape keeps every other
        tensor's init bit for bit (common random numbers across arms), and the init is the same on every device
        and rank. `seed=None` draws one from torch's global generator (so `torch.manual_seed` still decides).
        """
        c = self.config
        if seed is None:
            seed = int(torch.randint(0, 2**62, (), device="cpu"))
        if c.tie_embeddings and self.lm_head.weight is not self.embed_tokens.weight:
            self.lm_head.weight = self.embed_tokens.weight  # `to_empty` unties; re-tie before drawing
        residual_std = GPT2_INIT_STD / math.sqrt(2 * c.n_layers)
        for name, module in self.named_modules():
            if isinstance(module, nn.Linear):
                if c.init == "gpt2":
                    std = residual_std if name.endswith(("o_proj", "down_proj")) else GPT2_INIT_STD
                else:
                    std = math.sqrt(2.0 / (module.in_features + module.out_features))
                if module is self.head_proj:
                    _orthogonal(module.weight, seed, f"{name}.weight")
                elif not (c.tie_embeddings and module is self.lm_head):
                    _trunc_normal(module.weight, std, seed, f"{name}.weight")
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, (RMSNorm, GAU)):  # LayerNorm derives from RMSNorm; a GAU's gamma = 1, beta = 0
                module.reset_parameters()
            elif hasattr(module, "reset_buffers"):  # RoPE frequencies, ALiBi slopes
                module.reset_buffers()
            elif isinstance(module, LearnedPositions) or module is self.rel_bias and self.rel_bias is not None:
                for p_name, p in module.named_parameters():
                    _trunc_normal(p, GPT2_INIT_STD, seed, f"{name}.{p_name}")
        embed_std = GPT2_INIT_STD if c.init == "gpt2" else (c.d_model**-0.5 if c.tie_embeddings else 1.0)
        if c.tied_embed_init == "log_n_over_d":
            embed_std = math.log(c.vocab_size) / c.d_model  # e^(d std) = V: the self-logit no longer dominates
        _trunc_normal(self.embed_tokens.weight, embed_std, seed, "embed_tokens.weight")
        if c.norm_position == "deepnorm":
            self._deepnorm_gain()

    @torch.no_grad()
    def _deepnorm_gain(self) -> None:
        """DeepNorm's init (Wang et al. arXiv 2203.00555, figure 2): the value, output and FFN projections drawn
        with gain beta = (8 N)^(-1/4), N = n_layers; the query and key projections keep gain 1. In the fused
        [q | k | v] only the v rows are scaled; in a GAU's [u | v | z] the u and v rows (z feeds q and k)."""
        beta = deepnorm_constants(self.config.n_layers)[1]
        for layer in self.layers:
            attn = layer.attn
            if isinstance(attn, GAU):
                scaled = [(attn.uvz_proj.weight, slice(0, 2 * attn.e)), (attn.o_proj.weight, slice(None))]
            else:
                v_rows = slice((attn.n_heads + attn.n_kv_heads) * attn.head_dim, None)
                scaled = [(attn.qkv_proj.weight, v_rows), (attn.o_proj.weight, slice(None))]
                scaled += [(p, slice(None)) for name, p in layer.mlp.named_parameters() if name.endswith("weight")]
            for weight, rows in scaled:
                if not weight.is_meta:
                    weight[rows] *= beta

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor | None = None,
        cache: KVCache | None = None,
        logits_to_keep: int | None = None,
        targets: torch.Tensor | None = None,
        z_loss_coef: float = 0.0,
    ) -> torch.Tensor | LossOutput:
        """input_ids (B, T) -> logits (B, T, V); positions (T,) or (B, T) default to arange(T), or with a
        cache to the next positions of each row (`KVCache.positions`). `logits_to_keep` = n returns only the
        last n positions' logits (B, n, V): a generation prefill needs one, not a (B, T, V) tensor.
        With `targets` (B, T) (IGNORE_INDEX = not scored) it returns `LossOutput` instead of the logits."""
        check_token_ids(input_ids, self.config.vocab_size)
        if targets is not None and (cache is not None or logits_to_keep is not None):
            raise ValueError("TransformerLM: targets score every position of a training batch; they cannot be "
                             "combined with a cache or logits_to_keep")
        positions, bound = self._positions(input_ids, positions, cache)  # (B, T), a bound on them or None
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
        """The new tokens' positions (B, T), checked, and an upper bound on them known without reading them (no
        host sync; None when the caller gave positions)."""
        B, T = input_ids.shape
        bound = None
        if positions is None:  # a cache knows each row's real-token count (left padding)
            positions = cache.positions(T) if cache is not None else torch.arange(T, device=input_ids.device)
            bound = (cache.pos if cache is not None else 0) + T - 1  # a padded row has fewer real tokens, never more
        positions = positions.expand(B, T) if positions.dim() == 1 else positions  # (B, T)
        self._check_positions(positions, bound)
        if cache is not None and cache.has_rings and cache.windows != self.layer_windows:
            raise ValueError(f"a KVCache with windows {list(cache.windows)} does not fit this model's layers "
                             f"{list(self.layer_windows)}: build it with KVCache.for_model")
        return positions, bound

    def _embed(self, input_ids: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Token embeddings (times the embedding scale), plus absolute positions, then embedding dropout."""
        x = self.embed_tokens(input_ids)  # (B, T, D)
        if self.embed_multiplier != 1.0:
            x = x * self.embed_multipliers.get(x.dtype, self.embed_multiplier)
        if self.pos_embed is not None:
            x = x + self.pos_embed(positions).to(x.dtype)
        return x if self.drop is None else self.drop(x)

    def _tied_head_input(self, x: torch.Tensor) -> torch.Tensor:
        """What the (tied) head reads: the final hidden states, channel halves swapped, or projected."""
        match self.config.tied_head:
            case "swap":
                return swap_halves(x)
            case "proj":
                return self.head_proj(x)
        return x

    def _loss(self, x: torch.Tensor, targets: torch.Tensor, z_loss_coef: float) -> LossOutput:
        """Head and loss from the final hidden states x (B, T, D), through the (B, T, V) logits (Inductor, under
        compile, fuses those itself; `fused.install` replaces this with a chunked head + loss)."""
        logits = softcap(self.lm_head(x), self.config.final_softcap)  # (B, T, V)
        ce = cross_entropy(logits, targets)
        ignore = targets.flatten() == IGNORE_INDEX
        z = z_loss(logits.flatten(0, 1), z_loss_coef, ignore) if z_loss_coef else torch.zeros_like(ce)
        # ce and z stay attached: torch 2.13's compile drops the gradient of `loss` when detached aliases of
        # its terms are returned beside it (LossOutput's readers detach them)
        return LossOutput(ce + z, ce, z)

    def _aux_loss(self) -> torch.Tensor | None:
        """The sum of the linear attention kernels' losses of this forward (VQ's commitment), or None."""
        terms = [m.aux_loss for m in self.modules() if isinstance(m, LinearAttention) and m.aux_loss is not None]
        return sum(terms[1:], terms[0]) if terms else None

    def _check_positions(self, positions: torch.Tensor, bound: int | None) -> None:
        if isinstance(self.pos_embed, LearnedPositions):
            if bound is not None and bound < self.config.max_seq_len:
                return
            top = int(positions.max())
            if top >= self.config.max_seq_len:
                raise ValueError(f"position {top} is past the learned position table (max_seq_len="
                                 f"{self.config.max_seq_len}); learned positions cannot extrapolate")

    def num_parameters(self) -> int:
        """Distinct parameters (a tied head counts once)."""
        return sum(p.numel() for p in self.parameters())


def check_token_ids(ids: torch.Tensor, vocab_size: int) -> None:
    """Integer ids in 0..vocab_size-1, or one line saying which is not. The range is read only on the CPU (and
    not while compiling): on an accelerator reading it would sync the host every step."""
    if ids.dtype.is_floating_point or ids.dtype.is_complex or ids.dtype == torch.bool:
        raise ValueError(f"input_ids must hold integer token ids, got dtype {ids.dtype}")
    if ids.device.type == "cpu" and ids.numel() and not torch.compiler.is_compiling():
        lo, hi = (int(v) for v in torch.aminmax(ids))
        if lo < 0 or hi >= vocab_size:
            raise ValueError(f"token id {hi if hi >= vocab_size else lo} is outside the model's vocabulary "
                             f"(0..{vocab_size - 1})")


def param_seed(seed: int, name: str) -> int:
    """The seed of parameter `name`'s own generator: 63 bits of SHA-256("{seed}/{name}"). A stable hash, not
    Python's `hash()`, which changes per process (PYTHONHASHSEED)."""
    digest = hashlib.sha256(f"{seed}/{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def _trunc_normal(t: torch.Tensor, std: float, seed: int, name: str) -> None:
    """N(0, std^2) clipped at +-TRUNC_STDS std into `t`, drawn on the CPU from the generator of (seed, name)."""
    if t.is_meta:  # nothing to fill yet (a meta build); `to_empty` + `init_weights` draws it later
        return
    draw = t if t.device.type == "cpu" else torch.empty(t.shape, dtype=t.dtype)
    gen = torch.Generator().manual_seed(param_seed(seed, name))
    nn.init.trunc_normal_(draw, mean=0.0, std=std, a=-TRUNC_STDS * std, b=TRUNC_STDS * std, generator=gen)
    if draw is not t:
        t.copy_(draw)


def _orthogonal(t: torch.Tensor, seed: int, name: str) -> None:
    """An orthogonal matrix into `t` (nn.init.orthogonal_), drawn on the CPU from the generator of (seed, name)."""
    if t.is_meta:
        return
    draw = t if t.device.type == "cpu" else torch.empty(t.shape, dtype=t.dtype)
    nn.init.orthogonal_(draw, generator=torch.Generator().manual_seed(param_seed(seed, name)))
    if draw is not t:
        t.copy_(draw)

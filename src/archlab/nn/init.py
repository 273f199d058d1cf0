"""How a TransformerLM's parameters start: `init_model(model, seed)`, which
`TransformerLM.init_weights` calls (also the way to materialise a meta-device
build: `model.to_empty(device=d); model.init_weights(seed)`).

| parameter                    | trunc_normal (CS336 lecture notes)       | gpt2                   |
|------------------------------|------------------------------------------|------------------------|
| Linear weight [out, in]      | N(0, 2/(in+out)) clipped at +-3 std      | N(0, 0.02^2)           |
| o_proj, down_proj (residual) | same                                     | std 0.02 / sqrt(2 L)   |
| token embedding              | N(0, 1) clipped at +-3; tied: std d^-1/2 | N(0, 0.02^2)           |
| learned positions, rel. bias | N(0, 0.02^2)                             | N(0, 0.02^2)           |
| biases                       | 0                                        | 0                      |
| norm gains                   | 1 (0 when stored as 1 + w)               | same                   |
| tied head projection         | orthogonal (P^T P = I)                   | same                   |
| GAU scale gamma / offset     | 1 / 0                                    | same                   |
| deepnorm: v rows of qkv,     | the std above times beta = (8 L)^(-1/4) (DeepNet, 2203.00555); |
| o_proj, FFN; GAU u, v, o     | q, k (a GAU's z) unscaled; L = n_layers                        |
A tied embedding is also the output matrix, so under trunc_normal it takes std d^-1/2 (unit-scale
logits from unit-RMS features) instead of 1, which would start the loss far above log V. With
residual branches near zero a plain tied model still starts as "repeat the input": loss ~ log(e^(d
std) + V - 1) (Su, kexue.fm/archives/9698), ~ sqrt(d) nats at std d^-1/2;
`tied_embed_init="log_n_over_d"` (std log(V)/d, ~ log(2V - 1)) and `tied_head` "swap" / "proj" (~
log V + 1/2) are his remedies.

Each random tensor is drawn on the CPU from its own generator, seeded by a SHA-256 of (`seed`, its
parameter name) (`param_seed`): an arm that changes one tensor's shape keeps every other tensor's
init bit for bit (common random numbers across arms), and the init is the same on every device and
rank. `seed=None` draws one from torch's global generator (so `torch.manual_seed` still decides).
"""

from __future__ import annotations

import hashlib
import math

import torch
import torch.nn as nn

from archlab.nn.attention.gau import GatedAttentionUnit
from archlab.nn.norms import RMSNorm, deepnorm_constants
from archlab.nn.positions.absolute import LearnedPositions

GPT2_INIT_STD = 0.02  # Radford et al. 2019
TRUNC_STDS = 3.0  # the CS336 lecture notes' trunc_normal clips at +-3 standard deviations


def init_model(model: nn.Module, seed: int | None = None) -> None:
    """Every parameter and computed buffer of `model` (a TransformerLM) by the table above; safe
    to call again."""
    c = model.config
    if seed is None:
        seed = int(torch.randint(0, 2**62, (), device="cpu"))
    if c.tie_embeddings and model.lm_head.weight is not model.embed_tokens.weight:
        model.lm_head.weight = model.embed_tokens.weight  # `to_empty` unties; re-tie before drawing
    residual_std = GPT2_INIT_STD / math.sqrt(2 * c.n_layers)
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            if c.init == "gpt2":
                std = residual_std if name.endswith(("o_proj", "down_proj")) else GPT2_INIT_STD
            else:
                std = math.sqrt(2.0 / (module.in_features + module.out_features))
            if module is model.head_proj:
                _orthogonal(module.weight, seed, f"{name}.weight")
            elif not (c.tie_embeddings and module is model.lm_head):
                _trunc_normal(module.weight, std, seed, f"{name}.weight")
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        # LayerNorm is an RMSNorm; a GAU: gamma 1, beta 0
        elif isinstance(module, (RMSNorm, GatedAttentionUnit)):
            module.reset_parameters()
        elif hasattr(module, "reset_buffers"):  # RoPE frequencies, ALiBi slopes
            module.reset_buffers()
        elif (
            isinstance(module, LearnedPositions)
            or module is model.rel_bias
            and model.rel_bias is not None
        ):
            for p_name, p in module.named_parameters():
                _trunc_normal(p, GPT2_INIT_STD, seed, f"{name}.{p_name}")
    embed_std = (
        GPT2_INIT_STD if c.init == "gpt2" else (c.d_model**-0.5 if c.tie_embeddings else 1.0)
    )
    if c.tied_embed_init == "log_n_over_d":
        # e^(d std) = V: the self-logit no longer dominates
        embed_std = math.log(c.vocab_size) / c.d_model
    _trunc_normal(model.embed_tokens.weight, embed_std, seed, "embed_tokens.weight")
    if c.norm_position == "deepnorm":
        deepnorm_gain(model)


@torch.no_grad()
def deepnorm_gain(model: nn.Module) -> None:
    """DeepNorm's init (Wang et al. arXiv 2203.00555, figure 2): the value, output and FFN
    projections drawn with gain beta = (8 N)^(-1/4), N = n_layers; the query and key projections
    keep gain 1. In the fused [q | k | v] only the v rows are scaled; in a GAU's [u | v | z] the u
    and v rows (z feeds q and k)."""
    beta = deepnorm_constants(model.config.n_layers)[1]
    for layer in model.layers:
        attn = layer.attn
        if isinstance(attn, GatedAttentionUnit):
            scaled = [
                (attn.uvz_proj.weight, slice(0, 2 * attn.e)),
                (attn.o_proj.weight, slice(None)),
            ]
        else:
            v_rows = slice((attn.n_heads + attn.n_kv_heads) * attn.head_dim, None)
            scaled = [(attn.qkv_proj.weight, v_rows), (attn.o_proj.weight, slice(None))]
            scaled += [
                (p, slice(None))
                for name, p in layer.mlp.named_parameters()
                if name.endswith("weight")
            ]
        for weight, rows in scaled:
            if not weight.is_meta:
                weight[rows] *= beta


def param_seed(seed: int, name: str) -> int:
    """The seed of parameter `name`'s own generator: 63 bits of SHA-256("{seed}/{name}"). A stable
    hash, not Python's `hash()`, which changes per process (PYTHONHASHSEED)."""
    digest = hashlib.sha256(f"{seed}/{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def _trunc_normal(t: torch.Tensor, std: float, seed: int, name: str) -> None:
    """N(0, std^2) clipped at +-TRUNC_STDS std into `t`, drawn on the CPU from the generator
    of (seed, name)."""
    if t.is_meta:  # nothing to fill yet (a meta build); `to_empty` + `init_weights` draws it later
        return
    draw = t if t.device.type == "cpu" else torch.empty(t.shape, dtype=t.dtype)
    gen = torch.Generator().manual_seed(param_seed(seed, name))
    nn.init.trunc_normal_(
        draw, mean=0.0, std=std, a=-TRUNC_STDS * std, b=TRUNC_STDS * std, generator=gen
    )
    if draw is not t:
        t.copy_(draw)


def _orthogonal(t: torch.Tensor, seed: int, name: str) -> None:
    """An orthogonal matrix into `t` (nn.init.orthogonal_), drawn on the CPU from the generator
    of (seed, name)."""
    if t.is_meta:
        return
    draw = t if t.device.type == "cpu" else torch.empty(t.shape, dtype=t.dtype)
    nn.init.orthogonal_(draw, generator=torch.Generator().manual_seed(param_seed(seed, name)))
    if draw is not t:
        t.copy_(draw)

"""`install(model)`: the CPU training fast paths of nn/fast/ (ops, losses, attention), put into
a built model.

The readable modules (norms.py, ffn.py, attention.py, model.py) run only the formulas; a notebook's
`TransformerLM(config)` is the plain math. The trainer calls `install` beside `parallelize`
(train/distributed.py), and only where the kernels were measured (`FUSED_DEVICES`: the CPU;
docs/performance.md): on a GPU eager training runs the formulas and torch's own kernels. `install`
swaps the class of each module it speeds up for a subclass here that overrides one method, so
parameters, state dicts, init and interop are untouched:

| module            | becomes            | in training (autograd recording, not compiling, CPU)  |
|-------------------|--------------------|-------------------------------------------------------|
| RMSNorm (no bias) | FusedRMSNorm       | `rms_norm`: saves x and 1/rms only                    |
| GatedMLP (SiLU)   | FusedGatedMLP      | `activate` = `silu_mul`: one saved buffer, gradients  |
|                   |                    | in place                                              |
| Attention         | FusedAttention     | plain RoPE on q and k: `rope_qkv` (one gradient       |
|                   |                    | buffer for q, k, v); its sdpa kernel wrapped: bf16    |
|                   |                    | causal attention <= 512 tokens runs `causal_attention`|
| TransformerLM     | FusedTransformerLM | the loss: `linear_cross_entropy` (chunked head + loss)|
|                   |                    | for float32 weights, else `losses.cross_entropy`      |
Every override falls back to the formula outside those conditions (`use_fused`), so an installed
model also evaluates and generates exactly as a plain one; tests/nn/fast/test_install.py checks
fused equals unfused.

Shapes: x (B, T, D); heads (B, T, H + 2K, Dh); q (B, H, T, Dh), k and v (B, K, S, Dh); logits
(B, T, V).
"""

from __future__ import annotations

import logging

import torch
import torch.nn as nn

from archlab.nn.attention.attention import Attention
from archlab.nn.attention.inputs import AttentionInputs
from archlab.nn.attention.kernels import Kernel, KernelCall, merge_heads
from archlab.nn.config.choices import ATTENTION_KERNELS
from archlab.nn.fast.attention import causal_attention, use_causal_attention
from archlab.nn.fast.losses import cross_entropy, linear_cross_entropy
from archlab.nn.fast.ops import FUSED_DEVICES, rms_norm, rope_qkv, silu_mul, use_fused
from archlab.nn.ffn import GatedMLP
from archlab.nn.functional import IGNORE_INDEX, softcap, z_loss
from archlab.nn.model import LossOutput, TransformerLM
from archlab.nn.norms import RMSNorm

logger = logging.getLogger(__name__)


class FusedRMSNorm(RMSNorm):
    """RMSNorm with `ops.rms_norm`'s backward in training."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x if x.dtype == torch.float32 else x.float()
        if self.bias is None and use_fused(xf):
            y = rms_norm(xf, self.gain(), self.eps)
            return y if y.dtype == x.dtype else y.to(x.dtype)
        return super().forward(x)


class FusedGatedMLP(GatedMLP):
    """SwiGLU's product with `ops.silu_mul`'s backward in training."""

    def activate(self, gate_up: torch.Tensor) -> torch.Tensor:
        if self.activation == "silu" and use_fused(gate_up):
            return silu_mul(gate_up)  # (B, T, F)
        return super().activate(gate_up)


class FusedAttention(Attention):
    """The projection's split + RoPE as `ops.rope_qkv` in training, when the plan only rotates q and
    k by one pair of tables and nothing (QK-norm, KeyNorm) comes between the projection and RoPE."""

    def project(
        self, x: torch.Tensor, inp: AttentionInputs, qkv: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, ...]:
        qkv = self.qkv_proj(x) if qkv is None else qkv  # (B, T, (H + 2K) Dh)
        if self.plain_qk and inp.rope is not None and use_fused(qkv):
            tables = inp.rope.projection_tables(qkv.dtype)  # bf16 heads rotate with bf16 tables
            if tables is not None:
                H, K = self.n_heads, self.n_kv_heads
                heads = qkv.view(*x.shape[:2], H + 2 * K, self.head_dim)
                q, k, v = rope_qkv(heads, *tables, H, K, inp.rope.layout)
                return q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, heads, T, Dh)
        return super().project(x, inp, qkv)


class CausalAttentionKernel:
    """An attention kernel that runs `attention.causal_attention` for bf16 CPU training of causal
    self-attention (no mask tensor, bias, softcap, dropout or plan scores; as many K/V heads as
    query heads, up to CAUSAL_ATTENTION_MAX_LEN tokens), and the wrapped kernel otherwise."""

    def __init__(self, fallback: Kernel) -> None:
        self.fallback = fallback

    def __call__(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, call: KernelCall
    ) -> torch.Tensor:
        plain = (
            call.mask is None and call.bias is None and call.softcap is None and call.scores is None
        )
        if plain and call.dropout == 0.0 and use_causal_attention(q, k):
            return merge_heads(causal_attention(q, k, v, call.scale))  # (B, T, H*Dh)
        return self.fallback(q, k, v, call)


class FusedTransformerLM(TransformerLM):
    """The training loss through the chunked head + loss (float32 weights) or the
    fused cross entropy."""

    def _loss(self, x: torch.Tensor, targets: torch.Tensor, z_loss_coef: float) -> LossOutput:
        if not use_fused(x):
            return super()._loss(x, targets, z_loss_coef)
        head, cap = self.lm_head, self.config.final_softcap
        # under bf16 autocast its GEMMs run in bf16
        if x.dtype == head.weight.dtype == torch.float32:
            device = x.device.type
            mm_dtype = (
                torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else x.dtype
            )
            return LossOutput(
                *linear_cross_entropy(
                    x.flatten(0, 1),
                    head.weight,
                    head.bias,
                    targets.flatten(),
                    cap,
                    z_loss_coef,
                    IGNORE_INDEX,
                    mm_dtype,
                )
            )
        logits = softcap(head(x), cap).flatten(0, 1).float()  # (B*T, V)
        flat = targets.flatten()
        ce = cross_entropy(logits, flat, IGNORE_INDEX)
        z = (
            z_loss(logits, z_loss_coef, flat == IGNORE_INDEX)
            if z_loss_coef
            else torch.zeros_like(ce)
        )
        return LossOutput(ce + z, ce, z)


SUBCLASSES: dict[type[nn.Module], type[nn.Module]] = {
    RMSNorm: FusedRMSNorm,
    GatedMLP: FusedGatedMLP,
    Attention: FusedAttention,
    TransformerLM: FusedTransformerLM,
}


def install(model: TransformerLM) -> bool:
    """Swap the modules of `model` that have a fast path for their subclass above (exact classes
    only, so a LayerNorm, a LoRA wrapper or an already installed module is left alone), if every
    parameter lives on a device of FUSED_DEVICES; returns whether it did. Safe to call again."""
    devices = {p.device.type for p in model.parameters()}
    if not devices <= set(FUSED_DEVICES):
        logger.info(
            "fused fast paths not installed: measured on %s only, this model is on %s",
            ", ".join(FUSED_DEVICES),
            ", ".join(sorted(devices)),
        )
        return False
    for module in model.modules():
        fused = SUBCLASSES.get(type(module))
        if fused is not None:
            module.__class__ = fused
        if isinstance(module, Attention) and module.kernel is ATTENTION_KERNELS["sdpa"]:
            module.kernel = CausalAttentionKernel(module.kernel)
    return True

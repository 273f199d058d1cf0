"""Normalization layers: RMSNorm and LayerNorm (bias optional), plus the QK-norm builder.

Variants
- `rmsnorm`: x / sqrt(mean(x^2) + eps) * w (Zhang & Sennrich 2019, arXiv 1910.07467); no
  mean, no bias.
- `layernorm`: (x - mean) / sqrt(var + eps) * w + b (Ba et al. 2016, arXiv 1607.06450);
  `bias=False` drops b.
- `unit_offset=True` stores w zero-centred and multiplies by (1 + w), as Gemma does; the function
  is the same.

Both normalise in float32 and cast back, so bf16 activations keep a well-conditioned statistic.
(`fast.install` gives RMSNorm a hand-written backward in CPU training: nn/fast/install.py; LayerNorm
runs torch's native kernel.) Each class's `formula` is the norm as a plain composite formula that
autograd differentiates op by op: built alike, so a timing of one against the other
(archlab.lab.measures.timing, `norm_op`) measures the norms, not which of them has a hand-written
kernel. Shapes: (..., D) -> (..., D).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from archlab.nn.config.choices import NORMS


def rms_norm_formula(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, eps: float
) -> torch.Tensor:
    """x / sqrt(mean(x^2) + eps) * w (+ b), written out: one statistic, no re-centring."""
    y = x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * weight
    return y if bias is None else y + bias


def layer_norm_formula(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, eps: float
) -> torch.Tensor:
    """(x - mean) / sqrt(var + eps) * w (+ b), written out in the same style (biased
    variance, as torch)."""
    centred = x - x.mean(-1, keepdim=True)
    y = centred * torch.rsqrt((centred * centred).mean(-1, keepdim=True) + eps) * weight
    return y if bias is None else y + bias


class RMSNorm(nn.Module):
    """Root-mean-square norm: no re-centring, one gain per feature."""

    formula = staticmethod(rms_norm_formula)  # the same norm as a composite formula (module doc)

    def __init__(
        self, dim: int, eps: float = 1e-5, bias: bool = False, unit_offset: bool = False
    ) -> None:
        super().__init__()
        self.eps, self.unit_offset = eps, unit_offset
        self.weight = nn.Parameter(torch.empty(dim))
        self.bias = nn.Parameter(torch.empty(dim)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.constant_(self.weight, 0.0 if self.unit_offset else 1.0)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def gain(self) -> torch.Tensor:
        w = self.weight if self.weight.dtype == torch.float32 else self.weight.float()
        return 1.0 + w if self.unit_offset else w

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # skip no-op casts: each is a call per decode step
        xf = x if x.dtype == torch.float32 else x.float()
        # written out: torch 2.13's F.rms_norm is a slower composite on CPU (a decode step measured
        # ~25% slower), and x * x is a cheaper kernel launch than x.pow(2) for the same values
        y = xf * torch.rsqrt((xf * xf).mean(-1, keepdim=True) + self.eps) * self.gain()
        if self.bias is not None:
            y = y + self.bias.float()
        return y if y.dtype == x.dtype else y.to(x.dtype)


class LayerNorm(RMSNorm):
    """Mean-and-variance norm (biased variance, as torch and every HF family compute it)."""

    formula = staticmethod(layer_norm_formula)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b = self.bias.float() if self.bias is not None else None
        return F.layer_norm(x.float(), x.shape[-1:], self.gain(), b, self.eps).to(x.dtype)


def deepnorm_constants(n_layers: int) -> tuple[float, float]:
    """DeepNorm's (alpha, beta) for a decoder-only stack of N layers (Wang et al. arXiv 2203.00555,
    table 1 / figure 2): x <- LN(alpha x + F(x)) with alpha = (2N)^(1/4), and the value, output and
    FFN projections initialised with gain beta = (8N)^(-1/4)."""
    return (2 * n_layers) ** 0.25, (8 * n_layers) ** -0.25


def build_norm(
    kind: str, dim: int, eps: float, bias: bool = False, unit_offset: bool = False
) -> RMSNorm:
    """The norm named `kind` (a key of NORMS, nn/config/choices.py) over the last `dim` features."""
    return NORMS[kind](dim, eps=eps, bias=bias, unit_offset=unit_offset)

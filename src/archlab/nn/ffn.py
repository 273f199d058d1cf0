"""Feed-forward sublayers: the plain MLP and the gated GLU family.

- `mlp`: down(act(up(x))), with d_ff = 4 * d_model by default (Vaswani et al. 2017).
- `glu`: down(act(gate(x)) * up(x)) (Shazeer 2020, arXiv 2002.05202): SwiGLU = glu + silu, GeGLU =
  glu + gelu, ReGLU = glu + relu. A GLU has three matrices instead of two, so d_ff defaults to 8/3 *
  d_model to keep the parameter count of the 4x MLP; both round up to a multiple of `multiple_of`
  for fast matmuls (the rule is `default_d_ff` of nn/config/choices.py, beside the GLU shorthands:
  the config reads both without torch).
gate and up are one fused projection `gate_up_proj` with rows [gate | up], so export is a slice.
(`fast.install` gives SwiGLU's `activate` a hand-written backward in CPU training:
nn/fast/install.py.) Each FFN is `down_proj(activate(in_proj(x)))`; a fused parallel block
(nn/block.py) runs `in_proj` and `down_proj` inside its own GEMMs and calls `activate` on its share
of the input GEMM.

Shapes: x (B, T, D) -> (B, T, D); the hidden is (B, T, F).
"""

from __future__ import annotations

import torch
import torch.nn as nn

from archlab.nn.activations import get_activation


class MLP(nn.Module):
    """Two matrices and an activation: down(act(up(x)))."""

    def __init__(
        self, d_model: int, d_ff: int, activation: str, bias: bool, swish_beta: float = 1.0
    ) -> None:
        super().__init__()
        self.act = get_activation(activation, swish_beta)
        self.up_proj = nn.Linear(d_model, d_ff, bias=bias)
        self.down_proj = nn.Linear(d_ff, d_model, bias=bias)

    @property
    def in_proj(self) -> nn.Linear:
        return self.up_proj

    def activate(self, up: torch.Tensor) -> torch.Tensor:
        """The hidden act(up) (B, T, F) from the input projection's output (B, T, F)."""
        return self.act(up)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.act(self.up_proj(x)))  # (B, T, D)


class GatedMLP(nn.Module):
    """Gated linear unit: down(act(gate(x)) * up(x)); the activation sits on the
    gate branch only."""

    def __init__(
        self, d_model: int, d_ff: int, activation: str, bias: bool, swish_beta: float = 1.0
    ) -> None:
        super().__init__()
        self.act = get_activation(activation, swish_beta)
        self.activation = activation  # its name (a key of ACTIVATIONS)
        self.gate_up_proj = nn.Linear(d_model, 2 * d_ff, bias=bias)  # rows [gate | up]
        self.down_proj = nn.Linear(d_ff, d_model, bias=bias)

    @property
    def in_proj(self) -> nn.Linear:
        return self.gate_up_proj

    def activate(self, gate_up: torch.Tensor) -> torch.Tensor:
        """The hidden act(gate) * up (B, T, F) from the input projection's output [gate | up]
        (B, T, 2F)."""
        gate, up = gate_up.chunk(2, dim=-1)  # (B, T, F) each
        return self.act(gate) * up  # (B, T, F)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(self.activate(self.gate_up_proj(x)))  # (B, T, D)

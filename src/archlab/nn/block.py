"""One transformer layer: attention and feed-forward sublayers, their norms and the residual stream.

Norm placement (`norm_position`), with F a sublayer and N a norm:
    pre               x = x + F(N(x))          GPT-2 onwards, Llama (Xiong et al. arXiv 2002.04745)
    post              x = N(x + F(x))          the original transformer
    double            x = x + N'(F(N(x)))      Gemma 2 "sandwich"
    nonresidual_post  x = x + N'(F(x))         OLMo 2 (arXiv 2501.00656)
Block type (`block`):
    serial            x = x + Attn(..x..); x = x + MLP(..x..)     two residual steps
    parallel          x = x + Attn(..x..) + MLP(..x..)            both read the same x (GPT-J, PaLM)
For a parallel block, `parallel_norms` = 1 shares one input norm (GPT-J, PaLM), 2 gives each its own (NeoX).
Norm names: attn_norm / mlp_norm (the sublayers' input norms, or the post norms of `post`), attn_out_norm /
mlp_out_norm (the norms on a sublayer's output, `double` and `nonresidual_post`).

Shapes: x (B, T, D) -> (B, T, D).
"""

from __future__ import annotations

import torch
import torch.nn as nn

from archlab.nn.attention import Attention
from archlab.nn.attention_inputs import AttentionInputs
from archlab.nn.config import ModelConfig
from archlab.nn.ffn import FFNS
from archlab.nn.norms import build_norm, placement_norms

NORM_NAMES = ("attn_norm", "mlp_norm", "attn_out_norm", "mlp_out_norm")


class Block(nn.Module):
    """Attention + FFN with the configured norm placement and residual layout."""

    def __init__(self, config: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        c = config
        self.position, self.parallel = c.norm_position, c.block == "parallel"
        self.attn = Attention(c, layer_idx)
        self.mlp = FFNS[c.ffn](c.d_model, c.d_ff, c.activation, c.mlp_bias, c.swish_beta)
        present = placement_norms(c.norm_position, c.block == "parallel", c.parallel_norms)
        for name in NORM_NAMES:  # an absent norm is None, so forward never probes with getattr/hasattr
            present_norm = name in present
            norm = build_norm(c.norm, c.d_model, c.norm_eps, c.norm_bias, c.norm_unit_offset) if present_norm else None
            setattr(self, name, norm)
        self.drop = nn.Dropout(c.dropout) if c.dropout else None  # p = 0: no call at all (decode speed)

    def _out(self, norm: nn.Module | None, y: torch.Tensor) -> torch.Tensor:
        """A sublayer's output on its way into the residual: its output norm (if any), then dropout."""
        y = _maybe(norm, y)
        return y if self.drop is None else self.drop(y)

    def forward(self, x: torch.Tensor, inp: AttentionInputs) -> torch.Tensor:
        match self.position, self.parallel:
            case "post", False:  # x = N(x + F(x)), twice
                x = self.attn_norm(x + self._out(None, self.attn(x, inp)))
                return self.mlp_norm(x + self._out(None, self.mlp(x)))
            case "post", True:  # x = N(x + A(x) + M(x))
                return self.attn_norm(x + self._out(None, self.attn(x, inp)) + self._out(None, self.mlp(x)))
            case _, False:  # pre / double / nonresidual_post: the residual stays outside every norm
                x = x + self._out(self.attn_out_norm, self.attn(_maybe(self.attn_norm, x), inp))
                return x + self._out(self.mlp_out_norm, self.mlp(_maybe(self.mlp_norm, x)))
            case _, True:  # both branches read the same x; a shared input norm is computed once
                h = _maybe(self.attn_norm, x)
                m = h if self.mlp_norm is None else self.mlp_norm(x)
                return x + self._out(self.attn_out_norm, self.attn(h, inp)) + self._out(self.mlp_out_norm, self.mlp(m))


def _maybe(norm: nn.Module | None, x: torch.Tensor) -> torch.Tensor:
    """norm(x), or x where the placement has no norm there."""
    return x if norm is None else norm(x)

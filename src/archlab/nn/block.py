"""One transformer layer: attention and feed-forward sublayers, their norms and the residual stream.

Norm placement (`norm_position`), with F a sublayer and N a norm:
    pre               x = x + F(N(x))        GPT-2 onwards, Llama (Xiong et al. arXiv 2002.04745)
    post              x = N(x + F(x))        the original transformer
    double            x = x + N'(F(N(x)))    Gemma 2 "sandwich"
    nonresidual_post  x = x + N'(F(x))       OLMo 2 (arXiv 2501.00656)
    deepnorm          x = N(alpha x + F(x))  DeepNet (Wang et al. arXiv 2203.00555), alpha =
                                             (2 n_layers)^(1/4); its init gain beta: nn/init.py
Block type (`block`):
    serial            x = x + Attn(..x..); x = x + MLP(..x..)  two residual steps
    parallel          x = x + Attn(..x..) + MLP(..x..)         both read the same x (GPT-J, PaLM)
    gau               x = x + GAU(..x..)                       one gated attention unit, no FFN
For a parallel block, `parallel_norms` = 1 shares one input norm (GPT-J, PaLM), 2 gives each
its own (NeoX).

Fused parallel block (`parallel_fused`): one input and one output GEMM where the layout allows,
in training (nn/parallel.py). Norm names: attn_norm / mlp_norm (the sublayers' input norms,
or the post norms of `post`), attn_out_norm / mlp_out_norm (the norms on a sublayer's output,
`double` and `nonresidual_post`).

Shapes: x (B, T, D) -> (B, T, D).
"""

from __future__ import annotations

import torch
import torch.nn as nn

from archlab.nn.attention.attention import Attention
from archlab.nn.attention.gau import GatedAttentionUnit
from archlab.nn.attention.inputs import AttentionInputs
from archlab.nn.config import ModelConfig
from archlab.nn.config.choices import FFNS, placement_norms
from archlab.nn.norms import build_norm, deepnorm_constants
from archlab.nn.parallel import fused_parallel, fusing

NORM_NAMES = ("attn_norm", "mlp_norm", "attn_out_norm", "mlp_out_norm")


class Block(nn.Module):
    """Attention + FFN with the configured norm placement and residual layout."""

    def __init__(self, config: ModelConfig, layer_idx: int) -> None:
        super().__init__()
        c = config
        self.position, self.parallel = c.norm_position, c.block == "parallel"
        self.alpha = deepnorm_constants(c.n_layers)[0] if c.norm_position == "deepnorm" else 1.0
        gau = c.block == "gau"
        self.attn = GatedAttentionUnit(c, layer_idx) if gau else Attention(c, layer_idx)
        self.mlp = (
            None if gau else FFNS[c.ffn](c.d_model, c.d_ff, c.activation, c.mlp_bias, c.swish_beta)
        )
        present = placement_norms(c.norm_position, c.block == "parallel", c.parallel_norms, gau)
        # an absent norm is None, so forward never probes with getattr/hasattr
        for name in NORM_NAMES:
            present_norm = name in present
            norm = (
                build_norm(c.norm, c.d_model, c.norm_eps, c.norm_bias, c.norm_unit_offset)
                if present_norm
                else None
            )
            setattr(self, name, norm)
        # p = 0: no call at all (decode speed)
        self.drop = nn.Dropout(c.dropout) if c.dropout else None
        fused = self.parallel and c.parallel_fused
        # one input GEMM needs one input (a shared norm, or none); one output GEMM needs the plain
        # sum
        self.fuse_in = fused and "mlp_norm" not in present
        self.fuse_out = fused and c.norm_position in ("pre", "post") and self.drop is None

    def _out(self, norm: nn.Module | None, y: torch.Tensor) -> torch.Tensor:
        """A sublayer's output on its way into the residual: its output norm (if
        any), then dropout."""
        y = _maybe(norm, y)
        return y if self.drop is None else self.drop(y)

    def forward(self, x: torch.Tensor, inp: AttentionInputs) -> torch.Tensor:
        if self.mlp is None:  # a GAU layer: one sublayer, attention and FFN at once
            return self._single(x, inp)
        match self.position, self.parallel:
            case "deepnorm", False:  # x = N(alpha x + F(x)), twice
                x = self.attn_norm(self.alpha * x + self._out(None, self.attn(x, inp)))
                return self.mlp_norm(self.alpha * x + self._out(None, self.mlp(x)))
            case "post", False:  # x = N(x + F(x)), twice
                x = self.attn_norm(x + self._out(None, self.attn(x, inp)))
                return self.mlp_norm(x + self._out(None, self.mlp(x)))
            case "post", True:  # x = N(x + A(x) + M(x))
                return self.attn_norm(x + self._parallel(x, x, inp))
            case _, False:  # pre / double / nonresidual_post: the residual stays outside every norm
                x = x + self._out(self.attn_out_norm, self.attn(_maybe(self.attn_norm, x), inp))
                return x + self._out(self.mlp_out_norm, self.mlp(_maybe(self.mlp_norm, x)))
            case _, True:  # both branches read the same x; a shared input norm is computed once
                h = _maybe(self.attn_norm, x)
                return x + self._parallel(h, h if self.mlp_norm is None else self.mlp_norm(x), inp)

    def _single(self, x: torch.Tensor, inp: AttentionInputs) -> torch.Tensor:
        """A layer of one sublayer F (a GAU), with the same placements as the serial
        block's each sublayer."""
        match self.position:
            case "post" | "deepnorm":  # x = N(alpha x + F(x)), alpha = 1 for post
                return self.attn_norm(self.alpha * x + self._out(None, self.attn(x, inp)))
            case _:
                return x + self._out(self.attn_out_norm, self.attn(_maybe(self.attn_norm, x), inp))

    def _parallel(self, h: torch.Tensor, m: torch.Tensor, inp: AttentionInputs) -> torch.Tensor:
        """out(A(h)) + out(M(m)) of a parallel block, out = the branch's output norm and dropout;
        fused GEMMs where the layout allows (nn/parallel.py)."""
        if (self.fuse_in or self.fuse_out) and fusing(self.attn, self.mlp):
            return fused_parallel(self, h, m, inp)
        heads = self.attn.core(*self.attn.project(h, inp), inp, inp.cache)  # (B, T, H*Dh)
        hidden = self.mlp.activate(self.mlp.in_proj(m))  # (B, T, F)
        return self.out_sum(heads, hidden)

    def out_sum(self, heads: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        """The two branches' outputs projected, each through its output norm and
        dropout, and added."""
        attn, mlp = self.attn, self.mlp
        return self._out(self.attn_out_norm, attn.o_proj(heads)) + self._out(
            self.mlp_out_norm, mlp.down_proj(hidden)
        )


def _maybe(norm: nn.Module | None, x: torch.Tensor) -> torch.Tensor:
    """norm(x), or x where the placement has no norm there."""
    return x if norm is None else norm(x)

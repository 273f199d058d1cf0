"""One transformer layer: attention and feed-forward sublayers, their norms and the residual stream.

Norm placement (`norm_position`), with F a sublayer and N a norm:
    pre               x = x + F(N(x))          GPT-2 onwards, Llama (Xiong et al. arXiv 2002.04745)
    post              x = N(x + F(x))          the original transformer
    double            x = x + N'(F(N(x)))      Gemma 2 "sandwich"
    nonresidual_post  x = x + N'(F(x))         OLMo 2 (arXiv 2501.00656)
    deepnorm          x = N(alpha x + F(x))    DeepNet (Wang et al. arXiv 2203.00555), alpha = (2 n_layers)^(1/4);
                                               its init gain beta is in TransformerLM.init_weights
Block type (`block`):
    serial            x = x + Attn(..x..); x = x + MLP(..x..)     two residual steps
    parallel          x = x + Attn(..x..) + MLP(..x..)            both read the same x (GPT-J, PaLM)
    gau               x = x + GAU(..x..)                          one gated attention unit, no FFN (nn/attention/gau.py)
For a parallel block, `parallel_norms` = 1 shares one input norm (GPT-J, PaLM), 2 gives each its own (NeoX).

Fused parallel block (`parallel_fused`, PaLM arXiv 2204.02311 section 2: "the MLP and Attention input matrix
multiplications can be fused"): where both branches read the same tensor (one shared input norm, or none),
one input GEMM gives [q | k | v | gate | up] (or [q | k | v | up] without a GLU); where neither branch has an
output norm or dropout, one output GEMM maps the concatenated [attention heads | MLP hidden] through
[W_o | W_down] (the two biases added). The parameters stay the separate Linears (`attn.qkv_proj`,
`mlp.gate_up_proj`, ...), so checkpoints, Hugging Face interop, init and parameter counts are those of the
unfused block. The forward concatenates their weights, a copy of the layer's weights per call: amortised in a
training step (forward, backward and the weight gradients of 2k tokens), but not in inference, where a CPU
measured the fused forward 1.8x slower at 8 tokens and 1.14x at 256 (docs/performance.md), so the fused GEMMs
run only while autograd records (training). Wrapped projections (LoRA, quantised layers: anything not a
plain nn.Linear) run apart too, so their wrappers are not bypassed.
Norm names: attn_norm / mlp_norm (the sublayers' input norms, or the post norms of `post`), attn_out_norm /
mlp_out_norm (the norms on a sublayer's output, `double` and `nonresidual_post`).

Shapes: x (B, T, D) -> (B, T, D).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from archlab.nn.attention.attention import Attention
from archlab.nn.attention.gau import GatedAttentionUnit
from archlab.nn.attention.inputs import AttentionInputs
from archlab.nn.config import ModelConfig
from archlab.nn.norms import build_norm, deepnorm_constants
from archlab.nn.variants import FFNS, placement_norms

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
        self.mlp = None if gau else FFNS[c.ffn](c.d_model, c.d_ff, c.activation, c.mlp_bias, c.swish_beta)
        present = placement_norms(c.norm_position, c.block == "parallel", c.parallel_norms, gau)
        for name in NORM_NAMES:  # an absent norm is None, so forward never probes with getattr/hasattr
            present_norm = name in present
            norm = build_norm(c.norm, c.d_model, c.norm_eps, c.norm_bias, c.norm_unit_offset) if present_norm else None
            setattr(self, name, norm)
        self.drop = nn.Dropout(c.dropout) if c.dropout else None  # p = 0: no call at all (decode speed)
        fused = self.parallel and c.parallel_fused
        # one input GEMM needs one input (a shared norm, or none); one output GEMM needs the plain sum
        self.fuse_in = fused and "mlp_norm" not in present
        self.fuse_out = fused and c.norm_position in ("pre", "post") and self.drop is None

    def _out(self, norm: nn.Module | None, y: torch.Tensor) -> torch.Tensor:
        """A sublayer's output on its way into the residual: its output norm (if any), then dropout."""
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
        """A layer of one sublayer F (a GAU), with the same placements as the serial block's each sublayer."""
        match self.position:
            case "post" | "deepnorm":  # x = N(alpha x + F(x)), alpha = 1 for post
                return self.attn_norm(self.alpha * x + self._out(None, self.attn(x, inp)))
            case _:
                return x + self._out(self.attn_out_norm, self.attn(_maybe(self.attn_norm, x), inp))

    def _parallel(self, h: torch.Tensor, m: torch.Tensor, inp: AttentionInputs) -> torch.Tensor:
        """out(A(h)) + out(M(m)) of a parallel block, out = the branch's output norm and dropout; fused GEMMs
        where the layout allows (module doc)."""
        attn, mlp = self.attn, self.mlp
        fuse = self._fuse()
        if fuse and self.fuse_in:  # one GEMM: [q | k | v | gate | up] (B, T, (H + 2K) Dh + F_in)
            w, b = _stacked(attn.qkv_proj, mlp.in_proj, dim=0)
            qkv, pre = F.linear(h, w, b).split([attn.qkv_proj.out_features, mlp.in_proj.out_features], dim=-1)
            heads, hidden = attn.core(*attn.project(h, inp, qkv), inp, inp.cache), mlp.activate(pre)
        else:
            heads = attn.core(*attn.project(h, inp), inp, inp.cache)  # (B, T, H*Dh)
            hidden = mlp.activate(mlp.in_proj(m))  # (B, T, F)
        if fuse and self.fuse_out:  # one GEMM: [heads | hidden] @ [W_o | W_down]^T
            w, b = _stacked(attn.o_proj, mlp.down_proj, dim=1)
            return F.linear(torch.cat([heads, hidden], dim=-1), w, b)  # (B, T, D)
        return self._out(self.attn_out_norm, attn.o_proj(heads)) + self._out(self.mlp_out_norm, mlp.down_proj(hidden))


    def _fuse(self) -> bool:
        """Whether this call runs the fused GEMMs (module doc): in training, over plain Linears."""
        attn, mlp = self.attn, self.mlp
        return torch.is_grad_enabled() and all(
            type(p) is nn.Linear for p in (attn.qkv_proj, attn.o_proj, mlp.in_proj, mlp.down_proj))


def _stacked(a: nn.Linear, b: nn.Linear, dim: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Weights of two Linears side by side: dim 0 stacks outputs (one GEMM for two projections of one input),
    dim 1 stacks inputs (one GEMM for the sum of two projections: the biases add). A missing bias is zeros."""
    w = torch.cat([a.weight, b.weight], dim=dim)
    if a.bias is None and b.bias is None:
        return w, None
    if dim == 1:
        return w, a.bias if b.bias is None else b.bias if a.bias is None else a.bias + b.bias
    bias_a = a.weight.new_zeros(a.out_features) if a.bias is None else a.bias
    bias_b = b.weight.new_zeros(b.out_features) if b.bias is None else b.bias
    return w, torch.cat([bias_a, bias_b])


def _maybe(norm: nn.Module | None, x: torch.Tensor) -> torch.Tensor:
    """norm(x), or x where the placement has no norm there."""
    return x if norm is None else norm(x)

"""The fused parallel block (`parallel_fused`, PaLM arXiv 2204.02311 section 2: "the MLP and
Attention input matrix multiplications can be fused"): the same function as the parallel block of
nn/block.py in fewer GEMMs.

Where both branches read the same tensor (one shared input norm, or none), one input GEMM gives [q |
k | v | gate | up] (or [q | k | v | up] without a GLU); where neither branch has an output norm or
dropout, one output GEMM maps the concatenated [attention heads | MLP hidden] through [W_o | W_down]
(the two biases added). The parameters stay the separate Linears (`attn.qkv_proj`,
`mlp.gate_up_proj`, ...), so checkpoints, Hugging Face interop, init and parameter counts are those
of the unfused block. The forward concatenates their weights, a copy of the layer's weights per
call: amortised in a training step, not in inference (a CPU measured the fused forward 1.8x slower
at 8 tokens, docs/performance.md), so the fused GEMMs run only while autograd records. Wrapped
projections (LoRA, quantised layers: anything not a plain nn.Linear) run apart, so their wrappers
are not bypassed.

The config selects it (it is not one of nn/fast/'s installed kernels): it runs wherever a parallel
model trains, on every device, and in the lab's training-step timings, which time models as built.

Shapes: h, m (B, T, D) -> (B, T, D); heads (B, T, H * Dh); hidden (B, T, F).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from archlab.nn.attention.inputs import AttentionInputs


def fusing(attn: nn.Module, mlp: nn.Module) -> bool:
    """Whether this call runs the fused GEMMs: in training (autograd recording),
    over plain Linears."""
    linears = (attn.qkv_proj, attn.o_proj, mlp.in_proj, mlp.down_proj)
    return torch.is_grad_enabled() and all(type(p) is nn.Linear for p in linears)


def fused_parallel(
    block: nn.Module, h: torch.Tensor, m: torch.Tensor, inp: AttentionInputs
) -> torch.Tensor:
    """out(A(h)) + out(M(m)) of a parallel `Block` (nn/block.py) with its input GEMM fused where
    `block.fuse_in`, its output GEMM where `block.fuse_out` (the module docstring)."""
    attn, mlp = block.attn, block.mlp
    if block.fuse_in:  # one GEMM: [q | k | v | gate | up] (B, T, (H + 2K) Dh + F_in)
        w, b = stacked(attn.qkv_proj, mlp.in_proj, dim=0)
        split = [attn.qkv_proj.out_features, mlp.in_proj.out_features]
        qkv, pre = F.linear(h, w, b).split(split, dim=-1)
        heads, hidden = attn.core(*attn.project(h, inp, qkv), inp, inp.cache), mlp.activate(pre)
    else:
        heads = attn.core(*attn.project(h, inp), inp, inp.cache)  # (B, T, H*Dh)
        hidden = mlp.activate(mlp.in_proj(m))  # (B, T, F)
    if block.fuse_out:  # one GEMM: [heads | hidden] @ [W_o | W_down]^T
        w, b = stacked(attn.o_proj, mlp.down_proj, dim=1)
        return F.linear(torch.cat([heads, hidden], dim=-1), w, b)  # (B, T, D)
    return block.out_sum(heads, hidden)


def stacked(a: nn.Linear, b: nn.Linear, dim: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Weights of two Linears side by side: dim 0 stacks outputs (one GEMM for two projections of
    one input), dim 1 stacks inputs (one GEMM for the sum of two projections: the biases add). A
    missing bias is zeros."""
    w = torch.cat([a.weight, b.weight], dim=dim)
    if a.bias is None and b.bias is None:
        return w, None
    if dim == 1:
        return w, a.bias if b.bias is None else b.bias if a.bias is None else a.bias + b.bias
    bias_a = a.weight.new_zeros(a.out_features) if a.bias is None else a.bias
    bias_b = b.weight.new_zeros(b.out_features) if b.bias is None else b.bias
    return w, torch.cat([bias_a, bias_b])

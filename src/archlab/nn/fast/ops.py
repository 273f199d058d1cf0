"""Fast-path kernels: RMSNorm, SwiGLU and the RoPE split with hand-written backward passes.

Autograd differentiates the readable formulas in norms.py, ffn.py and functional.py op by op: every
intermediate is saved and every op gets its own backward kernel. These `torch.autograd.Function`s
(and those of losses.py and attention.py beside this module) compute the same values with fewer
passes over memory and fewer saved tensors:
- `rms_norm`: saves x and the (B, T, 1) inverse RMS instead of x * x, x * r and the gain-free
  product; the backward is dx = r * (g w) - x * r^3 * mean(g w x), dw = sum(g * x * r).
- `silu_mul`: silu(gate) * up from the fused [gate | up] projection; saves only that projection and
  writes both halves of its gradient in place (autograd's chunk backward would concatenate them).
- `rope_qkv`: the fused projection's heads [q | k | v] -> q and k rotated (RoPE, either layout,
  partial rotary) and v, whose backward writes one [q | k | v] gradient buffer: the transpose of a
  rotation is the rotation by -theta, so it rotates the incoming gradients straight into it.
  Autograd through split, slice and rotate_half would zero-fill and concatenate full-size buffers
  and copy q and k for the partner.
Each is tested against the plain formula (tests/nn/fast/test_install.py). The readable modules never
call these: `fast.install` (nn/fast/install.py) puts them in from outside, on the CPU where they
were measured. Under torch.compile the installed modules run the plain formulas instead: Inductor
fuses those itself (`use_fused`).

Shapes: x (..., D); gate_up (..., 2F) -> (..., F); heads (B, T, H + 2K, Dh) -> q (B, T, H, Dh), k
and v (B, T, K, Dh) with cos/sin (B|1, T, 1, d_rot).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

# where these kernels were measured faster than autograd (docs/performance.md)
FUSED_DEVICES = ("cpu",)


def use_fused(x: torch.Tensor) -> bool:
    """The hand-written backward pays off only when autograd records the op, nothing compiles it,
    and on a device it was measured on."""
    return (
        torch.is_grad_enabled()
        and x.requires_grad
        and not torch.compiler.is_compiling()
        and x.device.type in FUSED_DEVICES
    )


class _RMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: torch.autograd.function.FunctionCtx, x: torch.Tensor, gain: torch.Tensor, eps: float
    ) -> torch.Tensor:
        # ||x||^2 / D in one reduction, without the (..., D) temporary of (x * x).mean()
        # (..., 1)
        ms = torch.linalg.vector_norm(x, dim=-1, keepdim=True).square_().div_(x.shape[-1])
        r = ms.add_(eps).rsqrt_()  # (..., 1)
        ctx.save_for_backward(x, gain, r)
        return (x * r).mul_(gain)  # (..., D)

    @staticmethod
    def backward(
        ctx: torch.autograd.function.FunctionCtx, g: torch.Tensor
    ) -> tuple[torch.Tensor | None, ...]:
        x, gain, r = ctx.saved_tensors
        gw = g * gain  # (..., D)
        dot = torch.linalg.vecdot(gw, x, dim=-1).unsqueeze(-1)  # (..., 1) sum(g w x)
        dx = (gw.mul_(r)).addcmul_(x, dot.mul_(r.pow(3)).div_(-x.shape[-1]))  # (..., D)
        dgain = None
        if ctx.needs_input_grad[1]:
            dgain = (g * x).mul_(r).reshape(-1, x.shape[-1]).sum(0)  # (D,)
        return dx, dgain, None


def rms_norm(x: torch.Tensor, gain: torch.Tensor, eps: float) -> torch.Tensor:
    """x / sqrt(mean(x^2) + eps) * gain for float32 x and gain, differentiated by hand."""
    return _RMSNorm.apply(x, gain, eps)


class _SiluMul(torch.autograd.Function):
    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, gate_up: torch.Tensor) -> torch.Tensor:
        gate, up = gate_up.chunk(2, dim=-1)  # (..., F) views
        ctx.save_for_backward(gate_up)
        return F.silu(gate).mul_(up)  # (..., F)

    @staticmethod
    def backward(ctx: torch.autograd.function.FunctionCtx, g: torch.Tensor) -> torch.Tensor:
        (gate_up,) = ctx.saved_tensors
        gate, up = gate_up.chunk(2, dim=-1)
        grad = torch.empty_like(gate_up)  # (..., 2F), filled half by half: no concatenation
        d_gate, d_up = grad.chunk(2, dim=-1)
        torch.mul(g, F.silu(gate), out=d_up)  # d up = g * silu(gate)
        # d gate = g * up * silu'(gate)
        torch.ops.aten.silu_backward.grad_input(g * up, gate, grad_input=d_gate)
        return grad


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up for the fused projection [gate | up] (..., 2F), differentiated by hand."""
    return _SiluMul.apply(gate_up)


def _rotate_into(
    out: torch.Tensor,
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    layout: str,
    sign: float,
) -> None:
    """out = x * cos + sign * partner(x) * sin on the first d_rot dims (nn/positions/rope.py
    `apply_rope`'s formula and tables; sign -1 is the inverse rotation), the rest copied; written
    half by half into `out`, so neither the partner tensor nor a concatenation is ever built."""
    d_rot = cos.size(-1)
    # dims (i, i + d/2) or (2i, 2i + 1)
    pairs = (2, d_rot // 2) if layout == "half" else (d_rot // 2, 2)
    axis = -2 if layout == "half" else -1
    # full width: one op with long contiguous rows
    torch.mul(x[..., :d_rot], cos, out=out[..., :d_rot])
    (o1, o2), (x1, x2), (s1, s2) = (
        t[..., :d_rot].unflatten(-1, pairs).unbind(axis) for t in (out, x, sin)
    )
    o1.addcmul_(x2, s1, value=sign)  # first of each pair: x1 c1 + sign x2 s1
    o2.addcmul_(x1, s2, value=sign)  # second: x2 c2 + sign x1 s2
    if d_rot < x.size(-1):  # partial rotary: the rest passes through
        out[..., d_rot:].copy_(x[..., d_rot:])


class _RopeQKV(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: torch.autograd.function.FunctionCtx,
        heads: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        n_heads: int,
        n_kv_heads: int,
        layout: str,
    ) -> tuple[torch.Tensor, ...]:
        H, K = n_heads, n_kv_heads
        B, T, _, Dh = heads.shape
        qk = heads.new_empty(B, T, H + K, Dh)  # rotated [q | k]
        _rotate_into(qk, heads[:, :, : H + K], cos, sin, layout, 1.0)
        ctx.save_for_backward(cos, sin)
        ctx.sizes, ctx.layout = (H, K), layout
        return qk[:, :, :H], qk[:, :, H:], heads[:, :, H + K :]  # v: a view of the input, no copy

    @staticmethod
    def backward(
        ctx: torch.autograd.function.FunctionCtx,
        gq: torch.Tensor,
        gk: torch.Tensor,
        gv: torch.Tensor,
    ) -> tuple[torch.Tensor | None, ...]:
        cos, sin = ctx.saved_tensors
        H, K = ctx.sizes
        B, T, _, Dh = gq.shape
        # [q | k | v], the layout of the projection's output
        grad = gq.new_empty(B, T, H + 2 * K, Dh)
        _rotate_into(grad[:, :, :H], gq, cos, sin, ctx.layout, -1.0)  # R(theta)^T = R(-theta)
        _rotate_into(grad[:, :, H : H + K], gk, cos, sin, ctx.layout, -1.0)
        grad[:, :, H + K :].copy_(gv)
        return grad, None, None, None, None, None


def rope_qkv(
    heads: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    n_heads: int,
    n_kv_heads: int,
    layout: str,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """heads (B, T, H + 2K, Dh) = [q | k | v] -> q (B, T, H, Dh) and k (B, T, K, Dh) rotated by
    the full-width tables cos/sin (B|1, T, 1, d_rot) of nn/positions/rope.py (d_rot <= Dh), and
    v, differentiated by hand. The tables must have the dtype of `heads` (`RopePositions.tables`:
    bf16 heads rotate with bf16 tables, where the plain path of inference rotates in float32
    and rounds once)."""
    return _RopeQKV.apply(heads, cos, sin, n_heads, n_kv_heads, layout)

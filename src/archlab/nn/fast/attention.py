"""Fast-path attention: bf16 causal self-attention on the CPU with a hand-written backward.

`causal_attention` runs torch's flash kernel forward, and a backward that recomputes the
probabilities block by block with batched GEMMs (AMX/AVX512-BF16) and torch's softmax backward
kernel. The flash kernel's own CPU backward ran at half that speed in bf16 (docs/performance.md).
Tested against float64 math (tests/nn/fast/test_attention.py, test_install.py).

Shapes: q, k, v (B, H, T, Dh).
"""

from __future__ import annotations

import torch

# measured faster than the flash backward up to 512 tokens, slower at 1024
CAUSAL_ATTENTION_MAX_LEN = 512
ATTENTION_BLOCK_ELEMENTS = 2**24  # scores per block of causal_attention's backward (32 MB in bf16)
# query rows per block at most: 512 rows in one block ran slower than two of 256
ATTENTION_BLOCK_ROWS = 256


class _CausalAttention(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: torch.autograd.function.FunctionCtx,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        scale: float,
    ) -> torch.Tensor:
        out, _ = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            q, k, v, 0.0, True, scale=scale
        )
        # the probabilities are recomputed, as the flash backward does
        ctx.save_for_backward(q, k, v)
        ctx.scale = scale
        return out  # (B, H, T, Dh)

    @staticmethod
    def backward(
        ctx: torch.autograd.function.FunctionCtx, g: torch.Tensor
    ) -> tuple[torch.Tensor | None, ...]:
        # (B, H, T, Dh) views of the projection's (B, T, H, Dh) layout: batched GEMMs would copy
        # them per use
        q, k, v, g = (t.contiguous() for t in (*ctx.saved_tensors, g))
        B, H, T, _ = q.shape
        qs = q * ctx.scale  # scores = qs k^T, so d qs = d scores k and d k = d scores^T qs
        # query rows per block
        rows = max(1, min(T, ATTENTION_BLOCK_ROWS, ATTENTION_BLOCK_ELEMENTS // (B * H * T)))
        one_block = rows == T
        dq = torch.empty_like(q)
        # blocks add into d k and d v: a float32 sum, each block's share rounded to bf16 as its GEMM
        # leaves it
        dk = torch.zeros_like(k, dtype=torch.float32) if not one_block else None
        dv = torch.zeros_like(v, dtype=torch.float32) if not one_block else None
        for start in range(0, T, rows):
            end = min(T, start + rows)
            keys = end  # causal: queries [start, end) see keys [0, end) and no later block
            qb, gb = qs[:, :, start:end], g[:, :, start:end]  # (B, H, r, Dh)
            kb, vb = k[:, :, :keys], v[:, :, :keys]  # (B, H, keys, Dh)
            scores = qb @ kb.transpose(-1, -2)  # (B, H, r, keys)
            hidden = torch.ones(end - start, keys, dtype=torch.bool, device=q.device).triu_(
                start + 1
            )
            # float32 inside, bf16 out
            p = torch.softmax(scores.masked_fill_(hidden, float("-inf")), dim=-1)
            dp = gb @ vb.transpose(-1, -2)  # (B, H, r, keys)
            # p * (dp - sum(p * dp)): d scores
            ds = torch._softmax_backward_data(dp, p, -1, p.dtype)
            dq[:, :, start:end] = (ds @ kb).mul_(ctx.scale)
            if one_block:
                dk, dv = ds.transpose(-1, -2) @ qb, p.transpose(-1, -2) @ gb
            else:
                dk[:, :, :keys] += ds.transpose(-1, -2) @ qb
                dv[:, :, :keys] += p.transpose(-1, -2) @ gb
        return dq, dk.to(k.dtype), dv.to(v.dtype), None


def use_causal_attention(q: torch.Tensor, k: torch.Tensor) -> bool:
    """`causal_attention` pays off for bf16 training steps on the CPU, self-attention without a
    mask, eager or compiled (Inductor compiles its backward's GEMMs and softmax backward; the flash
    backward stays a call)."""
    return (
        q.dtype == torch.bfloat16
        and q.device.type == "cpu"
        and torch.is_grad_enabled()
        and q.requires_grad
        and q.shape[-2] == k.shape[-2] <= CAUSAL_ATTENTION_MAX_LEN
        and q.shape[:2] == k.shape[:2]
    )


def causal_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float
) -> torch.Tensor:
    """softmax(q k^T * scale + causal mask) v for q, k, v (B, H, T, Dh) of equal heads and length,
    as `F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)`: the same forward
    kernel, and a backward of batched GEMMs over blocks of query rows (a block of r rows needs only
    the keys up to its last row, so the masked upper triangle is partly skipped). The backward
    computes the probabilities from bf16 scores, as bf16 attention without a flash kernel does: its
    gradients agree with float64 math to bf16 rounding (tests/nn/fast/test_install.py). CPU bf16
    training only: see `use_causal_attention`."""
    return _CausalAttention.apply(q, k, v, scale)

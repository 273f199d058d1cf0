"""Fast-path kernels: RMSNorm, SwiGLU and cross entropy with hand-written backward passes.

Autograd differentiates the readable formulas in norms.py, ffn.py and functional.py op by op: every
intermediate is saved and every op gets its own backward kernel. These `torch.autograd.Function`s
compute the same values with fewer passes over memory and fewer saved tensors:
- `rms_norm`: saves x and the (B, T, 1) inverse RMS instead of x * x, x * r and the gain-free
  product; the backward is dx = r * (g w) - x * r^3 * mean(g w x), dw = sum(g * x * r).
- `silu_mul`: silu(gate) * up from the fused [gate | up] projection; saves only that projection and
  writes both halves of its gradient in place (autograd's chunk backward would concatenate them).
- `cross_entropy`: saves the log-probabilities and turns them into softmax - onehot in place in the
  backward (no (N, V) zero tensor for nll_loss, no second (N, V) gradient buffer).
- `rope_qkv`: the fused projection's heads [q | k | v] -> q and k rotated (RoPE, either layout,
  partial rotary) and v, whose backward writes one [q | k | v] gradient buffer: the transpose of a
  rotation is the rotation by -theta, so it rotates the incoming gradients straight into it.
  Autograd through split, slice and rotate_half would zero-fill and concatenate full-size buffers
  and copy q and k for the partner.
- `linear_cross_entropy`: the LM head, final softcap, cross entropy and z-loss over row chunks, so
  the (N, V) float32 logits never exist at once: each chunk's gradient (softmax - onehot, through
  the softcap) goes straight into the hidden states' and the head's gradients in the forward, and
  the backward only scales them (the chunked loss of Liger-Kernel's fused linear cross entropy,
  arXiv 2410.10989).
- `causal_attention`: bf16 causal self-attention on the CPU: torch's flash kernel forward, and a
  backward that recomputes the probabilities block by block with batched GEMMs (AMX/AVX512-BF16) and
  torch's softmax backward kernel. The flash kernel's own CPU backward ran at half that speed in
  bf16 (docs/performance.md).
Each is tested against the plain formula (tests/nn/fast/test_install.py). The readable modules never
call these: `fast.install` (nn/fast/install.py) puts them in from outside, on the CPU where they
were measured. Under torch.compile the installed modules run the plain formulas instead: Inductor
fuses those itself (`use_fused`).

Shapes: x (..., D); gate_up (..., 2F) -> (..., F); logits (N, V), targets (N,); heads (B, T, H + 2K,
Dh) -> q (B, T, H, Dh), k and v (B, T, K, Dh) with cos/sin (B|1, T, 1, d_rot); hidden (N, D), head
weight (V, D).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

# where these kernels were measured faster than autograd (docs/performance.md)
FUSED_DEVICES = ("cpu",)
HEAD_CHUNK_ELEMENTS = 2**22  # logits per chunk of linear_cross_entropy (16 MB in float32)
# measured faster than the flash backward up to 512 tokens, slower at 1024
CAUSAL_ATTENTION_MAX_LEN = 512
ATTENTION_BLOCK_ELEMENTS = 2**24  # scores per block of causal_attention's backward (32 MB in bf16)
# query rows per block at most: 512 rows in one block ran slower than two of 256
ATTENTION_BLOCK_ROWS = 256
# fewer rows make the head-gradient update (V, D) per chunk a memory-bound GEMM
MIN_HEAD_CHUNK_ROWS = 256


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


class _CrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: torch.autograd.function.FunctionCtx,
        logits: torch.Tensor,
        targets: torch.Tensor,
        ignore_index: int,
    ) -> torch.Tensor:
        logp = torch.log_softmax(logits, dim=-1)  # (N, V)
        keep = targets != ignore_index  # (N,)
        safe = torch.where(keep, targets, 0)
        count = keep.sum().clamp_min(1)
        loss = -(logp.gather(1, safe[:, None]).squeeze(1) * keep).sum() / count
        ctx.save_for_backward(logp, safe, keep, count)
        ctx.consumed = False
        return loss

    @staticmethod
    def backward(
        ctx: torch.autograd.function.FunctionCtx, g: torch.Tensor
    ) -> tuple[torch.Tensor | None, ...]:
        if ctx.consumed:
            raise RuntimeError(
                "fused cross_entropy: backward ran twice (retain_graph); its buffer is reused in "
                "place; use archlab.nn.functional.cross_entropy(..., fused=False)"
            )
        ctx.consumed = True
        logp, safe, keep, count = ctx.saved_tensors
        grad = logp.exp_()  # softmax, in the buffer the forward saved (nothing else holds it)
        grad.scatter_add_(1, safe[:, None], torch.full_like(grad[:, :1], -1.0))  # softmax - onehot
        scale = (g / count) * keep  # (N,) rows that count, each 1/count of the mean
        return grad.mul_(scale[:, None].to(grad.dtype)), None, None


def cross_entropy(
    logits: torch.Tensor, targets: torch.Tensor, ignore_index: int = -100
) -> torch.Tensor:
    """Mean cross entropy of logits (N, V) at targets (N,), skipping `ignore_index`, differentiated
    by hand."""
    return _CrossEntropy.apply(logits, targets, ignore_index)


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
    """heads (B, T, H + 2K, Dh) = [q | k | v] -> q (B, T, H, Dh) and k (B, T, K, Dh) rotated by the
    full-width tables cos/sin (B|1, T, 1, d_rot) of nn/positions/rope.py (d_rot <= Dh), and v,
    differentiated by hand. The tables must have the dtype of `heads` (`RopePositions.tables`: bf16
    heads rotate with bf16 tables, where the plain path of inference rotates in float32 and rounds
    once)."""
    return _RopeQKV.apply(heads, cos, sin, n_heads, n_kv_heads, layout)


def _head_chunk_grad(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    targets: torch.Tensor,
    keep: torch.Tensor,
    cap: float | None,
    z_coef: float,
) -> tuple[torch.Tensor, ...]:
    """One chunk (c rows): summed CE and summed log(Z)^2 over kept rows, and d(sum CE + z_coef sum
    log(Z)^2) / d pre-cap logits (c, V), computed in the logits' own buffer. The head multiplies in
    x's dtype (bf16 under autocast); the softmax and everything after it run in keep's (float32 or
    float64)."""
    logits = x @ weight.t() if bias is None else torch.addmm(bias, x, weight.t())  # (c, V)
    logits = logits if logits.dtype == keep.dtype else logits.to(keep.dtype)
    capped = None
    # cap * tanh(z / cap); its derivative 1 - tanh^2 is applied to the gradient below
    if cap is not None:
        capped = logits.div_(cap).tanh_()  # (c, V) tanh, in place
        logits = capped * cap
    # (c,) the targets' logits, before the buffer changes
    picked = logits.gather(1, targets[:, None]).squeeze(1)
    top = logits.amax(dim=-1, keepdim=True)  # (c, 1)
    # exp(logits - max), in the logits' buffer: the one exp of the chunk
    grad = logits.sub_(top).exp_()
    total = grad.sum(dim=-1)  # (c,)
    lse = total.log().add_(top.squeeze(1))  # (c,) log Z
    ce = ((lse - picked) * keep).sum()
    z = (lse.square() * keep).sum()
    # d(z_coef lse^2)/d logits = 2 z_coef lse p
    weight_rows = keep * (1 + 2 * z_coef * lse) if z_coef else keep
    # softmax (the 1 / Z folded into each row's weight) times p (1 + 2 c lse), minus the one-hot
    grad.mul_((weight_rows / total)[:, None]).scatter_add_(1, targets[:, None], -keep[:, None])
    if capped is not None:
        grad.mul_(capped.square_().neg_().add_(1))  # through the softcap: * (1 - tanh^2)
    return ce, z, grad


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: torch.autograd.function.FunctionCtx,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        targets: torch.Tensor,
        cap: float | None,
        z_coef: float,
        ignore_index: int,
        mm_dtype: torch.dtype,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        with torch.autocast(x.device.type, enabled=False):  # every cast below is explicit
            return _LinearCrossEntropy._forward(
                ctx, x, weight, bias, targets, cap, z_coef, ignore_index, mm_dtype
            )

    @staticmethod
    def _forward(
        ctx: torch.autograd.function.FunctionCtx,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        targets: torch.Tensor,
        cap: float | None,
        z_coef: float,
        ignore_index: int,
        mm_dtype: torch.dtype,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        keep = targets != ignore_index  # (N,)
        safe = torch.where(keep, targets, 0)
        keep = keep.to(x.dtype)
        count = keep.sum().clamp_min(1)
        # (N, D), (V, D) in the parameters' dtype
        dx, dw = torch.empty_like(x), torch.zeros_like(weight)
        db = torch.zeros_like(bias) if bias is not None else None
        ce, z = x.new_zeros(()), x.new_zeros(())
        # else bf16 GEMMs (autocast): the head cast once, each chunk's rows and grad
        same = mm_dtype == x.dtype
        w = weight if same else weight.to(mm_dtype)
        b = bias if same or bias is None else bias.to(mm_dtype)
        rows = max(MIN_HEAD_CHUNK_ROWS, HEAD_CHUNK_ELEMENTS // weight.shape[0])
        for start in range(0, x.shape[0], rows):
            part = slice(start, start + rows)
            xc = x[part] if same else x[part].to(mm_dtype)
            ce_c, z_c, grad = _head_chunk_grad(xc, w, b, safe[part], keep[part], cap, z_coef)
            ce += ce_c
            z += z_c
            if db is not None:
                db += grad.sum(0)
            if same:
                torch.mm(grad, weight, out=dx[part])  # d x = d logits @ W
                dw.addmm_(grad.t(), xc)  # d W += d logits^T @ x
            # as autocast's backward would: the (c, V) gradient rounded to bf16 for both GEMMs
            else:
                grad = grad.to(mm_dtype)
                dx[part] = grad @ w
                dw += grad.t() @ xc  # each chunk's share rounded to bf16, the sum kept in float32
        ce, z = ce / count, z * z_coef / count
        ctx.save_for_backward(dx, dw, db, count)
        ctx.mark_non_differentiable(ce, z)
        ctx.consumed = False
        return ce + z, ce, z

    @staticmethod
    def backward(
        ctx: torch.autograd.function.FunctionCtx,
        g: torch.Tensor,
        _ce: torch.Tensor,
        _z: torch.Tensor,
    ) -> tuple[torch.Tensor | None, ...]:
        if ctx.consumed:
            raise RuntimeError(
                "fused linear_cross_entropy: backward ran twice (retain_graph); its gradients are "
                "scaled in place"
            )
        ctx.consumed = True
        dx, dw, db, count = ctx.saved_tensors
        scale = g / count  # the forward summed; the loss is a mean over kept rows
        return (
            dx.mul_(scale),
            dw.mul_(scale),
            None if db is None else db.mul_(scale),
            None,
            None,
            None,
            None,
            None,
        )


def linear_cross_entropy(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    targets: torch.Tensor,
    cap: float | None = None,
    z_loss_coef: float = 0.0,
    ignore_index: int = -100,
    mm_dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Hidden states x (N, D), head weight (V, D) and bias, targets (N,) -> (ce + z, ce, z): mean
    cross entropy of softcap(x W^T + b, cap) skipping `ignore_index`, and z_loss_coef * mean
    log(Z)^2 over the same rows (PaLM). Only the first output carries a gradient (ce and z are for
    the logs). x and weight are float32 (or float64); `mm_dtype` bfloat16 multiplies in bf16 as
    autocast would (bf16 logits, softmax in float32, gradients rounded to bf16 for the two GEMMs,
    float32 results). The gradients are computed in the forward, so call it only when a backward
    follows."""
    mm_dtype = mm_dtype or x.dtype
    return _LinearCrossEntropy.apply(
        x, weight, bias, targets, cap, z_loss_coef, ignore_index, mm_dtype
    )


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

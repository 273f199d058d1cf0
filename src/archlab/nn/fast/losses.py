"""Fast-path losses: cross entropy, and the LM head with its loss, with hand-written backwards.

As ops.py's kernels, these compute the values of the readable formulas (functional.py, the head of
model.py) with fewer passes over memory:
- `cross_entropy`: saves the log-probabilities and turns them into softmax - onehot in place in the
  backward (no (N, V) zero tensor for nll_loss, no second (N, V) gradient buffer).
- `linear_cross_entropy`: the LM head, final softcap, cross entropy and z-loss over row chunks,
  so the (N, V) float32 logits never exist at once: each chunk's gradient (softmax - onehot,
  through the softcap) goes straight into the hidden states' and the head's gradients in the
  forward, and the backward only scales them (the chunked loss of Liger-Kernel's fused linear cross
  entropy, arXiv 2410.10989).
Both are tested against the plain formulas (tests/nn/fast/test_losses.py, test_install.py).

Shapes: logits (N, V), targets (N,); hidden (N, D), head weight (V, D).
"""

from __future__ import annotations

import torch

HEAD_CHUNK_ELEMENTS = 2**22  # logits per chunk of linear_cross_entropy (16 MB in float32)
# fewer rows make the head-gradient update (V, D) per chunk a memory-bound GEMM
MIN_HEAD_CHUNK_ROWS = 256


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
    """Mean cross entropy of logits (N, V) at targets (N,), skipping `ignore_index`,
    differentiated by hand."""
    return _CrossEntropy.apply(logits, targets, ignore_index)


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
    log(Z)^2) / d pre-cap logits (c, V), computed in the logits' own buffer. The head multiplies
    in x's dtype (bf16 under autocast); the softmax and everything after it run in keep's
    (float32 or float64)."""
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
    """Hidden states x (N, D), head weight (V, D) and bias, targets (N,) -> (ce + z, ce, z):
    mean cross entropy of softcap(x W^T + b, cap) skipping `ignore_index`, and z_loss_coef *
    mean log(Z)^2 over the same rows (PaLM). Only the first output carries a gradient (ce and z
    are for the logs). x and weight are float32 (or float64); `mm_dtype` bfloat16 multiplies in
    bf16 as autocast would (bf16 logits, softmax in float32, gradients rounded to bf16 for the
    two GEMMs, float32 results). The gradients are computed in the forward, so call it only when
    a backward follows."""
    mm_dtype = mm_dtype or x.dtype
    return _LinearCrossEntropy.apply(
        x, weight, bias, targets, cap, z_loss_coef, ignore_index, mm_dtype
    )

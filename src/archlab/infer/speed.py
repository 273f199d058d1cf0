"""Fast batch-1 decoding on the CPU: the column-major weight layout and the compiled decode step.

At batch 1 a decode step multiplies one row vector by every weight matrix once, so it costs the time
to stream the weights plus per-step overhead (docs/inference.md, "Decode speed"). The pieces, which
the `Decoder` of infer/engine.py owns per model (nothing here keeps state between calls):
- `column_major_linears` / `row_major_cpu_linears`: float32 CPU Linear weights stored column-major,
  which MKL's one-row product reads at close to memory bandwidth;
- `compiled_forward`: the model's forward under torch.compile with dynamic shapes, for the one-token
  steps, `recompile_limit` around its calls, and `check_compile_decode`, which fails up front where
  that cannot work;
- `reduction_gemvs_win`: whether the compiled step should compute its one-token products as
  Inductor's own reductions over row-major weights (`compiled_forward(model, reduce_linears=True)`)
  instead of calling MKL on column-major ones. Measured per machine and model shape: on an AMD Zen 4
  the reductions streamed the weights at 18.3 GB/s against MKL's 13.1, while on an Intel Xeon MKL
  already ran near the memory bound (docs/performance.md, "Decoding").
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

logger = logging.getLogger(__name__)


def column_major_linears(model: nn.Module) -> list[nn.Parameter]:
    """Store each float32 CPU `nn.Linear` weight column-major: same shape and values,
    strides (1, out).

    `F.linear(x, W)` multiplies by W^T. With W column-major, W^T is a contiguous (in, out) matrix,
    and MKL's one-row product (every decode step at batch 1) streams that layout at close to memory
    bandwidth; with the usual row-major weights the products of a d=512 model took 12.4-17 ms
    instead of 9.2-10 ms on this project's CPU (docs/inference.md, "Decode speed"). Results agree to
    float rounding. Skips weights that are already column-major, not float32 (bf16 ran slower
    column-major) or not on the CPU, and FSDP-sharded models altogether (FSDP swaps each weight for
    a view of its all-gather buffer, which a new layout would detach). A tied head is re-laid once
    (the second time it is no longer contiguous), and embedding lookups read it strided. Returns the
    weights it changed, for `row_major_linears` to undo.
    """
    changed = row_major_cpu_linears(model)
    # real tensors, even inside a caller's inference_mode
    with torch.inference_mode(False), torch.no_grad():
        for w in changed:
            w.data = w.data.t().contiguous().t()
    return changed


def row_major_cpu_linears(model: nn.Module) -> list[nn.Parameter]:
    """The float32 CPU `nn.Linear` weights still row-major (contiguous), each once (a
    tied head too); none for FSDP-sharded models. What `column_major_linears` re-lays
    and `reduction_gemvs_win` measures."""
    if _fsdp_managed(model):
        return []
    weights = (m.weight for m in model.modules() if isinstance(m, nn.Linear))
    return list(
        dict.fromkeys(
            w
            for w in weights
            if type(w.data) is torch.Tensor
            and w.device.type == "cpu"
            and w.dtype == torch.float32
            and w.is_contiguous()
            and min(w.shape) >= 2
        )
    )


def _fsdp_managed(model: nn.Module) -> bool:
    if not torch.distributed.is_available():
        return False
    from torch.distributed.fsdp import (
        FSDPModule,  # torch >= 2.6; FSDP2's fully_shard makes modules this type
    )

    return any(isinstance(m, FSDPModule) for m in model.modules())


def row_major_linears(weights: list[nn.Parameter]) -> None:
    """Put weights re-laid by `column_major_linears` back to the usual contiguous
    (out, in) layout."""
    with torch.inference_mode(False), torch.no_grad():
        for w in weights:
            w.data = w.data.contiguous()


def check_compile_decode(device: torch.device) -> None:
    """Fail before any compute where `compile_decode` cannot work: on the CPU, torch.compile builds
    C++ kernels and needs a compiler ($CXX, else g++, c++ or clang++ on the PATH)."""
    if device.type == "cpu" and not (
        os.environ.get("CXX")
        or shutil.which("g++")
        or shutil.which("c++")
        or shutil.which("clang++")
    ):
        raise ValueError(
            "compile_decode=True (--compile) on the CPU needs a C++ compiler, which torch.compile "
            "builds its kernels with: none found (install g++ or set CXX), or decode without it"
        )


# graphs of TransformerLM.forward kept: a few per model (one per Python branch taken)
DYNAMO_RECOMPILE_LIMIT = 128
# float32 Linear weights below which the GEMV kernel is not measured (MKL's is kept): such weights
# stay in the CPU's caches, so a step is bound by its overhead, not by how fast a kernel streams
# memory
PROBE_MIN_BYTES = 16 * 2**20
# the probe times the model's first Linear weights up to this many bytes
PROBE_MAX_BYTES = 256 * 2**20
PROBE_MARGIN = 0.95  # the reductions must take under this fraction of MKL's time to be chosen


class _ReductionLinears(TorchFunctionMode):
    """Inside a compiled step: `F.linear` of one token as `(W * x).sum(-1)`. Inductor turns
    that into its own vectorized dot products, reading each row-major weight row once, and may
    fuse the op before it (a norm's scale, SwiGLU's product) into the same loop; everything
    else runs unchanged."""

    # noqa: ANN001, ANN204 - torch's protocol
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.linear and args[0].dim() >= 2 and args[0].shape[-2] == 1:
            x, weight = args[0], args[1]
            bias = args[2] if len(args) > 2 else kwargs.get("bias")
            y = (weight * x.unsqueeze(-2)).sum(-1)
            return y if bias is None else y + bias
        return func(*args, **kwargs)


def _forward_reducing_linears(model: nn.Module, *args: object, **kwargs: object) -> torch.Tensor:
    with _ReductionLinears():
        return model(*args, **kwargs)


@contextmanager
def recompile_limit() -> Iterator[None]:
    """Dynamo's per-function graph limit raised to DYNAMO_RECOMPILE_LIMIT for the duration (never
    lowered), then put back. torch's compile cache keys on the forward's code, so every model of
    another shape adds graphs to one cache, and past the default limit of 8 torch quietly runs the
    forward eagerly: the ninth model of an ablation sweep would decode uncompiled."""
    limit = torch._dynamo.config.recompile_limit
    with torch._dynamo.config.patch(recompile_limit=max(limit, DYNAMO_RECOMPILE_LIMIT)):
        yield


def compiled_forward(
    model: nn.Module, reduce_linears: bool = False, backend: str | Callable = "inductor"
) -> Callable[..., torch.Tensor]:
    """The model's forward under torch.compile with dynamic shapes: the cache length and batch are
    symbols, so decoding compiles once rather than once per step; call it inside
    `recompile_limit()`. With `reduce_linears`, one-token Linear products are compiled as reductions
    (`_ReductionLinears`), which need row-major weights: see `reduction_gemvs_win`."""
    if not reduce_linears:
        return torch.compile(model, dynamic=True, backend=backend)
    compiled = torch.compile(_forward_reducing_linears, dynamic=True, backend=backend)
    return lambda *args, **kwargs: compiled(model, *args, **kwargs)


def _reduce_all(xs: list[torch.Tensor], weights: list[torch.Tensor]) -> list[torch.Tensor]:
    return [(w * x).sum(-1) for x, w in zip(xs, weights)]


def _gemv_seconds(weights: list[nn.Parameter]) -> tuple[float, float]:
    """Best times of the one-row products with `weights` as Inductor reductions (row-major, as they
    are) and through MKL (on column-major copies, as the `Decoder` lays them: at most
    PROBE_MAX_BYTES more memory for the moment), alternated over rounds so drift hits both. The
    model is not touched."""
    xs = [torch.randn(1, w.shape[1]) for w in weights]
    reduce = torch.compile(_reduce_all, dynamic=False)
    with torch.no_grad():
        columns = [w.detach().t().contiguous().t() for w in weights]
        sides = (lambda: reduce(xs, weights), lambda: [F.linear(x, c) for x, c in zip(xs, columns)])
        best = [float("inf"), float("inf")]
        for round_ in range(4):
            for side in (0, 1) if round_ % 2 == 0 else (1, 0):
                sides[side]()
                for _ in range(3):
                    start = time.perf_counter()
                    sides[side]()
                    best[side] = min(best[side], time.perf_counter() - start)
    return best[0], best[1]


def reduction_gemvs_win(model: nn.Module) -> bool:
    """Whether a compiled decode step of `model` should compute its one-token products as Inductor
    reductions over row-major weights rather than with MKL over column-major ones, measured now on
    this machine (`_gemv_seconds`: its first float32 CPU Linear weights up to PROBE_MAX_BYTES, a
    second or so after a small compile; a `Decoder` measures once and keeps the answer). Models with
    under PROBE_MIN_BYTES of such weights, other dtypes, other devices and FSDP-sharded models keep
    MKL without measuring."""
    weights = row_major_cpu_linears(model)
    if sum(w.numel() * 4 for w in weights) < PROBE_MIN_BYTES:
        return False
    chosen, size = [], 0
    for w in weights:
        if size and size + w.numel() * 4 > PROBE_MAX_BYTES:
            break
        chosen.append(w)
        size += w.numel() * 4
    reduce_s, mkl_s = _gemv_seconds(chosen)
    wins = reduce_s < PROBE_MARGIN * mkl_s
    logger.info(
        "compiled decode: one-token products as %s (%d weights, %.1f MB: reductions %.2f ms, "
        "MKL %.2f ms)",
        "Inductor reductions" if wins else "MKL GEMVs",
        len(chosen),
        size / 1e6,
        1e3 * reduce_s,
        1e3 * mkl_s,
    )
    return wins

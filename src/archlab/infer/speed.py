"""What makes batch-1 decoding fast on the CPU: the column-major weight layout and the compiled decode step.

At batch 1 a decode step multiplies one row vector by every weight matrix once, so it costs the time to stream
the weights plus per-step overhead (docs/inference.md, "Decode speed"):
- `decode_layout` / `column_major_linears`: float32 CPU Linear weights stored column-major, which MKL's
  one-row product reads at close to memory bandwidth; `generate` uses it around every call.
- `compiled_forward`: the model's forward under torch.compile with dynamic shapes, for the one-token steps
  (`generate(..., compile_decode=True)`, `archlab generate --compile`), and `check_compile_decode`, which
  fails up front where that cannot work.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
import torch.nn as nn


def column_major_linears(model: nn.Module) -> list[nn.Parameter]:
    """Store each float32 CPU `nn.Linear` weight column-major, in place: same shape and values, strides (1, out).

    `F.linear(x, W)` multiplies by W^T. With W column-major, W^T is a contiguous (in, out) matrix, and MKL's
    one-row product (every decode step at batch 1) streams that layout at close to memory bandwidth; with the
    usual row-major weights the products of a d=512 model took 12.4-17 ms instead of 9.2-10 ms on this
    project's CPU (docs/inference.md, "Decode speed").
    Results agree to float rounding. Skips weights that are already column-major, not float32 (bf16 ran
    slower column-major) or not on the CPU, and FSDP-sharded models altogether (FSDP swaps each weight for a
    view of its all-gather buffer, which a new layout would detach). A tied head is re-laid once (the
    second time it is no longer contiguous), and embedding lookups read it strided.
    Returns the weights it changed, for `row_major_linears` to undo.
    """
    changed: list[nn.Parameter] = []
    if _fsdp_managed(model):
        return changed
    with torch.inference_mode(False), torch.no_grad():  # real tensors, even inside a caller's inference_mode
        for module in model.modules():
            w = module.weight if isinstance(module, nn.Linear) else None
            if (w is None or type(w.data) is not torch.Tensor or w.device.type != "cpu" or w.dtype != torch.float32
                    or not w.is_contiguous() or min(w.shape) < 2):
                continue
            w.data = w.data.t().contiguous().t()
            changed.append(w)
    return changed


def _fsdp_managed(model: nn.Module) -> bool:
    if not torch.distributed.is_available():
        return False
    from torch.distributed.fsdp import FSDPModule  # torch >= 2.6; FSDP2's fully_shard makes modules this type

    return any(isinstance(m, FSDPModule) for m in model.modules())


def row_major_linears(weights: list[nn.Parameter]) -> None:
    """Put weights re-laid by `column_major_linears` back to the usual contiguous (out, in) layout."""
    with torch.inference_mode(False), torch.no_grad():
        for w in weights:
            w.data = w.data.contiguous()


@contextmanager
def decode_layout(model: nn.Module) -> Iterator[None]:
    """`column_major_linears` for the duration of a block, then the model's own layout back (bit for bit), so
    generating in the middle of training changes nothing the trainer sees."""
    changed = column_major_linears(model)
    try:
        yield
    finally:
        row_major_linears(changed)


def check_compile_decode(device: torch.device) -> None:
    """Fail before any compute where `compile_decode` cannot work: on the CPU, torch.compile builds C++ kernels
    and needs a compiler ($CXX, else g++, c++ or clang++ on the PATH)."""
    if device.type == "cpu" and not (
        os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++") or shutil.which("clang++")
    ):
        raise ValueError("compile_decode=True (--compile) on the CPU needs a C++ compiler, which torch.compile "
                         "builds its kernels with: none found (install g++ or set CXX), or decode without it")


DYNAMO_RECOMPILE_LIMIT = 128  # graphs of TransformerLM.forward kept: a few per model (one per Python branch taken)


def compiled_forward(model: nn.Module) -> Callable[..., torch.Tensor]:
    """The model's forward under torch.compile with dynamic shapes: the cache length and batch are symbols,
    so decoding compiles once rather than once per step. torch's compile cache keys on the forward's code,
    so a later call on the same model finds the graph already built.

    Every model of another shape adds graphs to that one cache, and past dynamo's default limit of 8 per
    function torch quietly runs the forward eagerly: the ninth model of an ablation sweep would decode
    uncompiled. So the limit is raised (never lowered) to DYNAMO_RECOMPILE_LIMIT."""
    limit = torch._dynamo.config.recompile_limit
    torch._dynamo.config.recompile_limit = max(limit, DYNAMO_RECOMPILE_LIMIT)
    return torch.compile(model, dynamic=True)

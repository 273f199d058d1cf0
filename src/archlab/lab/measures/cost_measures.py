"""The lab's measures of what a model costs, from the final checkpoint at the run's batch and
block: `step_ms`, `decode_tok_s` (wall-clock: the fastest of several tries, lab/measures/measure.py
TIMING_ROUNDS), `norm_time_share` (torch.profiler ranges), and the arithmetic on the
config `norm_flop_share`, `kv_bytes_per_token`.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator

import torch

from archlab.costs import flops_per_token, kv_cache_bytes
from archlab.infer.engine import Decoder
from archlab.infer.sampling import SamplingConfig
from archlab.lab.measures.run_like import RunLike
from archlab.nn.functional import cross_entropy
from archlab.nn.model import TransformerLM
from archlab.nn.norms import LayerNorm, RMSNorm

logger = logging.getLogger(__name__)
# per round: forward+backward passes timed (the fastest counts) after warm-up
TIMED_STEPS, WARMUP_STEPS = 5, 2
PROFILED_STEPS = 8  # forward+backward passes under the profiler (norm_time_share)
# per round: greedy generations timed (the fastest counts)
DECODE_TOKENS, DECODE_PROMPT, DECODE_TRIES = 64, 16, 2
# FLOPs per normalized element, forward: RMSNorm x*x, mean, * rsqrt, * gain; LayerNorm adds the
# mean, the subtraction and (with a bias) the shift. Backward costs about twice the forward,
# as for matmuls.
NORM_FLOPS = {"rmsnorm": 4, "layernorm": 6}


def _batch(run: RunLike) -> torch.Tensor:
    d = run.config["train"]["data"]
    return torch.randint(
        run.model.config.vocab_size,
        (d["batch_size"], d["block_size"] + 1),
        generator=torch.Generator().manual_seed(0),
    )


def _train_pass(model: TransformerLM, batch: torch.Tensor) -> None:
    cross_entropy(model(batch[:, :-1]), batch[:, 1:]).backward()
    model.zero_grad(set_to_none=True)


def step_ms(run: RunLike) -> float:
    """Fastest wall time of a forward + backward at the run's batch and block
    (no optimizer), milliseconds."""
    model, batch = run.model.train(), _batch(run)
    times = []
    for i in range(WARMUP_STEPS + TIMED_STEPS):
        start = time.perf_counter()
        _train_pass(model, batch)
        if i >= WARMUP_STEPS:
            times.append(time.perf_counter() - start)
    return 1000.0 * min(times)


def _norm_modules(model: TransformerLM) -> list[RMSNorm]:
    return [m for m in model.modules() if isinstance(m, RMSNorm)]  # LayerNorm subclasses RMSNorm


def norm_time_share(run: RunLike) -> float:
    """Share of a forward + backward's time inside norm layers, from torch.profiler ranges.

    Each norm's forward runs inside a `norm` record_function range opened and closed by module
    hooks; its backward inside `norm.backward`, opened by a full-backward pre-hook and closed by the
    backward hook (the CPU autograd engine runs one norm's backward as one stretch, so the ranges
    nest as the hooks assume).
    """
    model, batch = run.model.train(), _batch(run)
    handles = []
    for module in _norm_modules(model):
        handles += [
            module.register_forward_pre_hook(_open("norm")),
            module.register_forward_hook(_close),
            module.register_full_backward_pre_hook(_open("norm.backward")),
            module.register_full_backward_hook(_close),
        ]
    try:
        for _ in range(WARMUP_STEPS):
            _train_pass(model, batch)
        cpu = [torch.profiler.ProfilerActivity.CPU]
        with without_profiler_chatter(), torch.profiler.profile(activities=cpu) as prof:
            with torch.profiler.record_function("step"):
                for _ in range(PROFILED_STEPS):
                    _train_pass(model, batch)
    finally:
        for h in handles:
            h.remove()
    totals = {"step": 0.0, "norm": 0.0, "norm.backward": 0.0}
    for event in prof.events():
        if event.name in totals:
            totals[event.name] += event.cpu_time_total
    return (totals["norm"] + totals["norm.backward"]) / totals["step"]


PROFILER_CHATTER = ("USDT:", "STAGE:")  # kineto's lines at every profiler start and stop


@contextlib.contextmanager
def without_profiler_chatter() -> Iterator[None]:
    """Hold back the lines torch's profiler (kineto, in C++) writes to file descriptor 2 at
    start and stop, and log every other line written meanwhile as a warning. Kineto's own switch
    (KINETO_LOG_LEVEL, read when torch loads) silences its errors along with the chatter."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            lines = held.read().decode(errors="replace").splitlines(keepends=True)
            for line in lines:
                if line.strip() and not line.startswith(PROFILER_CHATTER):
                    logger.warning("torch profiler: %s", line.rstrip())


_OPEN: list[torch.profiler.record_function] = []  # ranges opened by hooks, closed last-in first-out


def _open(name: str) -> Callable:
    def hook(module: torch.nn.Module, *args: object) -> None:
        _OPEN.append(torch.profiler.record_function(name).__enter__())

    return hook


def _close(module: torch.nn.Module, *args: object) -> None:
    _OPEN.pop().__exit__(None, None, None)


def norm_flop_share(run: RunLike) -> float:
    """Share of a training step's FLOPs in norm layers: normalized elements x NORM_FLOPS,
    forward and backward."""
    model, batch = run.model, _batch(run)
    forward_flops: list[int] = []

    def count(module: RMSNorm, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
        # QK-norms may differ from `norm`
        kind = "layernorm" if isinstance(module, LayerNorm) else "rmsnorm"
        forward_flops.append(inputs[0].numel() * (NORM_FLOPS[kind] + (module.bias is not None)))

    handles = [m.register_forward_hook(count) for m in _norm_modules(model)]
    try:
        with torch.no_grad():
            model(batch[:, :-1])
    finally:
        for h in handles:
            h.remove()
    norm = 3 * sum(forward_flops) / batch[:, :-1].numel()  # per token, forward + backward
    return norm / (flops_per_token(model.config, batch.shape[1] - 1)["training"] + norm)


def kv_bytes_per_token(run: RunLike) -> float:
    return float(kv_cache_bytes(run.model.config, dtype="bf16")["per_token"])


def decode_tok_s(run: RunLike) -> float:
    """Greedy decoding speed, batch 1: DECODE_TOKENS new tokens after a DECODE_PROMPT-token prompt,
    the fastest of DECODE_TRIES generations (after one untimed)."""
    prompt = _batch(run)[0, :DECODE_PROMPT].tolist()
    sampling = SamplingConfig(max_new_tokens=DECODE_TOKENS, temperature=0.0)
    # one decode layout for every try; the weights come back after
    with Decoder(run.model) as decoder:
        decoder.generate([prompt], sampling)  # warm-up
        rates = []
        for _ in range(DECODE_TRIES):
            start = time.perf_counter()
            out = decoder.generate([prompt], sampling)
            rates.append(len(out.tokens[0]) / (time.perf_counter() - start))
    return max(rates)

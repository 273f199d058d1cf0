"""What an `archlab eval length` run will cost, said before it starts.

Every (samples, method, length) cell runs one forward per window over L tokens, so the run is
    forwards = cells x windows,    tokens = windows x sum over cells of L,
and its forward FLOPs are, per window of L tokens, L x (2 x the matmul weights + the attention at
the mean causal context (L + 1) / 2) (`archlab.costs.flops_per_token`: sliding-window layers read
at most their window). The time is estimated from a window of the shortest and one of the longest
length timed here (`time_forward`): seconds = a per forward + b per FLOP through the two
(`estimate_seconds`), so a small model, whose short forwards are mostly fixed overhead, is not
charged that overhead per FLOP at every length. It is an estimate: ReRoPE's two score matrices
and the eager attention they need make its cells slower than their FLOPs say.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from archlab.costs import flops_per_token
from archlab.nn.config import ModelConfig
from archlab.nn.model import TransformerLM


@dataclass(frozen=True)
class LengthCost:
    """The work of one run: forwards, tokens through them, and their forward FLOPs."""

    forwards: int
    tokens: int
    flops: float


def window_flops(config: ModelConfig, length: int) -> float:
    """Forward FLOPs of one window of `length` tokens (module doc)."""
    per_token = flops_per_token(config, max(1, (length + 1) // 2))
    return float(length * (per_token["matmul"] + per_token["attention"]))


def length_cost(
    configs: dict[tuple[str, int], ModelConfig], n_samples: int, n_windows: int
) -> LengthCost:
    """The cost of evaluating every (method, length) config of `configs` on `n_samples` sample kinds
    with `n_windows` windows each."""
    lengths = [n for _, n in configs]
    return LengthCost(
        forwards=len(configs) * n_samples * n_windows,
        tokens=n_samples * n_windows * sum(lengths),
        flops=n_samples * n_windows * sum(window_flops(c, n) for (_, n), c in configs.items()),
    )


@torch.no_grad()
def time_forward(model: TransformerLM, length: int, keep: int, repeats: int = 2) -> float:
    """Seconds of the fastest of `repeats` forwards of one window of `length` tokens scoring `keep`
    (the first one warms up allocations and kernels)."""
    was_training = model.training
    model.eval()
    x = torch.zeros(1, length, dtype=torch.long, device=next(model.parameters()).device)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        model(x, logits_to_keep=keep)
        if x.device.type == "cuda":  # kernels run asynchronously: wait for them
            torch.cuda.synchronize(x.device)
        best = min(best, time.perf_counter() - start)
    model.train(was_training)
    return best


def estimate_seconds(cost: LengthCost, config: ModelConfig, timings: dict[int, float]) -> float:
    """The run's seconds from timed windows {length: seconds}: seconds = a per forward + b per FLOP
    through the shortest and the longest (module doc); a and b are never negative, and one timing
    (or two that do not grow with the FLOPs) charges its rate per FLOP alone."""
    (short, t_short), (long, t_long) = min(timings.items()), max(timings.items())
    f_short, f_long = window_flops(config, short), window_flops(config, long)
    if f_long > f_short and t_long > t_short:
        per_flop = (t_long - t_short) / (f_long - f_short)
        per_forward = max(0.0, t_short - per_flop * f_short)
    else:
        per_flop, per_forward = t_long / f_long, 0.0
    return cost.forwards * per_forward + cost.flops * per_flop

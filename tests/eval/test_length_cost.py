"""What `eval length` says a run will cost (eval/length_cost.py): forwards, tokens and FLOPs counted
against explicit formulas, and the time scaled from timed windows with known inputs (a fixed cost
per forward plus one per FLOP)."""

from __future__ import annotations

import pytest
import torch

from archlab.costs import matmul_params
from archlab.eval.length_cost import (
    LengthCost,
    estimate_seconds,
    length_cost,
    time_forward,
    window_flops,
)
from archlab.eval.rope_methods import method_configs
from archlab.nn.config import ModelConfig
from archlab.nn.model import TransformerLM

CONFIG = ModelConfig(d_model=32, n_heads=4, n_layers=2, max_seq_len=64, vocab_size=256)


def test_window_flops_are_the_weights_and_the_attention_at_the_mean_causal_context() -> None:
    for length in (1, 16, 63, 64):
        context = max(1, (length + 1) // 2)
        want = length * (
            2 * matmul_params(CONFIG)
            + 4 * CONFIG.n_heads * CONFIG.head_dim * CONFIG.n_layers * context
        )
        assert window_flops(CONFIG, length) == want
    windowed = CONFIG.replace(sliding_window=8)  # every layer reads 8 keys at most
    assert window_flops(windowed, 64) == 64 * (2 * matmul_params(CONFIG) + 4 * 4 * 8 * 2 * 8)


def test_the_cost_counts_every_window_of_every_cell() -> None:
    configs = method_configs(CONFIG, ["none", "yarn"], [16, 32], None, False)
    cost = length_cost(configs, n_samples=2, n_windows=3)
    assert cost.forwards == 2 * 2 * 2 * 3 and cost.tokens == 2 * 3 * 2 * (16 + 32)
    assert cost.flops == pytest.approx(
        2 * 3 * 2 * (window_flops(CONFIG, 16) + window_flops(CONFIG, 32))
    )


def test_the_time_is_a_cost_per_forward_plus_one_per_flop_through_the_timed_windows() -> None:
    a, b = 0.05, 2e-9  # known: seconds per forward and per FLOP
    cost = LengthCost(forwards=40, tokens=0, flops=3e10)
    timings = {n: a + b * window_flops(CONFIG, n) for n in (8, 64)}
    assert estimate_seconds(cost, CONFIG, timings) == pytest.approx(40 * a + 3e10 * b, rel=1e-9)
    # one timing, or a longer window timed no slower: its rate per FLOP alone
    one = {64: timings[64]}
    assert estimate_seconds(cost, CONFIG, one) == pytest.approx(
        3e10 * timings[64] / window_flops(CONFIG, 64)
    )
    flat = {8: 0.3, 64: 0.3}
    assert estimate_seconds(cost, CONFIG, flat) == pytest.approx(
        3e10 * 0.3 / window_flops(CONFIG, 64)
    )
    # an overhead larger than the short window's time is never negative
    assert estimate_seconds(LengthCost(10, 0, 0.0), CONFIG, {8: 0.1, 64: 10.0}) == 0.0


def test_time_forward_runs_the_model_in_eval_mode_and_gives_it_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    torch.manual_seed(0)
    model = TransformerLM(CONFIG).train()
    seen = []
    original = TransformerLM.forward

    def spy(self: TransformerLM, x: torch.Tensor, **kwargs: object) -> torch.Tensor:
        seen.append((tuple(x.shape), kwargs.get("logits_to_keep"), self.training))
        return original(self, x, **kwargs)

    monkeypatch.setattr(TransformerLM, "forward", spy)
    assert time_forward(model, 24, 12, repeats=3) > 0
    assert seen == [((1, 24), 12, False)] * 3 and model.training

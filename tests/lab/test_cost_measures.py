"""What a model costs, on the shared tiny run (tests/lab/conftest.py): the norms' FLOP share by
hand, the timed measures sane, the profiler's chatter held back, and the timings keeping the fastest
timed try (a fake clock)."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from archlab.costs import flops_per_token
from archlab.lab.measures import cost_measures, measure
from tests.lab.conftest import BLOCK


def test_norm_flop_share_by_hand(run_dir: Path) -> None:
    run = measure.RunView(run_dir, windows=2)
    c = run.model.config
    # pre-norm: two per layer and the final one, each over d_model features
    norms = c.n_layers * 2 + 1
    per_token = 3 * norms * c.d_model * cost_measures.NORM_FLOPS["rmsnorm"]
    expected = per_token / (flops_per_token(c, BLOCK)["training"] + per_token)
    assert cost_measures.norm_flop_share(run) == pytest.approx(expected, rel=1e-9)


def test_timed_measures_are_sane(run_dir: Path, capfd: pytest.CaptureFixture[str]) -> None:
    run = measure.RunView(run_dir, windows=2)
    assert 0.0 < cost_measures.norm_time_share(run) < 1.0
    # the profiler's start / stop lines stay out of the lab's output
    assert "USDT:" not in capfd.readouterr().err
    assert cost_measures.step_ms(run) > 0 and cost_measures.decode_tok_s(run) > 0


def test_profiler_chatter_is_held_back_and_other_lines_are_logged(
    capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    # the logger's effective level is whatever earlier code in this process left on its ancestors (a
    # library's basicConfig at import can raise the root's): take WARNING explicitly, as `archlab`'s
    # own INFO root gives
    caplog.set_level(logging.WARNING, logger=cost_measures.__name__)
    with cost_measures.without_profiler_chatter():
        os.write(2, b"USDT:2026 SyncActivityProfilerHandler.cpp:52] profiler_start\n")
        os.write(2, b"ERROR: a real problem\n")
        os.write(2, b"STAGE:2026 Completed Stage: Warm Up\n")
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "after\n"  # fd 2 is back; nothing of the profiler's reached it
    assert [r.getMessage() for r in caplog.records] == ["torch profiler: ERROR: a real problem"]


def test_timings_keep_the_fastest_timed_try(run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fake clock advanced by fake work: the warm-up (made fastest here) never counts, the
    best try does."""
    run, now = measure.RunView(run_dir, windows=2), [0.0]
    monkeypatch.setattr(cost_measures, "time", SimpleNamespace(perf_counter=lambda: now[0]))

    def work(seconds: Iterator[float]) -> Callable[..., object]:
        def step(*args: object) -> object:
            now[0] += next(seconds)
            return SimpleNamespace(tokens=[[0] * cost_measures.DECODE_TOKENS])

        return step

    passes = (
        [0.01] * cost_measures.WARMUP_STEPS
        + [0.5, 0.2, 0.9]
        + [0.3] * (cost_measures.TIMED_STEPS - 3)
    )
    monkeypatch.setattr(cost_measures, "_train_pass", work(iter(passes)))
    # the median (300) or a warm-up (10) would differ
    assert cost_measures.step_ms(run) == pytest.approx(200.0)
    generations = [0.001] + [2.0, 1.0] + [4.0] * (cost_measures.DECODE_TRIES - 2)
    decode = work(iter(generations))

    class FakeDecoder:  # one decoder for the warm-up and every try, as measure opens it
        def __init__(self, model: object) -> None:
            pass

        def __enter__(self) -> FakeDecoder:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def generate(self, *args: object) -> object:
            return decode(*args)

    monkeypatch.setattr(cost_measures, "Decoder", FakeDecoder)
    assert cost_measures.decode_tok_s(run) == pytest.approx(cost_measures.DECODE_TOKENS / 1.0)

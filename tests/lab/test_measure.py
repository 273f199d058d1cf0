"""The lab's measures on a real (tiny, in-process) run, each against an independent computation, and the
spike / divergence rules on hand-written metrics."""

from __future__ import annotations

import json
import math
import sysconfig
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from archlab.checkpoint import list_checkpoints, load_model
from archlab.costs import flops_per_token
from archlab.data.tokens import prepare_data
from archlab.lab import measure
from archlab.nn.model import TransformerLM
from archlab.nn.presets import build_preset
from archlab.train.config import resolve_config
from archlab.train.trainer import train

BLOCK = 32


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("measure")
    text = root / "corpus.txt"
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    text.write_text("".join((stdlib / name).read_text() for name in ("json/decoder.py", "json/encoder.py",
                                                                      "textwrap.py", "string.py")))
    data = prepare_data(str(text), root / "data", "byte", val_fraction=0.3)
    keys = {"preset": "llama", "size": "tiny", "steps": "4", "data.source": str(data), "data.batch_size": "4",
            "data.block_size": str(BLOCK), "logging.eval_every": "2", "logging.eval_batches": "2",
            "logging.samples": "0", "logging.tensorboard": "false", "logging.progress": "false",
            "checkpoint.save_every": "2", "checkpoint.keep_last": "10", "out": str(root / "run")}
    train(*resolve_config([keys]))
    return root / "run"


def test_metrics_measures(run_dir: Path) -> None:
    run = measure.RunView(run_dir, windows=4)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert measure.val_loss(run) == [r for r in rows if r["kind"] == "eval"][-1]["loss"]
    assert measure.diverged(run) == 0.0 and measure.spikes(run) == 0.0


def test_bits_per_byte_of_bytes_is_loss_over_ln2(run_dir: Path) -> None:
    run = measure.RunView(run_dir, windows=4)
    # the byte tokenizer: one token per byte, and both read the same validation windows
    assert measure.bits_per_byte(run) == pytest.approx(measure._loss_at(run, 1) / math.log(2), rel=1e-6)


def test_long_context_loss_is_na_for_learned_positions(run_dir: Path) -> None:
    run = measure.RunView(run_dir, windows=2)
    assert measure._loss_at(run, 4) is not None  # RoPE runs past the training length
    short, long = measure._val_windows(run, BLOCK), measure._val_windows(run, 4 * BLOCK)
    assert short.shape == (8, BLOCK + 1) and long.shape == (2, 4 * BLOCK + 1)
    assert (short[:, 1:].ravel() == long[:, 1:].ravel()).all()  # the same targets, only the context differs
    learned = build_preset("gpt2", "tiny")
    run = measure.RunView(run_dir, windows=2, _model=TransformerLM(learned))
    assert measure._loss_at(run, 2) is None and measure._loss_at(run, 1) is not None


def test_norm_flop_share_by_hand(run_dir: Path) -> None:
    run = measure.RunView(run_dir, windows=2)
    c = run.model.config
    norms = c.n_layers * 2 + 1  # pre-norm: two per layer and the final one, each over d_model features
    per_token = 3 * norms * c.d_model * measure.NORM_FLOPS["rmsnorm"]
    expected = per_token / (flops_per_token(c, BLOCK)["training"] + per_token)
    assert measure.norm_flop_share(run) == pytest.approx(expected, rel=1e-9)


def test_timed_measures_are_sane(run_dir: Path) -> None:
    run = measure.RunView(run_dir, windows=2)
    assert 0.0 < measure.norm_time_share(run) < 1.0
    assert measure.step_ms(run) > 0 and measure.decode_tok_s(run) > 0


def test_timings_keep_the_fastest_timed_try(run_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fake clock advanced by fake work: the warm-up (made fastest here) never counts, the best try does."""
    run, now = measure.RunView(run_dir, windows=2), [0.0]
    monkeypatch.setattr(measure, "time", SimpleNamespace(perf_counter=lambda: now[0]))

    def work(seconds: Iterator[float]) -> Callable[..., object]:
        def step(*args: object) -> object:
            now[0] += next(seconds)
            return SimpleNamespace(tokens=[[0] * measure.DECODE_TOKENS])
        return step

    passes = [0.01] * measure.WARMUP_STEPS + [0.5, 0.2, 0.9] + [0.3] * (measure.TIMED_STEPS - 3)
    monkeypatch.setattr(measure, "_train_pass", work(iter(passes)))
    assert measure.step_ms(run) == pytest.approx(200.0)  # the median (300) or a warm-up (10) would differ
    generations = [0.001] + [2.0, 1.0] + [4.0] * (measure.DECODE_TRIES - 2)
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

    monkeypatch.setattr(measure, "Decoder", FakeDecoder)
    assert measure.decode_tok_s(run) == pytest.approx(measure.DECODE_TOKENS / 1.0)


def test_embedding_row_norm_over_checkpoints(run_dir: Path) -> None:
    series = measure.max_embed_row_norm_series(run_dir)
    assert [s for s, _ in series] == [2, 4]
    for (step, value), path in zip(series, list_checkpoints(run_dir)):
        weight = load_model(path)[0].embed_tokens.weight.detach()
        assert value == pytest.approx(float(torch.linalg.vector_norm(weight, dim=1).max()), rel=1e-6)
    first, last = (torch.linalg.vector_norm(load_model(p)[0].embed_tokens.weight.detach(), dim=1)
                   for p in list_checkpoints(run_dir))
    growth = measure.max_embed_row_growth(measure.RunView(run_dir, windows=1))
    assert growth == pytest.approx(float((last - first).max()), rel=1e-6)


def _write(run_dir: Path, losses: list[float], evals: list[float], skips: int = 0) -> measure.RunView:
    run_dir.mkdir(parents=True, exist_ok=True)
    rows = [{"step": i + 1, "kind": "train", "loss": v, "grad_norm": 1.0} for i, v in enumerate(losses)]
    rows += [{"step": len(losses), "kind": "eval", "loss": v} for v in evals]
    rows += [{"step": 3, "kind": "skip", "loss": "nan", "grad_norm": "nan"}] * skips
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run_dir / "config.json").write_text(json.dumps({"model": {"vocab_size": 256}}))
    return measure.RunView(run_dir, windows=1)


def test_spike_and_divergence_rules(tmp_path: Path) -> None:
    # median of the 5 before 5.5 is 4.6: 5.5 > 4.6 + 0.5 is a spike; 4.3 after it is not; a skipped step counts
    run = _write(tmp_path / "a", [5.0, 4.8, 4.6, 4.5, 4.4, 5.5, 4.3, 4.2], [4.1], skips=1)
    assert measure.spikes(run) == 2.0 and measure.diverged(run) == 0.0
    run = _write(tmp_path / "b", [5.0, 4.0, 3.0], [3.5, float("nan")])  # non-finite final val: diverged
    assert measure.diverged(run) == 1.0 and measure.val_loss(run) == 3.5  # last finite evaluation
    run = _write(tmp_path / "c", [5.0, 9.0], [])
    assert measure.val_loss(run) == pytest.approx(math.log(256))  # nothing finite: a uniform guess


def test_a_run_without_checkpoint_has_no_checkpoint_measures(tmp_path: Path) -> None:
    _write(tmp_path / "diverged", [5.0, 9.0], [])  # stopped before its first checkpoint
    got = measure.measure_run(tmp_path / "diverged", ["val_loss", "step_ms"], windows=1)
    assert got == {"val_loss": pytest.approx(math.log(256)), "step_ms": None}

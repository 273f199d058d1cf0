"""The lab's measures on a real (tiny, in-process) run, each against an independent computation; the spike and
divergence rules on hand-written metrics (the spike threshold from both sides); the versioned cache; and the
embedding drift measures against the batches the run was seen to draw."""

from __future__ import annotations

import json
import math
import os
import shutil
import sysconfig
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from archlab.checkpoint import latest_checkpoint, list_checkpoints, load_initial_weights, load_model, load_weights
from archlab.costs import flops_per_token
from archlab.data.prepare import prepare_data
from archlab.data.tokens import TokenData
from archlab.lab import drift, measure
from archlab.nn.model import TransformerLM
from archlab.nn.presets import build_preset
from archlab.train.config import resolve_config
from archlab.train.trainer import train

BLOCK = 32


SEEN: dict[str, np.ndarray] = {}  # what the fixture's run really drew: token counts of its training inputs


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real 4-step run (seed 3, 2 accumulation steps, step-0 weights kept) whose training batches are recorded
    as the trainer draws them, so the lab's replay of the batch stream can be checked against what was seen."""
    root = tmp_path_factory.mktemp("measure")
    text = root / "corpus.txt"
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    text.write_text("".join((stdlib / name).read_text() for name in ("json/decoder.py", "json/encoder.py",
                                                                      "textwrap.py", "string.py")))
    data = prepare_data(str(text), root / "data", "byte", val_fraction=0.3)
    keys = {"preset": "llama", "size": "tiny", "steps": "4", "data.source": str(data), "data.batch_size": "4",
            "data.block_size": str(BLOCK), "logging.eval_every": "2", "logging.eval_batches": "2",
            "logging.samples": "0", "logging.tensorboard": "false", "logging.progress": "false",
            "checkpoint.save_every": "2", "checkpoint.keep_last": "10", "out": str(root / "run"), "seed": "3",
            "optimizer.grad_accum": "2", "checkpoint.keep_initial": "true"}
    counts = np.zeros(256, dtype=np.int64)
    get_batch = TokenData.get_batch

    def recording(self: TokenData, split: str, *args: object, **kwargs: object) -> tuple[torch.Tensor, ...]:
        x, y = get_batch(self, split, *args, **kwargs)
        if split == "train":
            counts[:] += np.bincount(x.numpy().ravel(), minlength=256)
        return x, y

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(TokenData, "get_batch", recording)
        train(*resolve_config([keys]))
    SEEN["counts"] = counts
    return root / "run"


def _strided(data: TokenData, n: int) -> torch.Tensor:
    """n windows of BLOCK + 1 tokens, evenly spread from the first token to the last full window (by hand)."""
    val = np.asarray(data.splits["val"]).astype(np.int64)
    last = len(val) - BLOCK - 1
    return torch.from_numpy(np.stack([val[round(i * last / (n - 1)):][:BLOCK + 1] for i in range(n)]))


def _mean_ce(model: TransformerLM, windows: torch.Tensor) -> float:
    with torch.no_grad():
        logits = model.eval()(windows[:, :-1]).double()
    return float(F.cross_entropy(logits.flatten(0, 1), windows[:, 1:].flatten()))


def test_val_loss_scores_the_final_checkpoint_on_the_fixed_set(run_dir: Path) -> None:
    run = measure.RunView(run_dir, windows=4)
    data = run.data()
    n = min(math.ceil(65_536 / BLOCK), (data.num_tokens("val") - 1) // BLOCK)  # here: the whole split, tiled
    assert n * BLOCK > data.num_tokens("val") - 2 * BLOCK
    assert measure.val_loss(run) == pytest.approx(_mean_ce(load_model(run_dir)[0], _strided(data, n)), rel=1e-9)


def test_the_trainers_evaluation_is_on_strided_windows_without_the_seed(run_dir: Path) -> None:
    """The logged evaluation at step 4: eval_batches x micro-batch (2 x 4 / 2 accumulation steps) = 4 windows
    evenly strided, whatever the seed (this run's is 3), scored by the step-4 checkpoint."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    logged = [r for r in rows if r["kind"] == "eval"][-1]
    model = load_model(latest_checkpoint(run_dir))[0]
    assert logged["step"] == 4
    expected = _mean_ce(model, _strided(measure.RunView(run_dir, 1).data(), 4))
    assert logged["loss"] == pytest.approx(expected, rel=1e-5)


def test_log_z_and_attention_logit_measures_read_the_fixed_set(run_dir: Path) -> None:
    run = measure.RunView(run_dir, windows=4)
    data = run.data()
    windows = _strided(data, (data.num_tokens("val") - 1) // BLOCK)
    with torch.no_grad():
        log_z = torch.logsumexp(load_model(run_dir)[0].eval()(windows[:, :-1]).double(), dim=-1)
    assert measure.log_z_drift(run) == pytest.approx(float(log_z.abs().mean()), rel=1e-9)
    assert 0 < measure.max_attn_logit(run) < math.inf  # its value: tests/lab/test_eval_set.py


def test_metrics_measures(run_dir: Path) -> None:
    run = measure.RunView(run_dir, windows=4)
    assert measure.diverged(run) == 0.0 and measure.spikes(run) == 0.0


def test_exact_and_censored_measures() -> None:
    exact = {n for n, m in measure.MEASURES.items() if m.exact}
    assert exact == {"kv_bytes_per_token", "parameters", "norm_flop_share"}  # arithmetic: "by construction"
    censored = {n for n, m in measure.MEASURES.items() if m.censored}
    assert {"val_loss", "bits_per_byte", "train_loss", "log_z_drift", "max_attn_logit", "embed_drift_ratio"} <= censored
    assert not censored & {"diverged", "spikes", "step_ms", "kv_bytes_per_token"}


def test_parameters_count_a_tied_head_once(run_dir: Path) -> None:
    run = measure.RunView(run_dir, windows=1)
    weights = load_weights(latest_checkpoint(run_dir))
    distinct = {t.data_ptr(): t.numel() for t in weights.values()}  # tied aliases share storage
    assert measure.MEASURES["parameters"].fn(run) == sum(distinct.values())


def test_initial_weights_are_the_seeded_init_and_drift_bins_the_replayed_counts(run_dir: Path) -> None:
    """RUN/initial holds init_weights(seed=3) of the run's config; the replay of the batch stream equals the
    counts recorded while it trained; the drift measures are the binned row displacements, by hand."""
    initial = load_initial_weights(run_dir)
    model, _ = load_model(run_dir)
    fresh = TransformerLM(model.config)
    fresh.init_weights(seed=3)
    assert initial.keys() >= fresh.state_dict().keys()
    assert all(torch.equal(initial[k], v) for k, v in fresh.state_dict().items())
    run = measure.RunView(run_dir, windows=1)
    replay = drift.seen_counts(run.data(), 3, 4, 4, BLOCK, 2, 256)
    assert (replay == SEEN["counts"]).all() and replay.sum() == 4 * 4 * BLOCK
    assert not (drift.seen_counts(run.data(), 4, 4, 4, BLOCK, 2, 256) == SEEN["counts"]).all()  # the seed's stream
    moved = (load_weights(latest_checkpoint(run_dir))["embed_tokens.weight"].double()
             - initial["embed_tokens.weight"].double()).norm(dim=1).numpy()
    counts = SEEN["counts"]
    rare = (counts >= 1) & (counts <= 10)
    seen = np.flatnonzero(counts)
    top = seen[np.argsort(-counts[seen], kind="stable")][:math.ceil(0.1 * len(seen))]
    assert rare.sum() >= 3 and len(top) >= 3 and counts[top].min() > 10
    assert measure.MEASURES["embed_drift_rare"].fn(run) == pytest.approx(moved[rare].mean(), rel=1e-12)
    assert measure.embed_drift_ratio(run) == pytest.approx(moved[rare].mean() / moved[top].mean(), rel=1e-12)


def test_drift_needs_the_step0_weights(run_dir: Path, tmp_path: Path) -> None:
    shutil.copytree(run_dir, tmp_path / "run", ignore=shutil.ignore_patterns("initial"))
    with pytest.raises(ValueError, match="no step-0 weights .* --checkpoint.keep_initial true"):
        measure.embed_drift_ratio(measure.RunView(tmp_path / "run", windows=1))


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


def test_timed_measures_are_sane(run_dir: Path, capfd: pytest.CaptureFixture[str]) -> None:
    run = measure.RunView(run_dir, windows=2)
    assert 0.0 < measure.norm_time_share(run) < 1.0
    assert "USDT:" not in capfd.readouterr().err  # the profiler's start / stop lines stay out of the lab's output
    assert measure.step_ms(run) > 0 and measure.decode_tok_s(run) > 0


def test_profiler_chatter_is_held_back_and_other_lines_are_logged(capfd: pytest.CaptureFixture[str],
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    with measure.without_profiler_chatter():
        os.write(2, b"USDT:2026 SyncActivityProfilerHandler.cpp:52] profiler_start\n")
        os.write(2, b"ERROR: a real problem\n")
        os.write(2, b"STAGE:2026 Completed Stage: Warm Up\n")
    os.write(2, b"after\n")
    assert capfd.readouterr().err == "after\n"  # fd 2 is back; nothing of the profiler's reached it
    assert [r.getMessage() for r in caplog.records] == ["torch profiler: ERROR: a real problem"]


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
    assert measure.diverged(run) == 1.0
    run = _write(tmp_path / "c", [5.0, 4.0, 3.0], [5.5])  # finite, but above the first train loss
    assert measure.diverged(run) == 1.0


@pytest.mark.parametrize(("last", "spike"), [(1.5, False), (1.5000001, True), (1.4999999, False)],
                         ids=["at-threshold", "just-above", "just-below"])
def test_spike_threshold_both_sides(tmp_path: Path, last: float, spike: bool) -> None:
    # the 5 losses before `last` have median exactly 1.0 (binary-exact values): the threshold is 1.0 + 0.5
    assert measure.SPIKE_WINDOW == 5 and measure.SPIKE_NATS == 0.5
    run = _write(tmp_path / "r", [2.0, 1.0, 1.0, 0.75, 1.25, last], [1.0])
    assert measure.spikes(run) == float(spike)


def test_a_spike_does_not_hide_in_its_own_median(tmp_path: Path) -> None:
    """Three rising spikes after a flat start. By hand, the trailing windows before them are [1 1 1 1 1],
    [1 1 1 1 3] and [1 1 1 3 3.2], median 1 each: three spikes. A window holding the point would give the
    third [1 1 3 3.2 3.4], median 3, and 3.4 < 3 + 0.5 would hide."""
    run = _write(tmp_path / "s", [1.0] * 5 + [3.0, 3.2, 3.4], [1.0])
    assert measure.spikes(run) == 3.0


def test_non_finite_losses_neither_spike_nor_poison_the_median(tmp_path: Path) -> None:
    # finite losses: 1 1 1 1 1 1.2 1.7; only 1.7 > median(1, 1, 1, 1, 1.2) + 0.5; plus the skip
    run = _write(tmp_path / "n", [1.0, 1.0, float("nan"), 1.0, 1.0, 1.0, 1.2, 1.7], [1.0], skips=1)
    assert measure.spikes(run) == 2.0


def test_a_run_without_checkpoint_has_no_checkpoint_measures(tmp_path: Path) -> None:
    _write(tmp_path / "diverged", [5.0, 9.0], [])  # stopped before its first checkpoint
    got = measure.measure_run(tmp_path / "diverged", ["val_loss", "step_ms", "spikes"], windows=1)
    assert got == {"val_loss": None, "step_ms": None, "spikes": 0.0}


def test_cached_values_of_an_older_measure_version_are_computed_again(tmp_path: Path) -> None:
    # a cache written before versions existed: val_loss (now version 2) is stale, train_loss (1) is kept
    (tmp_path / measure.MEASURED).write_text(json.dumps({"val_loss": 1.5, "train_loss": 1.7}))
    assert measure.read_measured(tmp_path) == {"train_loss": 1.7}
    measure.write_measured(tmp_path, {"val_loss": 1.4, "train_loss": 1.7, "bits_per_byte": None})
    assert measure.read_measured(tmp_path) == {"val_loss": 1.4, "train_loss": 1.7, "bits_per_byte": None}
    record = json.loads((tmp_path / measure.MEASURED).read_text())
    assert record[measure.VERSIONS] == {"val_loss": 2, "train_loss": 1, "bits_per_byte": 2}

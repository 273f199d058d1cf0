"""The lab's measure registry: which measures are exact or censored, the parameter
count, a run without a checkpoint, and the versioned cache. Each measure's computation:
test_training_measures.py, test_eval_measures.py, test_cost_measures.py, test_embed_measures.py."""

from __future__ import annotations

import json
from pathlib import Path

from archlab.checkpoint import latest_checkpoint, load_weights
from archlab.lab.measures import measure
from tests.lab.test_training_measures import _write


def test_exact_and_censored_measures() -> None:
    exact = {n for n, m in measure.MEASURES.items() if m.exact}
    # arithmetic: "by construction"
    assert exact == {"kv_bytes_per_token", "parameters", "norm_flop_share"}
    censored = {n for n, m in measure.MEASURES.items() if m.censored}
    assert {
        "val_loss",
        "bits_per_byte",
        "train_loss",
        "log_z_drift",
        "max_attn_logit",
        "embed_drift_ratio",
    } <= censored
    assert not censored & {"diverged", "spikes", "step_ms", "kv_bytes_per_token"}


def test_parameters_count_a_tied_head_once(run_dir: Path) -> None:
    run = measure.RunView(run_dir, windows=1)
    weights = load_weights(latest_checkpoint(run_dir))
    distinct = {t.data_ptr(): t.numel() for t in weights.values()}  # tied aliases share storage
    assert measure.MEASURES["parameters"].fn(run) == sum(distinct.values())


def test_best_follows_each_measures_direction() -> None:
    assert (
        measure.MEASURES["step_ms"].best(3.0, 2.0) == 2.0
        and measure.MEASURES["decode_tok_s"].best(3.0, 2.0) == 3.0
    )
    # n/a for the run (no checkpoint) stays n/a
    assert measure.MEASURES["step_ms"].best(None, 2.0) is None
    assert {n for n, m in measure.MEASURES.items() if m.timing} == {"step_ms", "decode_tok_s"}


def test_a_run_without_checkpoint_has_no_checkpoint_measures(tmp_path: Path) -> None:
    _write(tmp_path / "diverged", [5.0, 9.0], [])  # stopped before its first checkpoint
    got = measure.measure_run(tmp_path / "diverged", ["val_loss", "step_ms", "spikes"], windows=1)
    assert got == {"val_loss": None, "step_ms": None, "spikes": 0.0}


def test_cached_values_of_an_older_measure_version_are_computed_again(tmp_path: Path) -> None:
    # a cache written before versions existed: val_loss (now version 2) is stale, train_loss
    # (1) is kept
    (tmp_path / measure.MEASURED).write_text(json.dumps({"val_loss": 1.5, "train_loss": 1.7}))
    assert measure.read_measured(tmp_path) == {"train_loss": 1.7}
    measure.write_measured(tmp_path, {"val_loss": 1.4, "train_loss": 1.7, "bits_per_byte": None})
    assert measure.read_measured(tmp_path) == {
        "val_loss": 1.4,
        "train_loss": 1.7,
        "bits_per_byte": None,
    }
    record = json.loads((tmp_path / measure.MEASURED).read_text())
    assert record[measure.VERSIONS] == {"val_loss": 2, "train_loss": 1, "bits_per_byte": 2}

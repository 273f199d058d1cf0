"""The measures read from metrics.jsonl: the spike and divergence rules on hand-written metrics (the
spike threshold from both sides), and on the shared tiny run (tests/lab/conftest.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from archlab.lab.measures import measure, training_measures


def test_metrics_measures(run_dir: Path) -> None:
    run = measure.RunView(run_dir, windows=4)
    assert training_measures.diverged(run) == 0.0 and training_measures.spikes(run) == 0.0


def _write(
    run_dir: Path, losses: list[float], evals: list[float], skips: int = 0
) -> measure.RunView:
    run_dir.mkdir(parents=True, exist_ok=True)
    rows = [
        {"step": i + 1, "kind": "train", "loss": v, "grad_norm": 1.0} for i, v in enumerate(losses)
    ]
    rows += [{"step": len(losses), "kind": "eval", "loss": v} for v in evals]
    rows += [{"step": 3, "kind": "skip", "loss": "nan", "grad_norm": "nan"}] * skips
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run_dir / "config.json").write_text(json.dumps({"model": {"vocab_size": 256}}))
    return measure.RunView(run_dir, windows=1)


def test_spike_and_divergence_rules(tmp_path: Path) -> None:
    # median of the 5 before 5.5 is 4.6: 5.5 > 4.6 + 0.5 is a spike; 4.3 after it is not; a
    # skipped step counts
    run = _write(tmp_path / "a", [5.0, 4.8, 4.6, 4.5, 4.4, 5.5, 4.3, 4.2], [4.1], skips=1)
    assert training_measures.spikes(run) == 2.0 and training_measures.diverged(run) == 0.0
    # non-finite final val: diverged
    run = _write(tmp_path / "b", [5.0, 4.0, 3.0], [3.5, float("nan")])
    assert training_measures.diverged(run) == 1.0
    run = _write(tmp_path / "c", [5.0, 4.0, 3.0], [5.5])  # finite, but above the first train loss
    assert training_measures.diverged(run) == 1.0


@pytest.mark.parametrize(
    ("last", "spike"),
    [(1.5, False), (1.5000001, True), (1.4999999, False)],
    ids=["at-threshold", "just-above", "just-below"],
)
def test_spike_threshold_both_sides(tmp_path: Path, last: float, spike: bool) -> None:
    # the 5 losses before `last` have median exactly 1.0 (binary-exact values): the threshold is
    # 1.0 + 0.5
    assert training_measures.SPIKE_WINDOW == 5 and training_measures.SPIKE_NATS == 0.5
    run = _write(tmp_path / "r", [2.0, 1.0, 1.0, 0.75, 1.25, last], [1.0])
    assert training_measures.spikes(run) == float(spike)


def test_a_spike_does_not_hide_in_its_own_median(tmp_path: Path) -> None:
    """Three rising spikes after a flat start. By hand, the trailing windows before them are [1 1
    1 1 1], [1 1 1 1 3] and [1 1 1 3 3.2], median 1 each: three spikes. A window holding the point
    would give the third [1 1 3 3.2 3.4], median 3, and 3.4 < 3 + 0.5 would hide."""
    run = _write(tmp_path / "s", [1.0] * 5 + [3.0, 3.2, 3.4], [1.0])
    assert training_measures.spikes(run) == 3.0


def test_non_finite_losses_neither_spike_nor_poison_the_median(tmp_path: Path) -> None:
    # finite losses: 1 1 1 1 1 1.2 1.7; only 1.7 > median(1, 1, 1, 1, 1.2) + 0.5; plus the skip
    run = _write(tmp_path / "n", [1.0, 1.0, float("nan"), 1.0, 1.0, 1.0, 1.2, 1.7], [1.0], skips=1)
    assert training_measures.spikes(run) == 2.0

"""Reading a suite file: claims must name arms and measures (one-line errors), factors make every combination an
arm, and the torch-free index lists what load_suite loads."""

from __future__ import annotations

from pathlib import Path

import pytest

from archlab.lab.suite import SuiteError
from archlab.lab.suite_file import list_suites, load_suite, suite_index


def _suite(tmp_path: Path, text: str):
    (tmp_path / "s.yaml").write_text(text)
    return load_suite(tmp_path / "s.yaml")


ARMS = "arms: {a: {}, b: {model.norm: layernorm}}\nmeasure: [val_loss, spikes]\n"


FACTORIAL = """
measure: [val_loss]
factors:
  norm: {pre: {}, post: {model.norm_position: post}}
  warmup: {"on": {}, "off": {schedule.warmup_steps: 0}}
  lr: {normal: {}, high: {optimizer.lr: 0.02}}
claims:
  - {text: post needs warmup, metric: val_loss, factor: warmup, arm: "on", versus: "off", within: {norm: post}}
  - {text: pre beats post, metric: val_loss, factor: norm, arm: pre, versus: post}
"""


def test_claims_name_arms_and_measures(tmp_path: Path) -> None:
    with pytest.raises(SuiteError, match="versus='c' is not an arm"):
        _suite(tmp_path, ARMS + "claims:\n  - {text: x, metric: val_loss, arm: a, versus: c}\n")
    with pytest.raises(SuiteError, match="no such suite"):
        load_suite("no-such-suite")
    with pytest.raises(SuiteError, match="regimes name arms that do not exist: \\['z'\\]"):
        _suite(tmp_path, ARMS + "regimes: {hot: [a, z]}\nclaims:\n  - {text: x, metric: val_loss, arm: a, versus: b}\n")
    with pytest.raises(SuiteError, match="kind=.gpu.; one of train_step"):
        _suite(
            tmp_path,
            ARMS + "timings: [{metric: step_ms, kind: gpu, arms: [a, b]}]\nclaims:\n"
            "  - {text: x, metric: step_ms, arm: a, versus: b}\n",
        )
    timed = _suite(
        tmp_path,
        ARMS + "timings: [{metric: step_ms, kind: train_step, arms: [a, b], pairs: 20}]\n"
        "claims:\n  - {text: x, metric: step_ms, arm: b, versus: a}\n",
    )
    assert timed.timing(timed.claims[0]).pairs == 20 and timed.claims[0].better == "lower"


def test_factors_make_every_combination_an_arm(tmp_path: Path) -> None:
    suite = _suite(tmp_path, FACTORIAL)
    assert [a.name for a in suite.arms] == [
        "pre-on-normal",
        "pre-on-high",
        "pre-off-normal",
        "pre-off-high",
        "post-on-normal",
        "post-on-high",
        "post-off-normal",
        "post-off-high",
    ]
    assert suite.arm("post-off-high").overrides == {
        "model.norm_position": "post",
        "schedule.warmup_steps": 0,
        "optimizer.lr": 0.02,
    }
    assert suite.arm("pre-on-normal").overrides == {} and suite.base_arm.name == "pre-on-normal"
    warmup, norm = suite.claims
    assert suite.cells(warmup, "on") == ["post-on-normal", "post-on-high"]
    assert suite.cells(warmup, "off") == ["post-off-normal", "post-off-high"]
    assert suite.cells(norm, "post") == [a.name for a in suite.arms[4:]]
    with pytest.raises(SuiteError, match="arm='mid' is not a level of lr"):
        _suite(tmp_path, FACTORIAL + "  - {text: x, metric: val_loss, factor: lr, arm: mid, versus: high}\n")


def test_the_torch_free_index_lists_what_load_suite_loads() -> None:
    assert suite_index() == [(s.name, len(s.arms), s.title) for s in list_suites()]

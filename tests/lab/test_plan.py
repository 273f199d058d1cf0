"""A suite's plan: identical runs share one folder across suites, at least 2 seeds, each data
request gets its own prepared folder (a tokenizer, a BPE-dropout arm), and the folders prepared
before keep their names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from archlab.lab.runs.plan import plan_suite, write_plan
from archlab.lab.spec.budgets import BUDGETS
from archlab.lab.spec.suite import SuiteError
from archlab.lab.spec.suite_file import load_suite
from tests.lab.test_suite_file import ARMS, _suite


def test_a_bpe_dropout_arm_gets_its_own_data_folder_and_the_plain_ones_keep_theirs(
    tmp_path: Path,
) -> None:
    """The vocab suite's bpe32k-dropout arm once shared bpe32k's prepared folder (its request
    omitted the dropout) and every run of it was refused by the trainer; folders prepared before
    keep their names."""
    import hashlib

    plan = plan_suite(
        load_suite("vocab"), BUDGETS["tiny"], tmp_path / "out", store=tmp_path / "store"
    )
    by_arm = {r.arm: Path(r.keys["data.source"]) for r in plan.runs}
    assert by_arm["bpe32k-dropout"] != by_arm["bpe32k"] and by_arm["bpe32k"] != by_arm["bpe8k"]
    # the request before the change
    plain = json.dumps(["stdlib", "bpe", 32768, 0.05, BUDGETS["tiny"].max_files])
    assert by_arm["bpe32k"].name == f"bpe32768-{hashlib.sha1(plain.encode()).hexdigest()[:8]}"
    spec = next(d for d in plan.data if d.out == by_arm["bpe32k-dropout"])
    assert spec.bpe_dropout == 0.1 and spec.command()[-4:] == [
        "--bpe-dropout",
        "0.1",
        "--out",
        str(spec.out),
    ]
    assert "--bpe-dropout" not in next(d for d in plan.data if d.out == by_arm["bpe32k"]).command()
    assert {r.keys["data.bpe_dropout"] for r in plan.runs if r.arm == "bpe32k-dropout"} == {"0.1"}


def test_identical_runs_share_one_folder_across_suites(tmp_path: Path) -> None:
    """A run's folder is a hash of its resolved config: an arm that two suites both
    run trains once."""
    store = tmp_path / "store"
    one = plan_suite(
        _suite(tmp_path, ARMS + "claims:\n  - {text: x, metric: val_loss, arm: a, versus: b}\n"),
        BUDGETS["tiny"],
        tmp_path / "one",
        store=store,
    )
    explicit = (
        "arms: {rms: {model.norm: rmsnorm}, qk: {model.qk_norm: rmsnorm}}\nmeasure: [val_loss]\n"
        "claims:\n  - {text: x, metric: val_loss, arm: qk, versus: rms}\n"
    )
    (tmp_path / "2").mkdir()
    two = plan_suite(
        _suite(tmp_path / "2", explicit), BUDGETS["tiny"], tmp_path / "two", store=store
    )
    # llama's default norm is rmsnorm: arm `rms` (explicit) resolves to the same run as arm
    # `a` (the default)
    assert [r.run_dir for r in one.runs_of("a")] == [r.run_dir for r in two.runs_of("rms")]
    assert len({r.run_dir for r in one.runs + two.runs}) == 6  # a=rms, b, qk at 2 seeds
    assert all(r.run_dir.parent == store for r in one.runs)
    other = plan_suite(one.suite, BUDGETS["small"], tmp_path / "three", store=store)
    # another budget, other runs
    assert not {r.run_dir for r in other.runs} & {r.run_dir for r in one.runs}
    write_plan(one)
    link = tmp_path / "one" / "runs" / "a" / "seed1"
    assert link.is_symlink() and link.resolve() == one.runs_of("a")[1].run_dir.resolve()


def test_one_seed_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SuiteError, match="at least 2 seeds"):
        plan_suite(load_suite("block"), BUDGETS["tiny"], tmp_path, seeds=1)


def test_each_tokenizer_gets_its_own_data_folder(tmp_path: Path) -> None:
    # Four tokenizers, and the BPE-dropout arm's training split is tokenized apart from
    # bpe32k's plain one.
    plan = plan_suite(load_suite("vocab"), BUDGETS["tiny"], tmp_path)
    assert len({d.out for d in plan.data}) == 5
    folder = {
        (d.tokenizer, d.vocab_size if d.tokenizer == "bpe" else None, d.bpe_dropout): str(d.out)
        for d in plan.data
    }
    for run in plan.runs:
        arm = plan.suite.arm(run.arm).overrides
        key = (
            arm["data.tokenizer"],
            arm.get("data.vocab_size") if arm["data.tokenizer"] == "bpe" else None,
            arm.get("data.bpe_dropout", 0.0),
        )
        assert run.keys["data.source"] == folder[key]

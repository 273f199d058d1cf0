"""Every built-in suite loads, every arm resolves and builds (meta device), parameters follow the 2% rule."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from archlab.lab.runner import plan_suite
from archlab.lab.suite import (
    BUDGETS,
    PARAM_TOLERANCE,
    SuiteError,
    list_suites,
    load_suite,
    param_note,
    resolve_arm,
)
from archlab.nn.model import TransformerLM

# the suites are the YAML files of the package folder, read from the source tree (not through list_suites)
SUITES = sorted(p.stem for p in (Path(__file__).resolve().parents[2] / "src/archlab/lab/suites").glob("*.yaml"))


def test_every_suite_file_ships_and_is_listed() -> None:
    assert len(SUITES) >= 13  # the lecture's claims; a lost folder would make every test below vacuous
    assert sorted(s.name for s in list_suites()) == SUITES


@pytest.mark.parametrize("budget", ["tiny", "small"])
@pytest.mark.parametrize("name", SUITES)
def test_every_arm_builds_and_parameters_match(name: str, budget: str, tmp_path: Path) -> None:
    suite = load_suite(name)
    plan = plan_suite(suite, BUDGETS[budget], tmp_path)
    base = None
    for arm in suite.arms:
        train, model_config = resolve_arm(suite, arm, BUDGETS[budget])
        with torch.device("meta"):
            model = TransformerLM(model_config)
        built = sum(p.numel() for p in model.parameters())
        assert built == arm.params, f"{name}/{arm.name}: parameter_counts disagrees with the built model"
        base = base if base is not None else built
        off = abs(built - base) / base
        if suite.match_params == "d_ff" and arm.name not in suite.unmatched:
            assert off <= PARAM_TOLERANCE, f"{name}/{arm.name} is {off:.1%} off the base"
        assert arm.flagged == (off > PARAM_TOLERANCE)
        note = param_note(suite, arm, built, base)
        assert arm.flagged == ("parameters vs the base" in note)
        assert ("model.d_ff" in arm.overrides) == ("d_ff" in note and arm.matched != "")
        assert train.steps == BUDGETS[budget].keys["steps"]
    # fair by construction: every run of an arm differs from the base's only in the arm's own keys
    base_keys = plan.runs_of(suite.base_arm.name)[0].keys
    for run in plan.runs:
        arm = suite.arm(run.arm)
        differ = {k for k in set(base_keys) | set(run.keys) if base_keys.get(k) != run.keys.get(k)}
        assert differ <= set(arm.overrides) | {"seed", "out", "data.source"}, (run.arm, differ)
    assert min(len(plan.runs_of(a.name)) for a in suite.arms) >= 2


def test_claims_name_arms_and_measures(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("arms: {a: {}, b: {model.norm: layernorm}}\nclaims:\n"
                   "  - {text: x, metric: val_loss, arm: a, versus: c}\n", encoding="utf-8")
    with pytest.raises(SuiteError, match="versus='c' is not an arm"):
        load_suite(bad)
    with pytest.raises(SuiteError, match="no such suite"):
        load_suite("no-such-suite")


def test_bad_arm_fails_with_the_trainers_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("arms: {a: {}, b: {model.norm: batchnorm}}\nclaims:\n"
                   "  - {text: x, metric: val_loss, arm: a, versus: b}\n", encoding="utf-8")
    with pytest.raises(SuiteError, match=r"arm b: .*norm='batchnorm' is not allowed: one of rmsnorm, layernorm"):
        plan_suite(load_suite(bad), BUDGETS["tiny"], tmp_path)


def test_one_seed_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SuiteError, match="at least 2 seeds"):
        plan_suite(load_suite("block"), BUDGETS["tiny"], tmp_path, seeds=1)


def test_each_tokenizer_gets_its_own_data_folder(tmp_path: Path) -> None:
    plan = plan_suite(load_suite("vocab"), BUDGETS["tiny"], tmp_path)
    assert len({d.out for d in plan.data}) == 4
    folder = {(d.tokenizer, d.vocab_size if d.tokenizer == "bpe" else None): str(d.out) for d in plan.data}
    for run in plan.runs:
        arm = plan.suite.arm(run.arm).overrides
        key = (arm["data.tokenizer"], arm.get("data.vocab_size") if arm["data.tokenizer"] == "bpe" else None)
        assert run.keys["data.source"] == folder[key]

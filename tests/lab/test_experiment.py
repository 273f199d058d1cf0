"""The lab's front door (archlab.lab.experiment): planning from arguments or from a folder's plan.json, the
command lines, and planning that leaves the suite it was given as it was. Training and reports go through it in
tests/cli/test_ablate.py (a two-arm suite end to end) and tests/lab/test_report.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from archlab.lab.experiment import Experiment
from archlab.lab.suite import SuiteError


def test_an_experiment_plans_from_arguments_then_from_its_folder(tmp_path: Path) -> None:
    out, store = tmp_path / "heads", tmp_path / "store"
    exp = Experiment.create("heads", budget="tiny", out=out, seeds=3, store=store)
    assert (exp.plan.budget.name, exp.plan.seeds, exp.plan.store) == ("tiny", 3, store)
    lines = exp.commands()  # writes plan.json
    assert lines[0].startswith("archlab data prepare") and len(lines) == 1 + 3 * len(exp.suite.arms)
    again = Experiment.create("heads", collect=out)  # budget, seeds and store from plan.json, not the defaults
    assert (again.plan.budget.name, again.plan.seeds, again.plan.store) == ("tiny", 3, store)
    assert [r.run_dir for r in again.plan.runs] == [r.run_dir for r in exp.plan.runs]
    rows = {r.claim.text: r for r in exp.power()}
    assert rows["GQA cuts the KV cache"].seeds is None  # a formula: no seeds
    with pytest.raises(SuiteError, match="no plan.json there"):
        Experiment.create("heads", collect=tmp_path / "nowhere")


def test_planning_returns_the_matched_suite_and_leaves_the_loaded_one_alone(tmp_path: Path) -> None:
    from archlab.lab.suite_file import load_suite

    loaded = load_suite("heads")
    overrides = [dict(a.overrides) for a in loaded.arms]
    exp = Experiment.create("heads", budget="tiny", out=tmp_path / "x")
    matched = {a.name: a for a in exp.suite.arms}
    assert any("model.d_ff" in a.overrides for a in matched.values())  # GQA / MQA get d_ff back
    assert [dict(a.overrides) for a in load_suite("heads").arms] == overrides == [a.overrides for a in loaded.arms]

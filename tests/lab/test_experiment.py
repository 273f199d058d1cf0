"""The lab's front door (archlab.lab.Experiment): planning from arguments or from a folder's
plan.json, the command lines (the record's and the one that continues a run, which the real parser
reads back to the same settings), each step computed once, publishing into another folder, and
planning that leaves the suite it was given as it was. Training through it: tests/cli/test_ablate.py
(a two-arm suite end to end) and tests/lab/test_report.py."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

import archlab.lab
from archlab.cli import build_parser
from archlab.lab import experiment as experiment_module
from archlab.lab.experiment import Experiment
from archlab.lab.spec.suite import SuiteError
from tests.lab.test_report import SUITE, _fake_runs


def test_an_experiment_plans_from_arguments_then_from_its_folder(tmp_path: Path) -> None:
    out, store = tmp_path / "heads", tmp_path / "store"
    exp = Experiment("heads", budget="tiny", seeds=3, store=store, out=out)
    assert exp.plan() is exp.plan()  # planned once
    assert (exp.plan().budget.name, exp.plan().seeds, exp.plan().store) == ("tiny", 3, store)
    lines = exp.commands()  # writes plan.json
    assert lines[0].startswith("archlab data prepare") and len(lines) == 1 + 3 * len(exp.suite.arms)
    # suite, budget, seeds and store from plan.json, not the defaults
    again = Experiment.collect(out)
    assert (again.plan().budget.name, again.plan().seeds, again.plan().store) == ("tiny", 3, store)
    assert [r.run_dir for r in again.plan().runs] == [r.run_dir for r in exp.plan().runs]
    rows = {r.claim.text: r for r in exp.power()}
    assert rows["GQA cuts the KV cache"].seeds is None  # a formula: no seeds
    with pytest.raises(SuiteError, match="no plan.json there"):
        Experiment.collect(tmp_path / "nowhere")
    assert archlab.lab.Experiment is Experiment  # the package's front door
    # the same folder planned again without --store keeps the store its plan.json names,
    # not the default
    assert Experiment("heads", budget="tiny", seeds=3, out=out).plan().store == store
    assert (
        Experiment("heads", budget="tiny", out=tmp_path / "new").plan().store == tmp_path / "store"
    )


@pytest.mark.parametrize(
    ("jobs", "executor", "message"),
    [
        (0, "local", "--jobs 0 is not allowed: at least 1"),
        (1, "ssh", "--executor 'ssh' is not allowed: local, slurm"),
    ],
)
def test_bad_settings_are_one_line_before_any_plan(
    tmp_path: Path, jobs: int, executor: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        Experiment("heads", budget="tiny", jobs=jobs, executor=executor, out=tmp_path / "x")
    with pytest.raises(ValueError, match="--budget 'huge' is not allowed: tiny, small, medium"):
        Experiment("heads", budget="huge")
    assert not (tmp_path / "x").exists()


def test_the_continuing_command_reads_back_to_the_same_settings(tmp_path: Path) -> None:
    exp = Experiment(
        "heads", budget="tiny", seeds=4, store=tmp_path / "st ore", jobs=2, out=tmp_path / "o"
    )
    record, resume = exp.command(), exp.command("pocock", 8, execution=True)
    # the record keeps what was trained and judged, not how this machine ran it
    assert "--jobs" not in record
    args = build_parser("ablate").parse_known_args(shlex.split(resume)[1:])[0]
    again = Experiment(
        args.suite, args.budget, args.seeds, args.store, args.jobs, args.executor, out=args.out
    )
    assert [r.run_dir for r in again.plan().runs] == [r.run_dir for r in exp.plan().runs]
    assert (args.jobs, args.sequential, args.max_seeds, args.store) == (
        2,
        "pocock",
        8,
        str(tmp_path / "st ore"),
    )


def test_each_step_is_computed_once_and_publish_only_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "synthetic.yaml").write_text(SUITE)
    exp = Experiment(tmp_path / "synthetic.yaml", budget="tiny", seeds=3, out=tmp_path / "out")
    _fake_runs(exp.plan())
    calls = {"measure": 0, "judge": 0}
    for name in calls:
        real = getattr(experiment_module, f"{name}_plan" if name == "measure" else name)

        def counted(*a, _real=real, _name=name, **k):
            calls[_name] += 1
            return _real(*a, **k)

        monkeypatch.setattr(
            experiment_module, f"{name}_plan" if name == "measure" else name, counted
        )
    results = exp.judge()
    assert exp.judge() is results and exp.measure() is exp.measure()
    published = exp.publish(tmp_path / "page")
    assert published is results and calls == {"measure": 1, "judge": 1}
    claims = json.loads((tmp_path / "page" / "claims.json").read_text())
    assert [c["outcome"] for c in claims] == [r.outcome for r in results]
    assert (tmp_path / "page" / "results.md").is_file() and (
        tmp_path / "page" / "val_loss.png"
    ).is_file()
    # written where it was asked, nowhere else
    assert not (tmp_path / "out" / "results.md").exists()


def test_planning_returns_the_matched_suite_and_leaves_the_loaded_one_alone(tmp_path: Path) -> None:
    from archlab.lab.spec.suite_file import load_suite

    loaded = load_suite("heads")
    overrides = [dict(a.overrides) for a in loaded.arms]
    exp = Experiment("heads", budget="tiny", out=tmp_path / "x")
    matched = {a.name: a for a in exp.suite.arms}
    assert any("model.d_ff" in a.overrides for a in matched.values())  # GQA / MQA get d_ff back
    assert (
        [dict(a.overrides) for a in load_suite("heads").arms]
        == overrides
        == [a.overrides for a in loaded.arms]
    )


def test_the_arm_lines_give_each_arms_size_and_how_it_was_matched(tmp_path: Path) -> None:
    """What `archlab ablate` prints before it trains: one line per arm, its parameters, its
    d_ff matching, and a size more than 2% off the base's with the reason (block's d96 arms are
    larger by design)."""
    for name, off_base in (("block", 2), ("ffn", 0)):
        exp = Experiment(name, budget="tiny", out=tmp_path / name)
        arms, lines = exp.suite.arms, exp.arm_lines()
        assert len(lines) == len(arms)
        base = exp.suite.base_arm.params
        for arm, line in zip(arms, lines, strict=True):
            assert line.split()[:3] == [arm.name, f"{arm.params:,}", "parameters"]
            off = arm.params / base - 1
            assert (f"{off:+.1%} parameters vs the base (by design)" in line) == (
                abs(off) > 0.02
            ), line
            assert not arm.matched or line.endswith(arm.matched)
        assert sum(abs(a.params / base - 1) > 0.02 for a in arms) == off_base
        # swiglu, geglu, reglu: d_ff matched
        assert name != "ffn" or sum(bool(a.matched) for a in arms) == 3


def test_the_front_door_names_are_the_modules_own() -> None:
    """Each name of archlab.lab's __all__ (what commands/ and scripts/ may import,
    tests/test_layout.py) is the object its module defines, found lazily; a name it does not offer
    is an AttributeError."""
    from importlib import import_module

    public = archlab.lab._PUBLIC
    assert sorted(archlab.lab.__all__) == sorted(public) and set(public) <= set(dir(archlab.lab))
    for name, (module, attribute) in public.items():
        assert getattr(archlab.lab, name) is getattr(import_module(module), attribute), name
    assert archlab.lab.check_pages.__name__ == "check" and archlab.lab.verify.__module__.endswith(
        "publishing.verify"
    )
    with pytest.raises(AttributeError, match="has no attribute 'stats'"):
        archlab.lab.stats  # noqa: B018

"""What `archlab ablate` tells the user around a run: the Ctrl-C resume hint reruns the same
experiment (parsed by the real parser, it gives the same settings, and run as printed it writes
the same plan.json)."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from archlab.cli import build_parser, main
from archlab.commands import ablate as command
from archlab.lab.runs.plan import write_plan
from tests.cli.test_ablate import SUITE


def interrupted(exp: object) -> None:
    """A Ctrl-C during training, after the plan was written (as `Experiment.run`
    writes it first)."""
    write_plan(exp.plan())
    raise KeyboardInterrupt


def hint_after_ctrl_c(argv: list[str], capsys: pytest.CaptureFixture) -> list[str]:
    assert main(argv) == 130
    err = capsys.readouterr().err
    found = re.search(r"Run `([^`]+)` again to continue where it stopped", err)
    assert found, err
    words = shlex.split(found.group(1))
    assert words[:2] == ["archlab", "ablate"]
    return words[1:]


def normal(value: object) -> object:
    """Paths compared as paths ("a/./b" and "a/b" are one folder)."""
    return str(Path(value)) if isinstance(value, str) and "/" in value else value


@pytest.mark.parametrize(
    "given",
    [
        [],
        ["--store", "{tmp}/elsewhere", "--jobs", "2"],
        ["--store", "{tmp}/s3", "--jobs", "2", "--records", "{tmp}/records"],
        [
            "--budget",
            "tiny",
            "--seeds",
            "3",
            "--jobs",
            "3",
            "--store",
            "{tmp}/s2",
            "--sequential",
            "pocock",
            "--max-seeds",
            "6",
        ],
    ],
    ids=["defaults", "store-jobs", "records", "everything"],
)
def test_the_resume_hint_parses_to_the_settings_it_was_given(
    given: list[str], tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = tmp_path / "two-arms.yaml"
    spec.write_text(SUITE, encoding="utf-8")
    argv = [
        "ablate",
        str(spec),
        "--out",
        str(tmp_path / "suite"),
        *(g.format(tmp=tmp_path) for g in given),
    ]
    monkeypatch.setattr(command, "_train", interrupted)
    hint = hint_after_ctrl_c(argv, capsys)
    parser = build_parser("ablate")
    original, again = parser.parse_args(argv), parser.parse_args(hint)
    defaults = parser.parse_args(["ablate", str(spec)])
    given_keys = [k for k, v in vars(original).items() if v != getattr(defaults, k)]
    assert {"out", *(["store", "jobs"] if given else [])} <= set(given_keys)
    for key in given_keys:  # every flag the user gave comes back with its value
        assert normal(getattr(again, key)) == normal(getattr(original, key)), key
    # and what the defaults resolved to is written out, so the rerun does not depend on them
    first, second = command._experiment(original).plan(), command._experiment(again).plan()
    assert (second.out, second.store, second.budget, second.seeds, second.extra) == (
        first.out,
        first.store,
        first.budget,
        first.seeds,
        first.extra,
    )
    assert (again.jobs, again.executor, again.sequential, again.max_seeds) == (
        original.jobs,
        original.executor,
        original.sequential,
        original.max_seeds,
    )
    # run as printed: the same plan.json (the same store), and the same hint again
    plan_json = (tmp_path / "suite" / "plan.json").read_text()
    assert json.loads(plan_json)["store"] == str(first.store)
    assert hint_after_ctrl_c(hint, capsys) == hint
    assert (tmp_path / "suite" / "plan.json").read_text() == plan_json

"""A plan's registration (lab/spec/registration.py): before its first run trains,
`Experiment.register` (called by run, submit and commands) writes the claims exactly as they will be
judged into the suite's folder and the store; the same claims again change nothing; claims changed
after runs trained get a new registration, kept beside the old one; the verifier names each judged
claim that is not the one registered; a page says when its claims were registered."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from archlab.lab.experiment import Experiment
from archlab.lab.publishing import registered
from archlab.lab.spec import registration
from archlab.lab.spec.suite import SuiteError
from archlab.lab.spec.suite_file import load_suite

REPO = Path(__file__).resolve().parents[2]
SUITE = """
name: reg
title: two arms
source: a test
design: registration
base: {preset: llama}
arms: {a: {}, b: {model.norm: layernorm}}
measure: [val_loss]
claims:
  - {text: b beats a, metric: val_loss, arm: b, versus: a, role: primary, tests: norm-choice}
  - {text: b is as good as a, metric: val_loss, arm: b, versus: a, expect: same, role: secondary}
"""


def head() -> str:
    return subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()


def experiment(tmp_path: Path, out: str = "out") -> Experiment:
    return Experiment(
        tmp_path / "reg.yaml", budget="tiny", seeds=2, store=tmp_path / "store", out=tmp_path / out
    )


def test_claims_are_registered_as_they_will_be_judged_before_the_first_run(tmp_path: Path) -> None:
    (tmp_path / "reg.yaml").write_text(SUITE)
    exp = experiment(tmp_path)
    # --print-commands: the runs will train elsewhere, so the plan is registered now
    lines = exp.commands()
    assert lines and not any(r.run_dir.exists() for r in exp.plan().runs)
    record = json.loads((tmp_path / "out" / "registration.json").read_text())
    store = tmp_path / "store" / "registrations" / "reg-tiny.json"
    assert store.read_text() == (tmp_path / "out" / "registration.json").read_text()
    [entry] = record["registrations"]
    assert (
        entry["before_first_run"],
        entry["runs_trained"],
        entry["suite"],
        entry["budget"],
        entry["seeds"],
    ) == (True, 0, "reg", "tiny", 2)
    assert (entry["commit"] == head()) if (REPO / ".git").exists() else entry["commit"] == "unknown"
    assert entry["suite_file"] == "reg.yaml"
    assert entry["suite_sha256"] == hashlib.sha256((tmp_path / "reg.yaml").read_bytes()).hexdigest()
    better, same = entry["claims"]
    # the unstated margin and smallest effect, as the verdict will use them
    margin = exp.plan().budget.margin
    assert (
        same["expect"],
        same["margin"],
        same["smallest_effect"],
        same["role"],
        same["tests"],
    ) == ("same", margin, margin, "secondary", None)
    assert (
        better["arms"],
        better["better"],
        better["role"],
        better["tests"],
        better["margin"],
    ) == ("b vs a", "lower", "primary", "norm-choice", None)
    assert better["smallest_effect"] == margin
    # the same claims again (another session, a rerun): nothing new
    assert experiment(tmp_path).register() == entry
    assert len(json.loads(store.read_text())["registrations"]) == 1


def test_claims_changed_after_runs_trained_get_a_new_registration_and_both_are_kept(
    tmp_path: Path,
) -> None:
    (tmp_path / "reg.yaml").write_text(SUITE)
    first = experiment(tmp_path).register()
    run = experiment(tmp_path).plan().runs[0]
    run.run_dir.mkdir(parents=True)
    # one run trained
    (run.run_dir / "metrics.jsonl").write_text('{"step": 1, "kind": "train", "loss": 5.0}\n')
    (tmp_path / "reg.yaml").write_text(
        SUITE.replace("expect: same,", "expect: same, margin: 0.05,")
    )
    lines: list[str] = []
    exp = Experiment(
        tmp_path / "reg.yaml",
        budget="tiny",
        seeds=2,
        store=tmp_path / "store",
        out=tmp_path / "out",
        log=lines.append,
    )
    second = exp.register()
    assert (second["before_first_run"], second["runs_trained"]) == (False, 1)
    assert second["claims"][1]["margin"] == 0.05 and first["claims"][1]["margin"] != 0.05
    kept = json.loads((tmp_path / "out" / "registration.json").read_text())["registrations"]
    assert kept == [first, second]
    assert lines == [
        f"registered 2 claims at commit {str(second['commit'])[:12]}, after 1 runs had trained: "
        f"{tmp_path / 'out' / 'registration.json'}"
    ]
    # a new folder planned on the same store finds the store's registrations: the history
    # is not restarted
    again = experiment(tmp_path, out="elsewhere").register()
    assert again == second
    assert json.loads((tmp_path / "elsewhere" / "registration.json").read_text())[
        "registrations"
    ] == [first, second]
    # the page says so, and names the earlier registration
    [line] = registered.lines({"registrations": kept}, 4)
    assert line.startswith(f"Registered at commit {str(second['commit'])[:12]}")
    assert "after 1 of the plan's runs had trained: the 2 claims as judged here" in line
    assert (
        "Earlier registrations, kept in registration.json: " in line
        and "before the first run" in line
    )
    assert registered.margins_when({"registrations": kept}) == "registered after 1 runs had trained"
    assert registered.margins_when({"registrations": kept[:1]}) == registered.REGISTERED_BEFORE


def test_the_differences_name_each_field_and_claim() -> None:
    claims = registration.claims_of(load_suite("heads"))
    assert registration.differences(claims, claims) == []
    changed = [dict(c) for c in claims]
    changed[0]["margin"], changed[0]["text"] = 0.5, claims[0]["text"]
    changed[1]["expect"] = "same"
    moved = changed[:-1] + [{**changed[-1], "text": "a new claim"}]
    assert registration.differences(claims, moved) == [
        f"{claims[0]['text']!r}: margin {claims[0]['margin']!r} registered, 0.5 judged",
        f"{claims[1]['text']!r}: expect {claims[1]['expect']!r} registered, 'same' judged",
        "'a new claim': judged but not registered",
        f"{claims[-1]['text']!r}: registered but not judged",
    ]


def test_a_claims_role_is_primary_or_secondary(tmp_path: Path) -> None:
    (tmp_path / "bad.yaml").write_text(SUITE.replace("role: secondary", "role: main"))
    with pytest.raises(
        SuiteError,
        match=r"claim 'b is as good as a': role='main'; one of \('primary', "
        r"'secondary'\) or absent",
    ):
        load_suite(tmp_path / "bad.yaml")


def test_a_registration_after_runs_names_the_runs_that_started_before_it() -> None:
    from archlab.lab.publishing import registered

    entry = {
        "registered_at": "2026-12-05T08:00:00+00:00",
        "commit": "0eb6d2e14b9b56ee",
        "dirty": False,
        "runs_trained": 2,
        "before_first_run": False,
        "claims": [{"text": "a"}],
    }
    started = {
        "base/seed0": "2026-12-05T07:59:59+00:00",
        "base/seed1": "2026-12-05T07:30:00+00:00",
        "base/seed2": "2026-12-05T08:00:00+00:00",
        "other/seed0": "2026-12-05T08:00:01+00:00",
        "other/seed1": None,
    }
    # the same second is not before
    assert registered.trained_before(entry, started) == ["base/seed0", "base/seed1"]
    [line] = registered.lines({"registrations": [entry]}, 5, {"started": started})
    assert line.startswith(
        "Registered at commit 0eb6d2e14b9b, 2026-12-05, after 2 of the plan's runs had trained "
        "(base/seed0, base/seed1, by their provenance records;"
    )
    # a page without start times keeps the count alone
    [plain] = registered.lines({"registrations": [entry]}, 5)
    assert plain.startswith(
        "Registered at commit 0eb6d2e14b9b, 2026-12-05, after 2 of the plan's runs had trained: "
    )
    assert registered.lines(
        {"registrations": [{**entry, "before_first_run": True}]}, 5, {"started": started}
    )[0].startswith("Registered at commit 0eb6d2e14b9b, 2026-12-05, before the first run")


def test_claims_were_committed_first_only_from_a_clean_built_in_file_every_run_ran() -> None:
    """A registration after runs had trained says its claims came first only when it was made
    from a clean checkout of the commit every run recorded without local changes, from the built-in
    suite file; each condition broken alone takes the sentence away."""
    from archlab.lab.publishing import registered

    entry = {
        "registered_at": "2026-12-05T08:00:00+00:00",
        "commit": "c" * 40,
        "dirty": False,
        "suite": "heads",
        "suite_file": "heads.yaml",
        "runs_trained": 1,
        "before_first_run": False,
        "claims": [{"text": "a"}],
    }
    clean = {"value": {"commit": "c" * 40, "dirty": False}, "runs": ["base/seed0", "gqa/seed0"]}
    gathered = {
        "recorded": ["base/seed0", "gqa/seed0"],
        "unrecorded": [],
        "code": [clean],
        "started": {"base/seed0": "2026-12-05T07:00:00+00:00"},
    }
    sentence = "committed before any of its runs trained"
    assert registered.committed_before_runs(entry, gathered)
    assert sentence in registered.lines({"registrations": [entry]}, 2, gathered)[0]
    broken = [
        ({**entry, "dirty": True}, gathered),
        ({**entry, "dirty": None}, gathered),  # unknown is not clean
        ({**entry, "suite_file": "my-heads.yaml"}, gathered),  # not the built-in file
        ({**entry, "commit": "d" * 40}, gathered),
        (entry, {**gathered, "code": [{**clean, "value": {"commit": "c" * 40, "dirty": True}}]}),
        (entry, {**gathered, "code": [clean, {"value": {"commit": "d" * 40, "dirty": False}}]}),
        (entry, {**gathered, "unrecorded": ["gqa/seed1"]}),
        (entry, {**gathered, "recorded": []}),
        (entry, None),
    ]
    for bad_entry, bad_gathered in broken:
        assert not registered.committed_before_runs(bad_entry, bad_gathered)
        line = registered.lines({"registrations": [bad_entry]}, 2, bad_gathered)[0]
        assert sentence not in line and "after 1 of the plan's runs had trained" in line

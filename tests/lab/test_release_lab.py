"""scripts/release_lab.py, the driver of a release: the seeds rule on both sides of its floor and
cap, a registration committed beside the records winning over the rule, every listed suite
registered before the first one trains, and the command each suite trains by (the training itself is
`archlab ablate --records`, tested in test_records.py)."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _script():
    spec = importlib.util.spec_from_file_location(
        "release_lab", ROOT / "scripts" / "release_lab.py"
    )
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


release_lab = _script()


@pytest.mark.parametrize(
    ("needs", "seeds"),
    [
        ([], 3),  # no claim with a t-plan: the floor
        ([None, 2], 3),  # below the floor
        ([3], 3),
        ([4, None], 4),
        ([8, 5], 8),  # the cap itself is given
        ([9], 3),  # one past the cap: not given, the floor stands
        ([9, 5], 5),  # ... and the claims within reach decide
        ([42, 8, 7], 8),
    ],
)
def test_the_release_rule_gives_the_most_a_claim_needs_between_its_floor_and_cap(
    needs: list[int | None], seeds: int
) -> None:
    assert (release_lab.FLOOR, release_lab.CAP) == (3, 8)
    assert release_lab.release_rule(needs) == seeds


def test_registered_seeds_are_the_last_registrations(tmp_path: Path) -> None:
    assert release_lab.registered_seeds(tmp_path) is None
    path = tmp_path / "registration.json"
    path.write_text(json.dumps({"registrations": []}))
    assert release_lab.registered_seeds(tmp_path) is None
    path.write_text(json.dumps({"registrations": [{"seeds": 7}, {"seeds": 5}]}))
    assert release_lab.registered_seeds(tmp_path) == 5


def test_every_suite_is_registered_before_the_first_trains_and_keeps_its_seeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two suites: both registrations lie beside their records when the first `archlab ablate`
    starts; each command trains at the seeds the rule gave into the one store, its records under
    its page; a second sitting keeps the registered seeds over the rule; a failing suite stops the
    ones after it."""
    work, docs = tmp_path / "work", tmp_path / "docs"
    suites = ["norm-type", "tied-head"]
    calls: list[tuple[list[str], list[bool]]] = []

    def ablate(command: list[str]) -> int:
        registered = [(docs / s / "runs" / "registration.json").is_file() for s in suites]
        calls.append((command, registered))
        return 0

    monkeypatch.setattr(release_lab.subprocess, "call", ablate)
    argv = [*suites, "--budget", "tiny", "--jobs", "1", "--work", str(work), "--docs", str(docs)]
    assert release_lab.main(argv) == 0
    assert [registered for _, registered in calls] == [[True, True], [True, True]]
    rule = {s: release_lab.rule_seeds(s, "tiny", work / f"{s}-tiny")[0] for s in suites}
    for (command, _), suite in zip(calls, suites):
        flags = dict(zip(command[5::2], command[6::2]))
        assert command[:5] == [sys.executable, "-m", "archlab", "ablate", suite]
        assert flags == {
            "--budget": "tiny",
            "--seeds": str(rule[suite]),
            "--out": str(work / f"{suite}-tiny"),
            "--store": str(work / "store"),
            "--jobs": "1",
            "--records": str(docs / suite / "runs"),
        }
        registration = json.loads((docs / suite / "runs" / "registration.json").read_text())
        assert registration["registrations"][-1]["seeds"] == rule[suite]

    # a later sitting on a fresh machine (no work folder): the registration committed beside the
    # records decides the seeds, not the rule, and stays the one registration, at its first time
    path = docs / "tied-head" / "runs" / "registration.json"
    record = json.loads(path.read_text())
    record["registrations"][-1]["seeds"] = rule["tied-head"] + 2
    path.write_text(json.dumps(record))
    shutil.rmtree(work)
    calls.clear()
    monkeypatch.setattr(release_lab.subprocess, "call", lambda c: calls.append(c) or 5)
    assert release_lab.main(["tied-head", "norm-type", *argv[2:]]) == 5
    assert len(calls) == 1 and calls[0][calls[0].index("--seeds") + 1] == str(rule["tied-head"] + 2)
    assert json.loads(path.read_text()) == record


def test_an_unknown_suite_is_refused_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as stop:
        release_lab.main(["no-such-suite", "--work", str(tmp_path / "w"), "--docs", str(tmp_path)])
    assert stop.value.code == 2
    assert "not a built-in suite: no-such-suite (one of " in capsys.readouterr().err
    assert not (tmp_path / "w").exists()


@pytest.mark.parametrize(
    ("flags", "line"),
    [
        (["--jobs", "0"], "--jobs 0 is not allowed: at least 1 run at a time"),
        (["--budget", "huge"], "--budget 'huge' is not allowed: one of tiny, small, medium"),
    ],
)
def test_bad_jobs_or_budget_are_refused_before_any_registration(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: list[str], line: str
) -> None:
    docs = tmp_path / "docs"
    with pytest.raises(SystemExit) as stop:
        release_lab.main(["norm-type", *flags, "--work", str(tmp_path / "w"), "--docs", str(docs)])
    assert stop.value.code == 2 and line in capsys.readouterr().err
    assert not (tmp_path / "w").exists() and not docs.exists()


def test_each_sitting_keeps_its_wall_time_and_machine_beside_the_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fresh machine's sitting goes on from the sittings committed beside the records; with a
    package that keeps one total (0eb6d2e's), the total's growth is this sitting's entry, on the
    machine that package names; with one that keeps sittings, its record is carried as it is; a
    sitting stopped by Ctrl-C is kept too."""
    work, docs = tmp_path / "work", tmp_path / "docs"
    folder, records = work / "tied-head-tiny", docs / "tied-head" / "runs"
    records.mkdir(parents=True)
    amd = {"wall_s": 5622.0, "jobs": 2, "machine": "AMD EPYC", "ended_at": "2026-12-06T00:00:00"}
    (records / "lab-time.json").write_text(
        json.dumps({"train_wall_s": 5622.0, "jobs": 2, "machine": "AMD EPYC", "sittings": [amd]})
    )
    seen: list[dict] = []

    def old_package(command: list[str]) -> int:  # adds to the total, names its machine, no sittings
        found = json.loads((folder / "lab-time.json").read_text())
        seen.append(found)
        total = found["train_wall_s"] + 600.0
        (folder / "lab-time.json").write_text(
            json.dumps({"train_wall_s": total, "jobs": 2, "machine": "Intel Xeon"})
        )
        return 130

    monkeypatch.setattr(release_lab.subprocess, "call", old_package)
    argv = ["tied-head", "--budget", "tiny", "--work", str(work), "--docs", str(docs)]
    assert release_lab.main(argv) == 130
    assert seen[0]["sittings"] == [amd]  # laid in before the ablate
    kept = json.loads((records / "lab-time.json").read_text())
    assert kept == json.loads((folder / "lab-time.json").read_text())
    assert kept["train_wall_s"] == 6222.0 and kept["sittings"][0] == amd
    assert {k: v for k, v in kept["sittings"][1].items() if k != "ended_at"} == {
        "wall_s": 600.0,
        "jobs": 2,
        "machine": "Intel Xeon",
    }
    # the next sitting on the same machine: its folder's record goes on, not an older one
    # beside the records
    (records / "lab-time.json").write_text(json.dumps({"train_wall_s": 1.0, "sittings": []}))
    assert release_lab.main(argv) == 130
    kept = json.loads((records / "lab-time.json").read_text())
    assert [s["wall_s"] for s in kept["sittings"]] == [5622.0, 600.0, 600.0]

    # a sitting that trained nothing (its total did not grow) adds no entry
    def nothing_left(command: list[str]) -> int:
        found = json.loads((folder / "lab-time.json").read_text())
        (folder / "lab-time.json").write_text(
            json.dumps({"train_wall_s": found["train_wall_s"], "jobs": 2, "machine": "Intel Xeon"})
        )
        return 0

    monkeypatch.setattr(release_lab.subprocess, "call", nothing_left)
    assert release_lab.main(argv) == 0
    assert json.loads((records / "lab-time.json").read_text())["sittings"] == kept["sittings"]

    # a package that keeps sittings: carried as it wrote them; Ctrl-C still keeps them
    def new_package(command: list[str]) -> int:
        release_lab.suite_time.record_suite_time(folder, 60.0, 2, machine="AMD EPYC 9004")
        raise KeyboardInterrupt

    monkeypatch.setattr(release_lab.subprocess, "call", new_package)
    with pytest.raises(KeyboardInterrupt):
        release_lab.main(argv)
    kept = json.loads((records / "lab-time.json").read_text())
    assert [s["machine"] for s in kept["sittings"]] == [
        "AMD EPYC",
        "Intel Xeon",
        "Intel Xeon",
        "AMD EPYC 9004",
    ]

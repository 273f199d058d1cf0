"""What a page says of its registration (lab/spec/registration.py): when its claims, margins and
smallest effects were fixed, against when its runs trained.

- registered before the first run: "Registered at commit C, DATE, before the first run";
- registered again after runs had trained (the claims changed): when, after how many runs, and the
  earlier registrations, which registration.json keeps;
- a page published before registrations existed carries the registration made when registrations
  began, after its runs, with what is known of when its margins and smallest effects were set
  (`margins_set`, `effects_set`, `note`, from git history): most say "margin set on re-judging,
  after the runs";
- a folder without registration.json: "not registered".

A registration made after some runs had trained (in a shared store, the base arm's seeds another
suite trained first) can still show that its claims came first: when it was made from a clean
checkout of commit C, from the built-in suite file, and every run recorded that it ran C without
local changes, the claims are the suite file C holds, and a run cannot record a commit that did not
exist yet (`committed_before_runs`; tests/lab/test_published.py checks each such page's suite file
hash against C's file in git).
"""

from __future__ import annotations

import json
from pathlib import Path

from archlab.lab.spec.registration import REGISTRATION

REGISTERED_BEFORE = "registered before the first run"


def made_on_rejudging(folder: Path) -> bool | None:
    """Whether the registration in force in page folder `folder` is one made on re-judging a page
    published before registrations existed (it says when margins and effects were set), rather
    than one made for its runs; None: no registration."""
    path = folder / REGISTRATION
    if not path.is_file():
        return None
    registrations = json.loads(path.read_text(encoding="utf-8"))["registrations"]
    return bool(registrations and "effects_set" in registrations[-1])


def _when(entry: dict) -> str:
    dirty = " (with local changes)" if entry.get("dirty") is True else ""
    return (
        f"commit {str(entry.get('commit'))[:12]}{dirty}, {str(entry.get('registered_at', ''))[:10]}"
    )


def trained_before(entry: dict, started: dict | None) -> list[str]:
    """The runs whose first session started before `entry` was registered, by their own provenance
    records (`started`: run label -> its first session's start, run_provenance.gather); []
    where not recorded."""
    when = entry.get("registered_at")
    return [label for label, at in (started or {}).items() if at and when and at < when]


def committed_before_runs(entry: dict, gathered: dict | None) -> bool:
    """Whether `entry`'s claims were committed before any of the page's runs trained (module doc):
    registered from a clean checkout of commit C, from the built-in suite file, and every run
    recorded C without local changes (`gathered`: run_provenance.gather's result)."""
    if not gathered or gathered.get("unrecorded") or not gathered.get("recorded"):
        return False
    code = gathered.get("code") or []
    return (
        entry.get("dirty") is False
        and entry.get("suite_file") == f"{entry.get('suite')}.yaml"
        and len(code) == 1
        and code[0]["value"].get("commit") == entry.get("commit")
        and code[0]["value"].get("dirty") is False
    )


def lines(record: dict | None, runs: int, gathered: dict | None = None) -> list[str]:
    """The page's registration line(s) from registration.json's record (None: there is none);
    `runs`: the page's runs; `gathered`: their provenance records (run_provenance.gather), to name
    the runs that trained before the registration and to show when its claims were committed."""
    started = (gathered or {}).get("started")
    if not record or not record.get("registrations"):
        return [
            "Registration: none (this folder predates registrations): its claims, margins and "
            "smallest effects were not recorded before its runs."
        ]
    *earlier, last = record["registrations"]
    n = len(last["claims"])
    if last.get("before_first_run"):
        line = (
            f"Registered at {_when(last)}, before the first run: the {n} claims as "
            "judged here (`registration.json`)."
        )
    elif "effects_set" in last:  # a page published before registrations: what is known, from git
        set_ = ([f"margin set {last['margins_set']}"] if last.get("margins_set") else []) + [
            f"smallest effects set {last['effects_set']}"
        ]
        line = (
            f"Registration: {'; '.join(set_)}. {last.get('note', '')} The {n} "
            f"claims as judged here were registered at {_when(last)}, after all "
            f"{last.get('runs_trained', runs)} runs (`registration.json`)."
        )
    else:
        before = trained_before(last, started)
        named = (
            (
                f" ({', '.join(before)}, by their provenance records; in a shared store, runs that "
                "another suite or an earlier sitting trained)"
            )
            if before
            else ""
        )
        line = (
            f"Registered at {_when(last)}, after {last.get('runs_trained')} of the plan's runs had "
            f"trained{named}: the {n} claims as judged here (`registration.json`)."
        )
        if committed_before_runs(last, gathered):
            line += (
                " They are the claims of the built-in suite file at that commit, the code every "
                "run recorded (without local changes): committed before any of its runs trained."
            )
    if earlier:
        line += (
            " Earlier registrations, kept in registration.json: "
            + "; ".join(
                f"{_when(e)}, "
                + (
                    "before the first run"
                    if e.get("before_first_run")
                    else f"after {e.get('runs_trained')} runs"
                )
                for e in earlier
            )
            + "."
        )
    return [" ".join(line.split())]


def margins_when(record: dict | None) -> str:
    """When the page's margins were fixed, for the line that lists them."""
    last = record["registrations"][-1] if record and record.get("registrations") else None
    if last is None:
        return "not registered"
    if last.get("before_first_run"):
        return REGISTERED_BEFORE
    if "effects_set" in last:
        return f"set {last.get('margins_set') or 'before registrations'}"
    return f"registered after {last.get('runs_trained')} runs had trained"

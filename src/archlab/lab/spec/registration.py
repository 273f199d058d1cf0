"""A plan's registration: its claims exactly as they will be judged, recorded before its
first run trains.

`registration.json`, in the suite's folder, in the store (`STORE/registrations/SUITE-BUDGET.json`,
so a new folder planned on the same store finds it) and beside each published page, keeps every
registration of the plan, oldest first:

    {"format": 1, "registrations": [{
      "registered_at": "2026-12-06T10:00:00+00:00", "commit": "94d249a...", "dirty": false,
      "suite": "ffn", "budget": "small", "seeds": 3, "suite_file": "ffn.yaml",
      "suite_sha256": "...",
      "runs_trained": 0, "before_first_run": true, "note": "",
      "claims": [{"text": "SwiGLU beats a ReLU MLP", "metric": "val_loss", "arms": "swiglu vs relu",
                  "expect": "better", "margin": null, "smallest_effect": 0.03, "min_effect": 0.0,
                  "better": "lower", "role": "primary", "tests": "glu-beats-mlp", ...}]}]}

A claim is registered as the verdict will read it: the suite at its budget (`spec.suite.at_budget`:
each unstated margin and smallest effect filled in), every field of the claim, its good direction
resolved, and its standing (`role`: primary or secondary) and the lecture claim it tests (`tests`)
where the suite states them. A plan whose claims differ from its last registration gets a new
one, appended: both are kept, and the new one says how many of the plan's runs had trained
(`runs_trained`, `before_first_run`). `differences` is what the verifier reports: each judged claim
that is not the one registered, field by field.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
from pathlib import Path

from archlab.lab.spec.suite import Claim, Suite
from archlab.train.provenance import source_state

REGISTRATION = "registration.json"
STORE_FOLDER = "registrations"  # in the store: one file per suite and budget
FORMAT = 1


def claim_entry(claim: Claim) -> dict:
    """A claim as it will be judged: every field, the two sides, the direction that is
    good for `arm`."""
    return {
        **dataclasses.asdict(claim),
        "arms": f"{claim.arm} vs {claim.versus}",
        "better": claim.better,
    }


def claims_of(suite: Suite) -> list[dict]:
    """The registered form of a suite's claims (`suite` already at its budget)."""
    return [claim_entry(c) for c in suite.claims]


def suite_sha256(path: Path | None) -> str | None:
    return (
        hashlib.sha256(path.read_bytes()).hexdigest()
        if path is not None and path.is_file()
        else None
    )


def entry(suite: Suite, budget: str, seeds: int, runs_trained: int, note: str = "") -> dict:
    """One registration of `suite` (at `budget`), made now at this code's commit; `runs_trained`:
    the plan's runs that had trained (wholly or partly) when it was made."""
    path = Path(suite.path) if suite.path else None
    return {
        "registered_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        **source_state(),
        "suite": suite.name,
        "budget": budget,
        "seeds": seeds,
        "suite_file": path.name if path else None,
        "suite_sha256": suite_sha256(path),
        "runs_trained": runs_trained,
        "before_first_run": runs_trained == 0,
        "note": note,
        "claims": claims_of(suite),
    }


def read(path: Path) -> dict | None:
    """A registration file, or None where there is none."""
    if not path.is_file():
        return None
    record = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(record, dict) or not isinstance(record.get("registrations"), list):
        raise ValueError(f"{path} is not a registration record: it has no 'registrations' list")
    return record


def latest(record: dict | None) -> dict | None:
    return record["registrations"][-1] if record and record["registrations"] else None


def differences(registered: list[dict], judged: list[dict]) -> list[str]:
    """Each judged claim that is not the one registered, field by field; claims registered and not
    judged, and judged and not registered (by their text)."""
    out = []
    before = {c["text"]: c for c in registered}
    now = {c["text"]: c for c in judged}
    for text, claim in now.items():
        old = before.get(text)
        if old is None:
            out.append(f"{text!r}: judged but not registered")
            continue
        for key in sorted(set(old) | set(claim)):
            if old.get(key) != claim.get(key):
                out.append(
                    f"{text!r}: {key} {old.get(key)!r} registered, {claim.get(key)!r} judged"
                )
    out += [f"{text!r}: registered but not judged" for text in before if text not in now]
    return out


def register(
    suite: Suite, budget: str, seeds: int, runs_trained: int, folders: list[Path]
) -> tuple[dict, bool]:
    """The plan's registration, written into every path of `folders` (registration.json files):
    a new one when its claims differ from the last one found in any of them (or there is none),
    appended beside the earlier ones; returns the registration in force and whether it is new."""
    found = [r for path in folders if (r := read(path)) is not None]
    record = (
        max(found, key=lambda r: len(r["registrations"]))
        if found
        else {"format": FORMAT, "registrations": []}
    )
    last = latest(record)
    if last is not None and not differences(last["claims"], claims_of(suite)):
        now, new = last, False
    else:
        now, new = entry(suite, budget, seeds, runs_trained), True
        record["registrations"].append(now)
    text = json.dumps(record, indent=1)
    for path in folders:
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    return now, new


def store_path(store: Path, suite: str, budget: str) -> Path:
    return Path(store) / STORE_FOLDER / f"{suite}-{budget}.json"

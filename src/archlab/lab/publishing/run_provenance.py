"""A page's provenance from its runs' own records (RUN/provenance.json, archlab.train.provenance):
gathered, never reconstructed, and the lines the page shows.

`gather` reads each run's record and groups the runs by what trained them: the code (commit and
local changes), the versions (archlab, torch, Python), the machine (CPU model and class, threads),
the data (the prepared folder's name and sha256) and the execution (mode, device, dtype, world
size). A run resumed with another value is listed under each, its steps named ("ffn/relu/seed0
steps 150-"), and its resumes with what changed are listed apart. The result goes into the page's
provenance.json under `runs`; `lines` renders it, and says plainly where the runs recorded nothing
("provenance not recorded by the runs"): pages made before runs recorded their provenance.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from archlab.train.provenance import read_record

RUNS = "runs"  # the key of a page's provenance.json that holds `gather`'s result
NOT_RECORDED = "provenance not recorded by the runs"
# section -> the fields a group is keyed by, in the order the page shows them
GROUPS = {
    "code": ("commit", "dirty"),
    "versions": ("archlab", "torch", "python"),
    "machine": ("cpu_model", "cpu_class", "threads"),
    "data": ("folder", "sha256"),
    "execution": ("mode", "device", "dtype", "world_size"),
}


def _value(session: dict, section: str) -> dict:
    found = session.get(section, {})
    value = {key: found.get(key) for key in GROUPS[section]}
    if section == "data" and value["folder"]:
        # where it lay on that machine is not what it was
        value["folder"] = Path(str(value["folder"])).name
    return value


def _named(label: str, sessions: list[dict], section: str) -> list[tuple[str, dict]]:
    """A run's value of `section` under its label; where a resume changed it, each session's value
    under the run's label and that session's steps."""
    values = [_value(s, section) for s in sessions]
    if all(v == values[0] for v in values):
        return [(label, values[0])]
    ends = [s.get("from_step") for s in sessions[1:]] + [""]
    return [
        (f"{label} steps {s.get('from_step')}-{end}", v)
        for s, end, v in zip(sessions, ends, values)
    ]


def gather(runs: list[tuple[str, Path]]) -> dict:
    """The records of `runs` (label, run folder), grouped (module doc)."""
    out: dict = {
        "recorded": [],
        "unrecorded": [],
        "resumed": [],
        "started": {},
        **{section: [] for section in GROUPS},
    }
    for label, run_dir in runs:
        record = read_record(run_dir)
        sessions = record["sessions"] if record else []
        if not sessions:
            out["unrecorded"].append(label)
            continue
        out["recorded"].append(label)
        # its first session: set against the registration
        out["started"][label] = sessions[0].get("started_at")
        out["resumed"] += [
            f"{label} at step {s.get('from_step')}: "
            + ("; ".join(s.get("changed") or []) or "nothing changed")
            for s in sessions[1:]
        ]
        for section in GROUPS:
            for name, value in _named(label, sessions, section):
                group = next((g for g in out[section] if g["value"] == value), None)
                if group is None:
                    out[section].append(group := {"value": value, "runs": []})
                group["runs"].append(name)
    return out


def _runs(names: list[str], every: list[str]) -> str:
    """The runs of a group: "all N runs" where they are every run, whole, else each by name."""
    return f"all {len(every)} runs" if names == every and len(every) > 1 else ", ".join(names)


def _code(value: dict) -> str:
    dirty = value.get("dirty")
    return f"{value.get('commit')}" + (
        " (with local changes)"
        if dirty is True
        else " (local changes unknown)"
        if dirty not in (True, False)
        else ""
    )


def lines(runs: dict | None, reconstructed: str = "") -> list[str]:
    """The page's lines on what trained its runs, from `gather`'s result (None: the page predates
    run records); `reconstructed`: what a page made before the records says of its training,
    shown as such."""
    note = f" Reconstructed afterwards, not a record: {reconstructed}." if reconstructed else ""
    if not runs or not runs.get("recorded"):
        return [f"Trained by: {NOT_RECORDED}.{note}"]
    missing = (
        f" The other {len(runs['unrecorded'])} "
        f"runs: {NOT_RECORDED} ({', '.join(runs['unrecorded'])})."
        if runs["unrecorded"]
        else ""
    )
    out = [_trained_by(runs) + missing + (note if runs["unrecorded"] else "")]
    out += [_grouped(runs, title, section, show) for title, section, show in _RECORDED]
    if runs["resumed"]:
        out.append("Resumed runs: " + "; ".join(runs["resumed"]) + ".")
    return out


def _trained_by(runs: dict) -> str:
    """'Trained by archlab at commit C: ...', or each commit with its runs where there are more."""
    every, code = runs["recorded"] + runs["unrecorded"], runs["code"]
    if len(code) == 1:
        return (
            f"Trained by archlab at commit {_code(code[0]['value'])}: "
            f"{_runs(code[0]['runs'], every)} (recorded by the runs)."
        )
    return (
        f"Trained at {len(code)} commits (recorded by the runs): "
        + "; ".join(f"{_code(g['value'])}: {_runs(g['runs'], every)}" for g in code)
        + "."
    )


def _grouped(runs: dict, title: str, section: str, show: Callable[[dict], str]) -> str:
    """One recorded section's line: its one value (and which runs), or each value with its runs."""
    groups = runs[section]
    if len(groups) == 1:
        return (
            f"{title}: {show(groups[0]['value'])} ({_runs(groups[0]['runs'], runs['recorded'])})."
        )
    return (
        f"{title}: "
        + "; ".join(f"{show(g['value'])} ({_runs(g['runs'], [])})" for g in groups)
        + "."
    )


def _software(v: dict) -> str:
    return f"archlab {v['archlab']}, torch {v['torch']}, Python {v['python']}"


def _machine(v: dict) -> str:
    threads = f"{v['threads']} thread{'s' if v['threads'] != 1 else ''}"
    return f"{v['cpu_model']} ({v['cpu_class']}), {threads}"


def _data(v: dict) -> str:
    return f"{v['folder']} {str(v['sha256'])[:16]}"


def _execution(v: dict) -> str:
    processes = f", {v['world_size']} processes" if v["world_size"] != 1 else ""
    return f"{v['mode']} on {v['device']}, {v['dtype']}{processes}"


# each line after the commit's: its title, the section of `gather`'s result, how a value reads
_RECORDED = (
    ("Runs' software", "versions", _software),
    ("Runs' CPU", "machine", _machine),
    ("Runs' data (sha256 of the prepared folder each run read)", "data", _data),
    ("Runs' execution", "execution", _execution),
)


def reconstructed(p: dict) -> str:
    """What a page made before the runs recorded their provenance says of its training: the commit
    the `archlab ablate` session that trained them recorded (its own, not each run's), or its note;
    "" for a page whose runs recorded theirs."""
    if RUNS in p:
        return ""
    trained = p.get("trained_by") or {}
    parts = []
    if trained.get("commit"):
        parts.append(
            f"the `archlab ablate` session recorded its own commit, {trained['commit']}"
            + (" (with local changes)" if trained.get("dirty") is True else "")
            + (
                f", torch {trained['torch']}, Python {trained.get('python')}"
                if trained.get("torch")
                else ""
            )
        )
    if p.get("trained_note"):
        parts.append(p["trained_note"])
    return "; ".join(parts)

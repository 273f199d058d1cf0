"""The suite's training wall time over its sittings: SUITE_FOLDER/lab-time.json.

Each sitting of `archlab ablate` that trains adds one entry, with the machine it trained on:

    {"train_wall_s": 5622.0, "jobs": 2, "machine": "<the last sitting's>",
     "sittings": [{"wall_s": 3400.1, "jobs": 2, "machine": "AMD EPYC, ...", "ended_at": "..."},
                  {"wall_s": 2221.9, "jobs": 2, "machine": "Intel(R) Xeon(R) ...", ...}]}

`train_wall_s` is their sum. A record written before sittings were kept (no "sittings") reads as one
sitting of its total, its end unknown. The file travels with a suite's run records
(lab/runs/records.py), so a suite continued on a fresh machine counts the sittings before it.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path

from archlab.train.hardware import describe_machine

SUITE_TIME = "lab-time.json"  # in the suite's folder, and beside its run records


def sittings(record: dict) -> list[dict]:
    """The sittings of a lab-time record, oldest first (a record without them: one sitting)."""
    if "sittings" in record:
        return list(record["sittings"])
    if record.get("train_wall_s"):
        return [
            {
                "wall_s": record["train_wall_s"],
                "jobs": record.get("jobs", 1),
                "machine": record.get("machine"),
                "ended_at": None,
            }
        ]
    return []


def read_suite_time(folder: Path) -> dict:
    """FOLDER's lab-time record ({} where there is none)."""
    path = folder / SUITE_TIME
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def record_suite_time(folder: Path, wall_s: float, jobs: int, machine: str | None = None) -> float:
    """Add one sitting's training wall time (on `machine`, this one by default) to FOLDER's record;
    returns the total over all sittings."""
    done = sittings(read_suite_time(folder)) + [
        {
            "wall_s": round(wall_s, 1),
            "jobs": jobs,
            "machine": machine or describe_machine(),
            "ended_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        }
    ]
    record = {
        "train_wall_s": round(sum(s["wall_s"] for s in done), 1),
        "jobs": jobs,
        "machine": done[-1]["machine"],
        "sittings": done,
    }
    (folder / SUITE_TIME).write_text(json.dumps(record, indent=1), encoding="utf-8")
    return record["train_wall_s"]


def by_machine(record: dict) -> list[dict]:
    """The sittings' wall time per machine, in the order each first trained:
    [{"machine", "wall_s", "sittings"}]."""
    out: dict[str | None, dict] = {}
    for s in sittings(record):
        entry = out.setdefault(
            s["machine"], {"machine": s["machine"], "wall_s": 0.0, "sittings": 0}
        )
        entry["wall_s"] = round(entry["wall_s"] + s["wall_s"], 1)
        entry["sittings"] += 1
    return list(out.values())

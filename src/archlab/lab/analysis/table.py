"""A suite's measured values, the one input of its verdicts: from a finished plan, or read back from
the files a published page keeps (results.csv, items.csv, timings.csv), so that `archlab ablate
--verify` recomputes every verdict of a page without its run folders.

- results.csv: one row per run: arm, seed, run (the store's folder name, a hash of the run's
  resolved config), config (a hash of the resolved config written in configs.yaml), parameters, then
  one column per measure (an empty cell: n/a for that run).
- items.csv: per-item outcomes of the measures scored on a fixed item set (the vocab suite's
  continuation cuts, the long-context accuracy windows): arm, seed, run, metric, item, value;
  every run of a suite scores the same items in the same order, so an item's index pairs it across
  arms and seeds.
- timings.csv: one row per interleaved timing pair: timing, pair, arm_a, arm_b, seconds_a,
  seconds_b, and the machine's 1-minute load after the pair with the timing's CPUs, usable cores and
  threads, and the CPUs other processes kept busy during the pair (other_cpus, a column only where
  the timing recorded it) (lab/measures/timing_load.py; empty in a page timed before they were
  recorded).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from archlab.lab.spec.suite import Suite

RESULTS, ITEMS, TIMINGS = "results.csv", "items.csv", "timings.csv"
# timings.csv: the machine during each pair
LOAD_COLUMNS = ("load_1min", "cpus", "cores", "threads")
OTHERS = "other_cpus"  # the CPUs other processes kept busy during the pair
# the columns of results.csv before the measures
FIXED = ("arm", "seed", "run", "config", "parameters")


@dataclass(frozen=True)
class Run:
    """One run's measured values."""

    arm: str
    seed: int
    run_id: str
    values: dict[str, float]  # measure -> value (NaN: n/a for this run)
    items: dict[str, list[float]] = field(default_factory=dict)  # measure -> per-item outcomes
    parameters: int | None = None
    config: str = ""  # hash of the resolved config (configs.yaml)


@dataclass
class Table:
    """Every run of a suite by arm (seed order), and its timings: what the verdicts
    are computed from."""

    suite: Suite
    seeds: int  # the design's seeds per arm (an arm may hold more: --sequential's later looks)
    runs: dict[str, list[Run]]
    # metric -> {"arms", "a", "b", ...} (lab/measures/timing.py)
    timings: dict[str, dict] = field(default_factory=dict)

    def values(self, arm: str, metric: str, n: int | None = None) -> list[float]:
        """An arm's values on `metric`, one per seed in seed order (the first `n`)."""
        return [r.values.get(metric, math.nan) for r in self.runs.get(arm, [])][:n]

    def items(self, arm: str, metric: str, n: int | None = None) -> list[list[float]] | None:
        """An arm's per-item outcomes on `metric`, seeds x items, or None unless every
        run has them."""
        rows = [r.items.get(metric) for r in self.runs.get(arm, [])][:n]
        return rows if rows and all(row is not None for row in rows) else None  # type: ignore[return-value]

    def diverged(self, arms: Iterable[str]) -> bool:
        return any(r.values.get("diverged", 0.0) == 1.0 for a in arms for r in self.runs.get(a, []))

    def run_ids(self, arm: str) -> list[str]:
        return [r.run_id for r in self.runs.get(arm, [])]

    # ------------------------------------------------------------------------------------- files
    def write(self, folder: Path, measures: list[str]) -> None:
        """results.csv, items.csv (when any measure has items) and timings.csv (when
        timed) in `folder`."""
        folder.mkdir(parents=True, exist_ok=True)
        rows = [r for arm in self.runs.values() for r in arm]
        # a factorial suite's levels, for readers (not read back)
        factors = list(self.suite.factors)
        with (folder / RESULTS).open("w", newline="", encoding="utf-8") as f:
            out = csv.writer(f)
            out.writerow([*FIXED, *factors, *measures])
            for r in rows:
                levels = self.suite.arm(r.arm).levels if factors else {}
                out.writerow(
                    [
                        r.arm,
                        r.seed,
                        r.run_id,
                        r.config,
                        "" if r.parameters is None else r.parameters,
                        *(levels.get(f, "") for f in factors),
                        *(_cell(r.values.get(m)) for m in measures),
                    ]
                )
        itemized = [(r, m) for r in rows for m in measures if m in r.items]
        (folder / ITEMS).unlink(missing_ok=True)
        if itemized:
            with (folder / ITEMS).open("w", newline="", encoding="utf-8") as f:
                out = csv.writer(f)
                out.writerow(["arm", "seed", "run", "metric", "item", "value"])
                for r, m in itemized:
                    out.writerows(
                        [r.arm, r.seed, r.run_id, m, i, repr(float(v))]
                        for i, v in enumerate(r.items[m])
                    )
        (folder / TIMINGS).unlink(missing_ok=True)
        if self.timings:
            self._write_timings(folder / TIMINGS)

    def _write_timings(self, path: Path) -> None:
        """timings.csv: one row per pair of every timing."""
        # other work's CPUs only where a timing recorded them (older pages' files unchanged)
        others = [OTHERS] if any(r.get("others") for r in self.timings.values()) else []
        with path.open("w", newline="", encoding="utf-8") as f:
            out = csv.writer(f)
            out.writerow(
                [
                    "timing",
                    "pair",
                    "arm_a",
                    "arm_b",
                    "seconds_a",
                    "seconds_b",
                    *LOAD_COLUMNS,
                    *others,
                ]
            )
            for metric, record in self.timings.items():
                arm_a, arm_b = record["arms"]
                n = len(record["a"])
                load = record.get("load") or [None] * n
                busy = (record.get("others") or [None] * n) if others else [None] * n
                machine = [_count(record.get(k)) for k in LOAD_COLUMNS[1:]]
                out.writerows(
                    [metric, i, arm_a, arm_b, repr(a), repr(b), _cell(x), *machine]
                    + ([_cell(o)] if others else [])
                    for i, (a, b, x, o) in enumerate(
                        zip(record["a"], record["b"], load, busy, strict=True)
                    )
                )

    @classmethod
    def read(cls, folder: Path, suite: Suite, seeds: int | None = None) -> Table:
        """The table a page's files hold (module doc); `seeds`: the design's (default: the fewest
        any arm ran)."""
        with (folder / RESULTS).open(encoding="utf-8", newline="") as f:
            rows = list(csv.DictReader(f))
        if not rows:
            raise ValueError(f"{folder / RESULTS} has no runs")
        items: dict[tuple[str, str], dict[str, list[float]]] = {}
        if (folder / ITEMS).is_file():
            with (folder / ITEMS).open(encoding="utf-8", newline="") as f:
                for row in csv.DictReader(f):
                    items.setdefault((row["run"], row["arm"]), {}).setdefault(
                        row["metric"], []
                    ).append(float(row["value"]))
        runs: dict[str, list[Run]] = {a.name: [] for a in suite.arms}
        for row in sorted(rows, key=lambda r: int(r["seed"])):
            values = {
                k: float(v) if v not in ("", None) else math.nan
                for k, v in row.items()
                if k not in FIXED and k not in suite.factors
            }
            parameters = int(row["parameters"]) if row.get("parameters") else None
            runs.setdefault(row["arm"], []).append(
                Run(
                    row["arm"],
                    int(row["seed"]),
                    row["run"],
                    values,
                    items.get((row["run"], row["arm"]), {}),
                    parameters,
                    row.get("config") or "",
                )
            )
        timings: dict[str, dict] = {}
        if (folder / TIMINGS).is_file():
            with (folder / TIMINGS).open(encoding="utf-8", newline="") as f:
                for row in csv.DictReader(f):
                    record = timings.setdefault(
                        row["timing"], {"arms": [row["arm_a"], row["arm_b"]], "a": [], "b": []}
                    )
                    record["a"].append(float(row["seconds_a"]))
                    record["b"].append(float(row["seconds_b"]))
                    if row.get("load_1min"):
                        record.setdefault("load", []).append(float(row["load_1min"]))
                        record.update({k: int(row[k]) for k in LOAD_COLUMNS[1:] if row.get(k)})
                    if OTHERS in row:  # a pair where /proc/stat could not be read: NaN
                        value = float(row[OTHERS]) if row[OTHERS] else math.nan
                        record.setdefault("others", []).append(value)
        present = [len(v) for v in runs.values() if v]
        return cls(suite, seeds or min(present), runs, timings)


def _count(value: int | None) -> str:
    return "" if value is None else str(int(value))


def _cell(value: float | None) -> str:
    return (
        ""
        if value is None or (isinstance(value, float) and math.isnan(value))
        else repr(float(value))
    )

"""A screening suite's switches at the modern base: each switch's simple effect,
from published runs.

A screening main effect (lab/analysis/screening.py) averages a switch over the other switches'
levels, half of them at their -1 level; the lecture's claims are about the switch in the modern
model.
The simple effect at the base is the row with every factor at its +1 level against the same row
with one factor at its -1 level. A regular fraction holds no such one-switch row (every factor sits
in a word of the defining relation), so its runs come from another design: a one-switch-at-a-time
suite over the same levels. `simple_effects` finds them among the published pages by their configs,
never by names:
- the base: an arm whose config (configs.yaml's hash) is the screening's all-+1 row's;
- the switch of factor f: an arm of the same page whose config differs from that base exactly in
  the keys f's -1 level decides (`level_keys`: read from the screening's own rows), to their values
  there, and in d_ff (both suites match d_ff to the base's parameters).
The estimate is the paired difference over that page's seeds, base minus switched ("+1 minus -1",
the sign of the screening's effects), its SE the pair's own sd / sqrt(n) and its interval +-
t_{0.95, n-1} SE. It is a description beside the main effect, not a claim: the other page judges it,
and the tallies count it there.
"""

from __future__ import annotations

import csv
import math
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import yaml
from scipy import special

from archlab.lab.publishing.record import CONFIGS, Record, read_record

if TYPE_CHECKING:
    from archlab.lab.analysis.screening import Fit
from archlab.overrides import flatten

D_FF = "model.d_ff"


@dataclass(frozen=True)
class SimpleEffect:
    """One factor's switch at the base, from a published page's paired runs."""

    factor: str
    page: str  # the page whose runs give it
    arms: tuple[str, str]  # (the base's arm, the switched arm) on that page
    estimate: float  # mean over seeds of base - switched
    se: float
    n: int  # paired seeds
    ci: tuple[float, float]  # 90%


def _flat(config: dict) -> dict[str, object]:
    """A configs.yaml entry as dotted keys, the way overrides name
    them ("model.d_ff", "optimizer.lr")."""
    out = {f"model.{k}": v for k, v in flatten(config.get("model") or {}).items()}
    out.update(flatten(config.get("train") or {}))
    return out


def level_keys(record: Record) -> dict[str, dict[str, object]]:
    """factor -> the config keys its -1 level decides, with their values there: read from the
    screening's own configs, the keys on which every row at -1 agrees, every row at +1 agrees, and
    the two differ (so the keys a level derives, model.final_norm from the norm's position, count
    too; d_ff, matched per row, never)."""
    flat = {arm: _flat(c) for arm, c in record.configs.items()}
    out = {}
    for factor, names in record.suite.factors.items():
        sides = [
            [
                flat[a.name]
                for a in record.suite.arms
                if a.levels.get(factor) == level and a.name in flat
            ]
            for level in names
        ]
        if not all(sides):
            continue
        keys = {}
        for key in set().union(*sides[0], *sides[1]) - {D_FF}:
            low, high = ({repr(c.get(key)) for c in side} for side in sides)
            if len(low) == 1 and len(high) == 1 and low != high:
                keys[key] = sides[0][0].get(key)
        out[factor] = keys
    return out


def _switch_arm(configs: dict[str, dict], base: str, keys: dict[str, object]) -> str | None:
    """The arm whose config is `base`'s with exactly `keys` set (and d_ff matched), or None."""
    reference = _flat(configs[base])
    for arm, config in configs.items():
        flat = _flat(config)
        differ = {k for k in set(flat) | set(reference) if flat.get(k) != reference.get(k)}
        if (
            arm != base
            and differ
            and differ <= set(keys) | {D_FF}
            and all(flat.get(k) == v for k, v in keys.items())
        ):
            return arm
    return None


def _paired(
    record: Record, base: str, switched: str, metric: str
) -> tuple[float, float, int] | None:
    """(mean of base - switched over the seeds both ran, its SE, n), or None with fewer
    than 2 pairs."""
    a, b = record.table.values(base, metric), record.table.values(switched, metric)
    d = [x - y for x, y in zip(a, b) if math.isfinite(x) and math.isfinite(y)]
    if len(d) < 2:
        return None
    return statistics.fmean(d), statistics.stdev(d) / math.sqrt(len(d)), len(d)


def base_row(record: Record) -> str | None:
    """The screening's row with every factor at its +1 (second) level, or None when its
    design has none."""
    s = record.suite
    return next(
        (
            a.name
            for a in s.arms
            if all(a.levels.get(f) == names[1] for f, names in s.factors.items())
        ),
        None,
    )


def simple_effects(docs: Path, record: Record, metric: str) -> dict[str, SimpleEffect]:
    """Each factor's simple effect at the screening's base row, from the published pages (module
    doc): the pairs with the most seeds, and among those the page that gives the most of the
    switches; a factor no page has the runs for is left out."""
    base = base_row(record)
    if base is None or base not in record.configs:
        return {}
    target = record.configs[base].get("config")
    levels = level_keys(record)
    candidates: list[SimpleEffect] = []
    for folder in sorted(p.parent for p in docs.glob(f"*/{CONFIGS}")):
        if folder.resolve() == record.folder.resolve():
            continue
        configs = yaml.safe_load((folder / CONFIGS).read_text(encoding="utf-8")) or {}
        other = None
        for page_base in [arm for arm, c in configs.items() if c.get("config") == target]:
            for factor in record.suite.factors:
                arm = (
                    _switch_arm(configs, page_base, levels[factor]) if levels.get(factor) else None
                )
                if arm is None:
                    continue
                other = other or read_record(folder)
                if (paired := _paired(other, page_base, arm, metric)) is None:
                    continue
                estimate, se, n = paired
                half = float(special.stdtrit(n - 1, 0.95)) * se
                candidates.append(
                    SimpleEffect(
                        factor,
                        folder.name,
                        (page_base, arm),
                        estimate,
                        se,
                        n,
                        (estimate - half, estimate + half),
                    )
                )
    gives = {page: sum(c.page == page for c in candidates) for page in {c.page for c in candidates}}
    found: dict[str, SimpleEffect] = {}
    for c in sorted(candidates, key=lambda c: (-c.n, -gives[c.page], c.page)):
        found.setdefault(c.factor, c)
    return {f: found[f] for f in record.suite.factors if f in found}


def shared_runs(docs: Path, record: Record, arm: str) -> list[tuple[str, str]]:
    """(page, arm) of every other published arm whose run ids include `arm`'s: the same
    run folders, reused."""
    ids = {r.run_id for r in record.table.runs.get(arm, [])}
    out = []
    for folder in sorted(p.parent for p in docs.glob("*/results.csv")):
        if folder.resolve() == record.folder.resolve() or not ids:
            continue
        with (folder / "results.csv").open(encoding="utf-8") as f:
            arms = {row["arm"] for row in csv.DictReader(f) if row.get("run") in ids}
        out += [(folder.name, a) for a in sorted(arms)]
    return out


def _switch_row(factor: str, names: list[str], fitted: Fit, at: SimpleEffect | None) -> str:
    """One switch's row: its main effect here beside its simple effect at the modern base (or
    what would publish it)."""
    from archlab.lab.publishing.tables import fmt

    e = fitted.effect(factor)
    t = float(special.stdtrit(e.df, 0.95))
    main = f"{fmt(e.estimate)} [{fmt(e.estimate - t * e.se)}, {fmt(e.estimate + t * e.se)}]"
    if at is None:
        return (
            f"| {factor}: {names[1]} vs {names[0]} | {main} | not published | - | - | needs "
            f"the base with {factor} = {names[0]} (a one-switch suite over these levels; "
            "`--plan` prices it) |"
        )
    return (
        f"| {factor}: {names[1]} vs {names[0]} | {main} | {fmt(at.estimate)} [{fmt(at.ci[0])}, "
        f"{fmt(at.ci[1])}] | {fmt(at.se)} | {at.n} | [{at.page}]({at.page}.md): {at.arms[0]} "
        f"vs {at.arms[1]} |"
    )


def _base_runs_line(docs: Path, record: Record, base: str, found: dict[str, SimpleEffect]) -> str:
    """Which run folders the base row is, the pages that share them, and the switches' base
    runs."""
    ids = ", ".join(r.run_id for r in record.table.runs.get(base, []))
    shared = shared_runs(docs, record, base)
    where = (
        ("; the same run folders as " + ", ".join(f"{page}'s `{arm}`" for page, arm in shared))
        if shared
        else ""
    )
    pages = sorted({(at.page, at.arms[0]) for at in found.values()})
    return (
        f"The base row `{base}` here is runs {ids}{where}"
        + (
            "; the switches' base runs are "
            + ", ".join(f"{page}'s `{arm}`" for page, arm in pages)
            + ", runs of the same config ("
            + str(record.configs[base].get("config"))
            + ")"
            if pages
            else ""
        )
        + "."
    )


def section(docs: Path, record: Record, metric: str) -> str:
    """The screening page's "each switch at the modern base" section (markdown), or ""
    for other suites."""
    from archlab.lab.analysis.screening import fit

    s = record.suite
    base = base_row(record)
    if not s.screening or base is None or (fitted := fit(record.table, metric)) is None:
        return ""
    found = simple_effects(docs, record, metric)
    lines = [
        "",
        "## Each switch at the modern base (from published runs)",
        "",
        "A main effect here averages a switch over the other switches' levels, half of them "
        "at their -1 level. The lecture's claims are about a switch in the modern model: its "
        "simple effect at the base row (every factor at its +1 level), against the base with "
        "that one switch at -1, a row this fraction does not hold. Published runs of the same "
        "configs give it (matched by config: "
        "the base row's, and the base's with one factor at its -1 level and d_ff matched; "
        "archlab.lab.publishing.simple_effects), paired over their seeds, base minus switched, "
        "beside the main effect. These describe; their own page judges them as claims.",
        "",
        f"| switch (+1 vs -1) | main effect here on {metric} [90% interval] | at the modern base "
        "[90% CI] | SE | seeds | runs |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        _switch_row(factor, names, fitted, found.get(factor)) for factor, names in s.factors.items()
    ]
    lines += ["", _base_runs_line(docs, record, base, found)]
    return "\n".join(lines) + "\n"

"""Reading a suite file: a built-in suite by name or a YAML file by path, checked for shape (arms
are resolved later, by lab/spec/arms.py), into a `Suite` (lab/spec/suite.py).

    # the suite's name (the file name without .yaml for built-ins)
    name: norm-type
    title: LayerNorm vs RMSNorm
    # where the claims come from
    source: the CS336 lecture notes ...
    # why this design can show its claims (printed on the page)
    design: the norms are built alike ...
    # Narang et al. 2021's finding on the same switch, one line (optional)
    narang: RMSNorm improved ...
    # train keys and model.* keys, dotted or nested (archlab.overrides)
    base: {preset: llama, model.norm: rmsnorm}
    # keys over the base at one budget only (a longer run where it must be)
    budget_keys: {small: {steps: 2000}}
    # seeds per arm when not the budget's
    seeds: 2
    # d_ff: arms off the base by > 2% get d_ff adjusted; none: only flagged
    match_params: d_ff
    # arms that differ in size on purpose (flagged, never adjusted)
    unmatched: [wide]
    # keep this many evenly spaced checkpoints (default: the final one)
    checkpoints: 8
    # the first arm is the base
    arms: {rmsnorm: {}, layernorm: {model.norm: layernorm}}
    # instead of arms: every combination is an arm
    factors: {norm: {pre: {}, post: {...}}, lr: {...}}
    # with 2-level factors: a screening design's runs
    design: {kind: fractional, resolution: IV, text: ...}
    # arms whose seed-to-seed spread differs: shown apart on the page
    regimes: {high-lr: [a, b]}
    # arms built alike (shared init): their claims may pool one residual
    alike: [[rmsnorm, layernorm]]
    # a sweep in ascending order: a claim may name it (its best arm)
    grids: {adamw: [adamw-1e-3, adamw-3e-3]}
    # lecture (default) | calibration (the lab's own yardstick, not tallied)
    purpose: lecture
    # margins and smallest effects per metric (metric units)
    margins: {val_loss: 0.02}
    # archlab.lab.measures.measure.MEASURES
    measure: [val_loss]
    # speed claims on fresh models, interleaved A/B pairs (lab/measures/timing.py)
    timings:
      - {metric: step_ms, kind: train_step, arms: [rmsnorm, layernorm], pairs: 24, options: {},
         keys: {}}
    claims:
      - {text: ..., metric: val_loss, arm: rmsnorm, versus: layernorm, expect: same, margin: 0.02}
      - {text: ..., metric: val_loss, factor: lr, arm: high, versus: normal, within: {norm: post}}
      # grids: each at its best rate
      - {text: ..., metric: val_loss, arm: lion, versus: adamw, expect: same}

docs/lab.md ("Writing a suite", "Screening suites") states every key.
"""

from __future__ import annotations

import itertools
from importlib import resources
from pathlib import Path

from archlab.lab.spec.budgets import BUDGETS
from archlab.lab.spec.suite import (
    MATCH_MODES,
    PURPOSES,
    Arm,
    Suite,
    SuiteError,
    Timing,
    is_positive,
    require,
    require_fields,
    screening_design,
)
from archlab.lab.spec.suite_claims import margin_of, read_claim
from archlab.nn.config import ConfigError
from archlab.overrides import flatten
from archlab.yaml_file import DuplicateKey, read_yaml

# MEASURES (lab/measures/measure.py), TIMINGS (lab/measures/timing.py) and the designs
# (lab/spec/design.py) are imported where a suite's measures, timings and design are checked, so
# `archlab ablate --list` (suite_index) reads the files without torch


# ------------------------------------------------------------------------------------------ reading
def suites_dir() -> Path:
    return Path(str(resources.files("archlab.lab") / "suites"))


def list_suites() -> list[Suite]:
    """Every built-in suite, by name."""
    return [load_suite(p) for p in sorted(suites_dir().glob("*.yaml"))]


def suite_index() -> list[tuple[str, int, str]]:
    """(name, number of arms, title) of every built-in suite, read without checking its measures and
    timings against their registries (which import torch): `archlab ablate --list`. `load_suite`
    checks them all."""
    index = []
    for path in sorted(suites_dir().glob("*.yaml")):
        tree = _read(path)  # a built-in suite with a key given twice is refused here too
        arms = _arms(tree, str(path), _screening(tree, str(path), None))[1]
        index.append((str(tree.get("name") or path.stem), len(arms), str(tree.get("title", ""))))
    return index


def _read(path: Path) -> object:
    """The suite file's tree; one line for a folder, a missing file, bad bytes, a syntax error (line
    and column) or a key given twice (an arm, a factor or a level named twice: YAML would keep the
    last of them, silently)."""
    try:
        return read_yaml(path, "suite file")
    except DuplicateKey as err:
        first, second = err.lines
        if err.path == ("arms",):
            what = (
                f"arm {err.key!r} is named twice (lines {first} and {second}): the second would "
                "replace the first"
            )
        elif err.path == ("factors",):
            what = f"factor {err.key!r} is named twice (lines {first} and {second})"
        elif len(err.path) == 2 and err.path[0] == "factors":
            what = (
                f"factor {err.path[1]} names level {err.key!r} twice (lines {first} and {second})"
            )
        else:
            raise SuiteError(str(err)) from None
        raise SuiteError(f"{path}: {what}; give each its own name") from None
    except (ConfigError, FileNotFoundError) as err:
        raise SuiteError(str(err)) from None


SCREENING_KEYS = {"kind", "resolution", "fold_over", "fold_on", "keep", "text"}
SCREENING_KINDS = ("fractional",)
_KEYS = {
    "name",
    "title",
    "source",
    "design",
    "narang",
    "base",
    "budget_keys",
    "arms",
    "factors",
    "regimes",
    "margins",
    "timings",
    "measure",
    "claims",
    "match_params",
    "unmatched",
    "checkpoints",
    "seeds",
    "alike",
    "grids",
    "purpose",
}


def load_suite(spec: str | Path, fold_over: bool | None = None) -> Suite:
    """A built-in suite by name or a suite YAML file by path, checked for shape (arms are
    resolved later). `fold_over`: for a screening suite, append (True) the mirrored runs whatever
    its file says."""
    path = _suite_path(spec)
    where = str(path)
    tree = _read(path)
    require(isinstance(tree, dict), where, "must hold a mapping")
    require(
        not set(tree) - _KEYS,
        where,
        f"unknown keys {sorted(set(tree) - _KEYS)}; allowed: {sorted(_KEYS)}",
    )
    screening = _screening(tree, where, fold_over)
    factors, arms = _arms(tree, where, screening)
    measures = list(tree.get("measure") or ["val_loss"])
    from archlab.lab.measures.measure import MEASURES

    bad = [m for m in measures if m not in MEASURES]
    require(not bad, where, f"measure {bad} unknown; one of {', '.join(MEASURES)}")
    match = tree.get("match_params", "d_ff")
    require(match in MATCH_MODES, where, f"match_params={match!r}; one of {', '.join(MATCH_MODES)}")
    names = [a.name for a in arms]
    timings = [_timing(t, where, names) for t in tree.get("timings") or []]
    timed = {t.metric for t in timings}
    margins = {
        str(k): margin_of(v, str(k), timed, where, f"margins.{k}")
        for k, v in (tree.get("margins") or {}).items()
    }
    suite = Suite(
        name=str(tree.get("name") or path.stem),
        title=str(tree.get("title", "")),
        source=str(tree.get("source", "")),
        narang=str(tree.get("narang", "") or ""),
        base=flatten(tree.get("base") or {}),
        measures=measures,
        match_params=match,
        arms=arms,
        claims=[],
        unmatched=[str(a) for a in tree.get("unmatched") or []],
        checkpoints=tree.get("checkpoints", 1),
        path=str(path),
        design=" ".join(
            str(screening.get("text") if screening else tree.get("design", "")).split()
        ),
        factors=factors,
        regimes={str(k): [str(a) for a in v] for k, v in (tree.get("regimes") or {}).items()},
        margins=margins,
        timings=timings,
        seeds=tree.get("seeds"),
        budget_keys={str(b): flatten(k or {}) for b, k in (tree.get("budget_keys") or {}).items()},
        screening={k: v for k, v in screening.items() if k != "text"},
    )
    _check_runs(suite, where)
    _check_groups(suite, tree, where, names)
    suite.claims = [read_claim(c, where, suite) for c in tree.get("claims") or []]
    require(bool(suite.claims), where, "needs at least one claim")
    _check_arm_lists(suite, where, names)
    return suite


def _suite_path(spec: str | Path) -> Path:
    """A path as given, or a built-in suite's file by its name (one line naming the built-in
    suites when there is none by that name)."""
    path = Path(spec)
    if path.suffix:
        return path
    path = suites_dir() / f"{spec}.yaml"
    known = ", ".join(p.stem for p in sorted(suites_dir().glob("*.yaml")))
    require(
        path.is_file(),
        f"suite {spec!r}",
        f"no such suite; built-in suites: {known} (or a .yaml path)",
    )
    return path


def _check_runs(suite: Suite, where: str) -> None:
    """`seeds:`, `budget_keys:` and `checkpoints:`: what each run of the suite is."""
    require(
        suite.seeds is None or (isinstance(suite.seeds, int) and suite.seeds >= 2),
        where,
        f"seeds={suite.seeds!r}; an integer >= 2 (or absent: the budget's)",
    )
    require(
        set(suite.budget_keys) <= set(BUDGETS),
        where,
        f"budget_keys names budgets "
        f"{sorted(set(suite.budget_keys) - set(BUDGETS))}; one of {', '.join(BUDGETS)}",
    )
    require(
        isinstance(suite.checkpoints, int) and suite.checkpoints >= 1,
        where,
        f"checkpoints={suite.checkpoints!r}; an integer >= 1",
    )


def _check_arm_lists(suite: Suite, where: str, names: list[str]) -> None:
    """`unmatched:` and `regimes:` name arms that exist; an arm sits in one regime at most."""
    stray = set(suite.unmatched) - set(names)
    require(not stray, where, f"unmatched names arms that do not exist: {sorted(stray)}")
    grouped = [a for arms_ in suite.regimes.values() for a in arms_]
    require(
        set(grouped) <= set(names),
        where,
        f"regimes name arms that do not exist: {sorted(set(grouped) - set(names))}",
    )
    require(len(grouped) == len(set(grouped)), where, "an arm may sit in one regime only")


def _check_groups(suite: Suite, tree: dict, where: str, names: list[str]) -> None:
    """`alike:` (a list of arms, or of lists of arms), `grids:` and `purpose:`,
    filled into `suite`."""
    raw = tree.get("alike") or []
    groups = [raw] if raw and all(isinstance(a, str) for a in raw) else raw
    require(
        isinstance(groups, list) and all(isinstance(g, list) and len(g) >= 2 for g in groups),
        where,
        f"alike={raw!r}; a list of at least two arm names, or a list of such lists",
    )
    suite.alike = [[str(a) for a in g] for g in groups]
    flat = [a for g in suite.alike for a in g]
    require(
        set(flat) <= set(names),
        where,
        f"alike names arms that do not exist: {sorted(set(flat) - set(names))}",
    )
    require(len(flat) == len(set(flat)), where, "an arm may sit in one alike group only")
    grids = tree.get("grids") or {}
    require(
        isinstance(grids, dict)
        and all(isinstance(v, list) and len(v) >= 3 for v in grids.values()),
        where,
        f"grids={grids!r}; a mapping of grid names to at least three arms (ascending), so an "
        "optimum can be bracketed",
    )
    suite.grids = {str(k): [str(a) for a in v] for k, v in grids.items()}
    stray = {a for v in suite.grids.values() for a in v} - set(names)
    require(not stray, where, f"grids name arms that do not exist: {sorted(stray)}")
    require(
        not set(suite.grids) & set(names),
        where,
        f"grid names {sorted(set(suite.grids) & set(names))} are "
        "also arm names; give grids names of their own",
    )
    suite.purpose = str(tree.get("purpose", "lecture"))
    require(
        suite.purpose in PURPOSES, where, f"purpose={suite.purpose!r}; one of {', '.join(PURPOSES)}"
    )


def _screening(tree: dict, where: str, fold_over: bool | None) -> dict:
    """A screening design's spec (`design:` given as a mapping), checked; {} for any other suite."""
    spec = tree.get("design")
    if not isinstance(spec, dict):
        require(
            fold_over is None or not fold_over,
            where,
            "--fold-over needs a screening suite (design: {kind: "
            "fractional, ...} with two-level factors)",
        )
        return {}
    require(
        not set(spec) - SCREENING_KEYS,
        where,
        f"design keys {sorted(set(spec) - SCREENING_KEYS)} unknown; "
        f"allowed: {sorted(SCREENING_KEYS)}",
    )
    require(
        spec.get("kind") in SCREENING_KINDS,
        where,
        f"design kind={spec.get('kind')!r}; one of {', '.join(SCREENING_KINDS)}",
    )
    from archlab.lab.spec.design import RESOLUTIONS

    resolution = str(spec.get("resolution", "IV"))
    require(
        resolution in RESOLUTIONS,
        where,
        f"design resolution={resolution!r}; one of {', '.join(RESOLUTIONS)}",
    )
    folded = bool(spec.get("fold_over", False)) if fold_over is None else fold_over
    require(
        isinstance(tree.get("factors"), dict)
        and all(isinstance(v, dict) and len(v) == 2 for v in tree["factors"].values()),
        where,
        "a screening design needs factors with exactly two levels each ({low: "
        "overrides, high: overrides})",
    )
    return {
        "kind": spec["kind"],
        "resolution": resolution,
        "fold_over": folded,
        # only where given: a suite without them keeps the spec it always had
        **_fold_on(spec, resolution, tree["factors"], folded, where),
        "text": spec.get("text", ""),
    }


def _fold_on(spec: dict, resolution: str, factors: dict, folded: bool, where: str) -> dict:
    """A screening design's `fold_on` (a factor's name) and `keep` (one of its levels: the
    semifold), checked, as the spec's keys ({} without them); a semifold must estimate every
    column of the full fold."""
    fold_on, keep = spec.get("fold_on"), spec.get("keep")
    if fold_on is None:
        require(keep is None, where, f"design keep={keep!r} needs fold_on (the factor it folds)")
        return {}
    fold_on = str(fold_on)
    require(fold_on in factors, where, f"design fold_on={fold_on!r}; one of {', '.join(factors)}")
    require(
        not folded, where, "design fold_on (one factor's mirror) and fold_over (every factor's)"
    )
    levels = [str(level) for level in factors[fold_on]]
    require(
        keep is None or str(keep) in levels,
        where,
        f"design keep={keep!r}; one of {fold_on}'s levels {', '.join(levels)} (or no keep)",
    )
    if keep is None:
        return {"fold_on": fold_on}
    from archlab.lab.spec.design import estimable

    folding = {"resolution": resolution, "fold_on": fold_on, "keep": str(keep)}
    names = {str(f): [str(n) for n in v] for f, v in factors.items()}
    require(
        estimable(screening_design(folding, names)),
        where,
        f"design fold_on={fold_on!r}, keep={keep!r}: the semifold's rows cannot estimate every "
        "main effect and two-factor chain of the full fold; fold the full design (no keep)",
    )
    return {"fold_on": fold_on, "keep": str(keep)}


def _arms(
    tree: dict, where: str, screening: dict | None = None
) -> tuple[dict[str, list[str]], list[Arm]]:
    """The arms, listed or (with `factors:`) every combination of the factors' levels, or (a
    screening suite) one per row of its design; named level-level-..."""
    raw = tree.get("factors")
    if raw is None:
        arms = tree.get("arms") or {}
        require(
            isinstance(arms, dict) and len(arms) >= 2,
            where,
            "arms must map at least two arm names to overrides",
        )
        return {}, [_arm(str(n), o, where) for n, o in arms.items()]
    require(
        "arms" not in tree,
        where,
        "give arms or factors, not both (factors make every combination an arm)",
    )
    require(
        isinstance(raw, dict)
        and len(raw) >= 2
        and all(isinstance(v, dict) and len(v) >= 2 for v in raw.values()),
        where,
        "factors must map at least two factors to at least two levels each ({level: overrides})",
    )
    factors = {str(f): [str(level) for level in levels] for f, levels in raw.items()}
    levels_of = [list(levels.items()) for levels in raw.values()]
    if screening:  # one arm per design row: level 0 at -1, level 1 at +1
        rows = screening_design(screening, factors).matrix
        combos = [tuple(levels_of[j][int(v > 0)] for j, v in enumerate(row)) for row in rows]
    else:
        combos = list(itertools.product(*levels_of))
    arms, made = [], {}
    for combo in combos:
        overrides: dict[str, object] = {}
        for _, level_overrides in combo:
            clash = set(overrides) & set(flatten(level_overrides or {}))
            require(
                not clash,
                where,
                f"factor levels {[str(n) for n, _ in combo]} both set {sorted(clash)}",
            )
            overrides.update(flatten(level_overrides or {}))
        levels = [str(n) for n, _ in combo]
        name = "-".join(levels)
        # a screening design may repeat a row (the same levels, the same arm); other levels may not
        # share its name
        require(
            made.get(name, levels) == levels,
            where,
            f"the levels {made.get(name)} and {levels} both make arm "
            f"{name!r} (an arm is named level-level-...); rename a level",
        )
        made[name] = levels
        arms.append(Arm(name, overrides, levels={f: str(n) for f, (n, _) in zip(factors, combo)}))
    return factors, arms


def _arm(name: str, raw: object, where: str) -> Arm:
    """One listed arm: its dotted overrides, and `steps_scale` (not a train key: a multiple of
    the budget's steps)."""
    overrides = flatten(raw or {})
    scale = overrides.pop("steps_scale", 1.0)
    require(
        is_positive(scale),
        where,
        f"arm {name}: steps_scale={scale!r}; a number > 0 (a multiple of the budget's steps)",
    )
    require(
        "steps" not in overrides or scale == 1.0,
        where,
        f"arm {name}: give steps or steps_scale, not both",
    )
    return Arm(name, overrides, steps_scale=float(scale))


def _timing(raw: dict, where: str, arms: list[str]) -> Timing:
    require_fields(raw, Timing, where, "timing")
    pair = raw.get("arms") or []
    require(
        len(pair) == 2 and set(pair) <= set(arms),
        where,
        f"timing {raw.get('metric')!r}: arms {pair!r} must name two arms ({', '.join(arms)})",
    )
    from archlab.lab.measures.timing import TIMINGS

    require(
        raw.get("kind") in TIMINGS,
        where,
        f"timing {raw.get('metric')!r}: kind={raw.get('kind')!r}; one of {', '.join(TIMINGS)}",
    )
    pairs = raw.get("pairs", 24)
    require(
        isinstance(pairs, int) and pairs >= 2,
        where,
        f"timing {raw.get('metric')!r}: pairs={pairs!r}; >= 2",
    )
    return Timing(
        str(raw["metric"]),
        raw["kind"],
        (str(pair[0]), str(pair[1])),
        pairs,
        dict(raw.get("options") or {}),
        flatten(raw.get("keys") or {}),
    )

"""A suite as the lab holds it: a base config, arms (sets of dotted overrides), what to measure, the
timings and the claims (read from a suite's YAML file by lab/spec/suite_file.py), and the margins a
claim gets at a budget.

Claims are superiority (`expect: better`, optionally at least `min_effect`), non-inferiority
(`same`: not worse by more than `margin`) or equivalence (`equivalent`, TOST), with margins and
smallest effects stated before the run (the claim's, else the suite's `margins:`, else the budget's:
lab/spec/budgets.py). A claim may name a grid (judged at its best arm), a factor's levels (a
factorial contrast, `within:` some levels of the others), or, in a screening suite (`design:` a
mapping: lab/spec/design.py, lab/analysis/screening.py), a factor's main effect. lab/spec/arms.py
turns arms into runs.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

from archlab.lab.spec.budgets import MARGIN_METRICS, TIMING_SMALLEST_EFFECT, Budget

# MEASURES (lab/measures/measure.py) imports torch: it is imported where a claim's measure
# is read, so this module and lab/spec/suite_file.py (the suites `archlab ablate --list`
# lists) stay torch-free
MATCH_MODES = ("d_ff", "none")
EXPECTS = ("better", "same", "equivalent")
# calibration suites measure the lab's yardstick: outside the lecture's tallies
PURPOSES = ("lecture", "calibration")
NARANG_FINDINGS = ("better", "same", "worse")
# a claim's standing for the lecture claim it tests (registration.json records it)
ROLES = ("primary", "secondary")


class SuiteError(ValueError):
    """A malformed suite file: the message names the file, the key and what is allowed."""


def is_positive(value: object) -> bool:
    """A finite number > 0 (True and False are no numbers here)."""
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value > 0
    )


def require(ok: bool, where: str, message: str) -> None:
    """Raise SuiteError(`where: message`) unless `ok`."""
    if not ok:
        raise SuiteError(f"{where}: {message}")


def require_fields(raw: object, cls: type, where: str, what: str) -> None:
    """`raw` (a `what` of the suite file) is a mapping whose keys are fields of `cls`; one line
    naming the unknown keys and the allowed ones otherwise."""
    require(isinstance(raw, dict), where, f"a {what} must be a mapping, got {raw!r}")
    names = {f.name for f in dataclasses.fields(cls)}
    require(
        not set(raw) - names,
        where,
        f"{what} keys {sorted(set(raw) - names)} unknown; allowed: {sorted(names)}",
    )


def is_exact(metric: str) -> bool:
    """Whether a measure is exact arithmetic (a formula), so that claims on it
    are "by construction"."""
    from archlab.lab.measures.measure import MEASURES

    return metric in MEASURES and MEASURES[metric].exact


@dataclass(frozen=True)
class Claim:
    text: str  # the claim as the source states it
    metric: str  # a measure name, or a timing's metric
    arm: str  # the arm claimed better (or as good); with `factor`, a level of that factor
    versus: str  # the arm it is compared with (the same arm when two metrics are compared)
    # better (one-sided superiority) | same (non-inferiority within `margin`)
    expect: str = "better"
    # `same` / `equivalent`: how much worse still counts (metric units); None = default
    margin: float | None = None
    # `better`: the smallest gain that counts (metric units); 0 = any significant gain
    min_effect: float = 0.0
    # the effect of interest a plan targets (metric units); None = default
    smallest_effect: float | None = None
    # compare `metric` of arm with this metric of versus; None = the same metric
    versus_metric: str | None = None
    # higher | lower: the way the claim says arm moves; None = the measure's better
    direction: str | None = None
    narang: str | None = None  # Narang et al. 2021 on the same comparison: better | same | worse
    # why this design cannot show the claim here (reported, never tested)
    untestable: str | None = None
    factor: str | None = None  # a factorial contrast of this factor's levels `arm` vs `versus`
    # with `factor`: only the cells at these levels of other factors
    within: dict[str, str] | None = None
    # primary | secondary: this test's standing for the lecture claim it tests; None = unstated
    role: str | None = None
    # the lecture claim this comparison tests (its id in the claims index); None = unstated
    tests: str | None = None

    @property
    def better(self) -> str:
        """Which way the claim says is good for `arm` (lower | higher)."""
        if self.direction is not None:
            return self.direction
        from archlab.lab.measures.measure import MEASURES

        # a timing: less time is good
        return MEASURES[self.metric].better if self.metric in MEASURES else "lower"


@dataclass(frozen=True)
class Timing:
    """A speed comparison on freshly initialised models: `pairs` interleaved
    A/B timings (lab/measures/timing.py)."""

    metric: str  # the name claims use
    kind: str  # TIMING_KINDS
    arms: tuple[str, str]
    pairs: int = 24
    # passed to time_pairs (cache_len, batch, d, build)
    options: dict[str, object] = field(default_factory=dict)
    # dotted model keys for the timed models only
    keys: dict[str, object] = field(default_factory=dict)


@dataclass
class Arm:
    name: str
    overrides: dict[str, object]  # dotted keys the arm sets over the base (after d_ff matching)
    params: int = 0  # total parameters of the arm's model
    matched: str = ""  # what the lab changed to match parameters ("d_ff 192 -> 171 ...")
    flagged: bool = False  # more than PARAM_TOLERANCE off the base's parameters
    # factorial suites: the arm's level of each factor
    levels: dict[str, str] = field(default_factory=dict)
    # the arm trains this many times the budget's steps (warmup alike): a compute ladder
    steps_scale: float = 1.0


@dataclass
class Suite:
    name: str
    title: str
    source: str
    narang: str
    base: dict[str, object]
    arms: list[Arm]
    measures: list[str]
    claims: list[Claim]
    match_params: str = "d_ff"
    unmatched: list[str] = field(default_factory=list)
    checkpoints: int = 1  # evenly spaced checkpoints kept per run (measures over steps read them)
    path: str = ""
    design: str = ""  # why this design can show its claims (or why a claim is untestable here)
    factors: dict[str, list[str]] = field(default_factory=dict)  # factor -> its levels, in order
    regimes: dict[str, list[str]] = field(default_factory=dict)  # regime -> arms pooled together
    margins: dict[str, float] = field(default_factory=dict)  # the suite's margins per metric
    timings: list[Timing] = field(default_factory=list)
    # seeds per arm when the suite needs other than the budget's (a factorial: fewer)
    seeds: int | None = None
    # budget -> keys over the base there
    budget_keys: dict[str, dict[str, object]] = field(default_factory=dict)
    # groups of arms built alike: may pool one residual
    alike: list[list[str]] = field(default_factory=list)
    # a screening design {kind, resolution, fold_over, fold_on, keep, text}
    screening: dict[str, object] = field(default_factory=dict)
    # grid -> its arms, ascending in the swept value
    grids: dict[str, list[str]] = field(default_factory=dict)
    # PURPOSES: a calibration suite's claims stay outside the lecture's tallies
    purpose: str = "lecture"

    @property
    def base_arm(self) -> Arm:
        return self.arms[0]

    def arm(self, name: str) -> Arm:
        return next(a for a in self.arms if a.name == name)

    def timing(self, claim: Claim) -> Timing | None:
        """The timing a claim reads, or None for a claim on the runs' measures."""
        return next(
            (
                t
                for t in self.timings
                if t.metric == claim.metric and set(t.arms) == {claim.arm, claim.versus}
            ),
            None,
        )

    def cells(self, claim: Claim, level: str) -> list[str]:
        """The arms a factorial claim averages at one level of its factor (all arms named `level`
        otherwise; a grid's name: all its arms, of which the judge picks the best)."""
        if claim.factor is None:
            return list(self.grids[level]) if level in self.grids else [level]
        within = claim.within or {}
        return [
            a.name
            for a in self.arms
            if a.levels.get(claim.factor) == level
            and all(a.levels.get(f) == v for f, v in within.items())
        ]


def screening_design(suite_or_spec: Suite | dict, factors: dict[str, list[str]]):  # -> Design
    """The Design a screening suite runs over `factors` (name -> its two levels): its rows, folded
    over, or folded on one factor (`fold_on`), only the new rows at one of its levels kept
    (`keep`: the semifold), when asked."""
    from archlab.lab.spec.design import design, fold_on, fold_over

    spec = suite_or_spec.screening if isinstance(suite_or_spec, Suite) else suite_or_spec
    d = design(len(factors), spec["resolution"])
    if spec.get("fold_on"):
        j = list(factors).index(spec["fold_on"])
        keep = spec.get("keep")
        return fold_on(d, j, None if keep is None else factors[spec["fold_on"]].index(keep) * 2 - 1)
    return fold_over(d) if spec.get("fold_over") else d


def default_effect(suite: Suite, budget: Budget, metric: str) -> float | None:
    """The margin / smallest effect a claim on `metric` gets when it states none (module
    doc), or None."""
    if metric in suite.margins:
        return suite.margins[metric]
    if metric in MARGIN_METRICS:
        return budget.margin
    if any(t.metric == metric for t in suite.timings):
        return TIMING_SMALLEST_EFFECT
    return None


def at_budget(suite: Suite, budget: Budget) -> Suite:
    """The suite with each claim's unstated margin (`same`, `equivalent`) and smallest effect (all
    claims) filled in from the suite's and the budget's defaults (`default_effect`)."""
    claims = []
    for c in suite.claims:
        default = default_effect(suite, budget, c.metric)
        if c.expect != "better" and c.margin is None and default is not None:
            c = dataclasses.replace(c, margin=default)
        if c.smallest_effect is None and default is not None:
            c = dataclasses.replace(
                c, smallest_effect=c.margin if c.expect != "better" else default
            )
        claims.append(c)
    return dataclasses.replace(suite, claims=claims)

"""A screening page's design and effects: the fractional factorial's generators, defining relation
and alias chains, each effect with its SE and interval, and what the rows' variance check (Cochran's
C) found and how the fit's sigma and SEs follow from it."""

from __future__ import annotations

import math

from scipy import special

from archlab.lab.publishing.record import Record
from archlab.lab.publishing.tables import fmt


def screening_section(record: Record) -> tuple[tuple | None, list[str]] | None:
    """A screening suite's design (generators, defining relation, alias chains) and
    its effects table."""
    from archlab.lab.analysis.screening import fit
    from archlab.lab.spec.suite import screening_design

    s = record.suite
    if not s.screening:
        return None
    d = screening_design(s, s.factors)
    factors = list(s.factors)
    lines = d.describe() + [
        "factors (letter: -1 level / +1 level): "
        + "; ".join(
            f"{chr(65 + j)} = {f} ({names[0]} / {names[1]})"
            for j, (f, names) in enumerate(s.factors.items())
        ),
        "alias chains up to two-factor interactions: "
        + "; ".join(
            " = ".join(" x ".join(factors[ord(c) - 97] for c in w) for w in chain)
            for chain in d.chains(2)
            if len(chain) > 1
        )
        + ".",
    ]
    alone = d.clear_interactions()
    if alone:  # a fold on one factor: its interactions left their chains
        lines.append(
            "two-factor interactions clear of every other: "
            + ", ".join(" x ".join(factors[ord(c) - 97] for c in w) for w in alone)
            + "."
        )
    metric = "val_loss" if "val_loss" in s.measures else s.measures[0]
    result = fit(record.table, metric)
    if result is None:
        return None, lines + [f"No least-squares fit of {metric}: a run is missing or diverged."]
    rows = []
    for e in sorted(result.effects, key=lambda e: -abs(e.estimate)):
        t = float(special.stdtrit(e.df, 0.95))
        rows.append(
            [
                e.term,
                e.aliases,
                fmt(e.estimate),
                fmt(e.se),
                f"[{fmt(e.estimate - t * e.se)}, {fmt(e.estimate + t * e.se)}]",
                f"{e.df:.3g}",
                fmt(e.p),
            ]
        )
    lines += row_check_lines(result)
    return (
        [
            "effect",
            "aliases",
            "estimate (+1 minus -1)",
            "SE",
            "90% interval",
            "df",
            "p (two-sided)",
        ],
        rows,
    ), lines


def row_check_lines(result) -> list[str]:  # result: archlab.lab.analysis.screening.Fit
    """What the rows' variance check found (Cochran's C) and how the fit's sigma and SEs
    follow from it."""
    from archlab.lab.analysis.screening import COCHRAN_ALPHA

    n = result.runs * result.seeds
    check = result.rows
    if check is None:
        return [
            f"{result.metric}: a run's residual sd {fmt(result.sigma)} on {result.df:g} df (one "
            "seed: no row's variance can be checked); each effect is the mean at +1 minus "
            f"the mean at -1 over {result.runs} rows x {result.seeds} seeds, SE 2 sigma / "
            f"sqrt(N) = {fmt(2 * result.sigma / math.sqrt(n))}."
        ]
    test = (
        f"Rows' variances before pooling (each row's seeds, the seed block removed, {check.df} "
        f"df): Cochran's C {fmt(check.c)} against {fmt(check.critical)} at {COCHRAN_ALPHA:g} "
        "(C_crit = 1 / (1 + (k - 1) / F(alpha / k; df, (k - 1) df)), Cochran 1941)"
    )
    if not check.unstable:
        return [
            test + ": no row stands out, so one sigma is pooled.",
            f"{result.metric}: a run's residual sd {fmt(result.sigma)} on {result.df:g} df; "
            f"each effect is the mean at +1 minus the mean at -1 over {result.runs} rows x "
            f"{result.seeds} seeds, SE 2 sigma / sqrt(N) = {fmt(2 * result.sigma / math.sqrt(n))}; "
            "the interval is +-t SE at the residual df.",
        ]
    rows = "; ".join(
        f"{name} (sd {fmt(math.sqrt(v))} over its seeds, {v / check.variance:.0f}x "
        "the others' variance)"
        for name, v in check.unstable.items()
    )
    return [
        test
        + f": unstable, {rows}, holding {check.share:.0%} of the rows' residual sum of squares.",
        f"{result.metric}: the stable rows' residual sd {fmt(result.sigma)} on "
        f"{check.pooled_df} df. An unstable row keeps its runs at its own variance: the "
        "effects are weighted least squares (weights 1 / variance), each SE from both "
        "variances, its df Satterthwaite's; the interval is +-t SE at those df. Pooled, "
        f"the residual sd would be {fmt(result.pooled_sigma)} on {result.pooled_df:g} "
        f"df, SE {fmt(2 * result.pooled_sigma / math.sqrt(n))}.",
    ]

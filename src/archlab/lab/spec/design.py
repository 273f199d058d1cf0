"""Two-level fractional factorial designs for screening suites: which setting of each factor
every run uses.

A 2^(k-p) design sets k two-level factors (coded -1 / +1) in 2^(k-p) runs: k - p base factors run
through their full factorial and each of the p others is the product of some base columns, its
generator (Box, Hunter & Hunter, *Statistics for Experimenters*, 2nd ed., ch. 6; NIST/SEMATECH
e-Handbook 5.3.3.4). Each generator X = W gives a word WX of the defining relation, and the products
of those words complete it; an effect is aliased with its product with every word. The resolution is
the shortest word's length: at III main effects are aliased with two-factor interactions, at IV with
three-factor ones only (two-factor interactions alias each other), at V two-factor interactions are
clear of each other. The designs come from pyDOE (`pydoe.fracfact_opt`, an exhaustive search for the
generators that alias the fewest low-order effects, i.e. minimum aberration, and `fracfact`); this
module picks the smallest number of runs that reaches the resolution asked for and reads the words
and the alias chains off the design.

Each main effect of an N-run design is the mean of N/2 runs at +1 minus the mean of N/2 at -1, so
its standard error is 2 sigma / sqrt(N) (sigma: one run's residual sd); one switch at a time, an
arm against its base over n seeds has sqrt(2) sigma / sqrt(n). At equal runs, N = (K + 1) n for K
switches and a base, the design's SE is sqrt(2 / (K + 1)) of the one-at-a-time SE (0.47 for K = 8):
every run informs every main effect.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass

import numpy as np

LETTERS = "abcdefghijklmnopqrstuvwxyz"
# the suite file's names -> the shortest word's length
RESOLUTIONS = {"III": 3, "IV": 4, "V": 5, "full": None}


@dataclass(frozen=True)
class Design:
    """A two-level design: its runs, how its factors are generated, its defining
    relation and aliases."""

    matrix: np.ndarray  # runs x k, entries -1 / +1, columns in the factors' order
    # per factor, its column as a product of the base letters ("a", ..., "abc")
    generators: tuple[str, ...]
    words: tuple[str, ...]  # the defining relation I = w1 = w2 = ..., each word sorted
    resolution: int | None  # the shortest word's length; None for a full factorial
    # how the rows were extended beyond the fraction (`fold_on`, `fold_over`): "" for none
    fold: str = ""
    # False for a semifold: its rows are no regular fraction, the words and chains are those of
    # the full fold whose rows it keeps, and its effect columns are correlated
    regular: bool = True

    @property
    def runs(self) -> int:
        return int(self.matrix.shape[0])

    @property
    def k(self) -> int:
        return int(self.matrix.shape[1])

    def word_length_pattern(self) -> dict[int, int]:
        """How many words of each length the defining relation holds (A3, A4, ...: aberration)."""
        counts: dict[int, int] = {}
        for w in self.words:
            counts[len(w)] = counts.get(len(w), 0) + 1
        return dict(sorted(counts.items()))

    def chains(self, order: int = 2) -> list[tuple[str, ...]]:
        """The alias chains of the effects of at most `order` factors: each chain the effects
        (letters of the factors in the design's order, "a", "ab", ...) that share one column, main
        effects first; an effect aliased with none of that order stands alone."""
        letters = LETTERS[: self.k]
        effects = [
            frozenset(c) for r in range(1, order + 1) for c in itertools.combinations(letters, r)
        ]
        words = [frozenset(w) for w in self.words]
        seen, out = set(), []
        for e in effects:
            if e in seen:
                continue
            chain = [e] + [f for f in effects if f != e and (e ^ f) in words]
            seen.update(chain)
            out.append(
                tuple("".join(sorted(x)) for x in sorted(chain, key=lambda x: (len(x), sorted(x))))
            )
        return out

    def clear_interactions(self) -> list[str]:
        """The two-factor interactions aliased with no other effect of at most two factors (a
        fold on one factor frees that factor's), as letter pairs."""
        return [c[0] for c in self.chains(2) if len(c) == 1 and len(c[0]) == 2]

    def describe(self) -> list[str]:
        """The design in the textbook's words: runs, generators, defining relation, resolution."""
        base = [g for g in self.generators if len(g) == 1]
        made = [
            f"{LETTERS[i].upper()} = {g.upper()}"
            for i, g in enumerate(self.generators)
            if len(g) > 1
        ]
        res = {3: "III", 4: "IV", 5: "V", 6: "VI", 7: "VII"}.get(self.resolution or 0, "full")
        p = self.k - len(base)
        if not self.fold:
            lines = [f"2^({self.k}-{p}) design, {self.runs} runs, resolution {res}"]
        else:
            lines = [f"2^({self.k}-{p}) design {self.fold}: {self.runs} runs"]
            lines[0] += f", resolution {res}" if self.regular else ""
        if made:
            of = " (of the fraction folded)" if self.fold else ""
            lines.append(f"generators{of}: " + ", ".join(made))
        if self.words:
            of = "" if self.regular else " (of the full fold)"
            lines.append(f"defining relation{of}: I = " + " = ".join(w.upper() for w in self.words))
        return lines


def _resolution(words: list[str]) -> int | None:
    return min((len(w) for w in words), default=None)


def _words(generators: list[str]) -> list[str]:
    """The defining relation of `generators` (letters a, b, ... in the factors' order):
    every product of the generator words X W (W the generator of factor X), as sorted letter
    strings, shortest first."""
    base = [frozenset(g + LETTERS[i]) for i, g in enumerate(generators) if len(g) > 1]
    words = set()
    for r in range(1, len(base) + 1):
        for combo in itertools.combinations(base, r):
            word = frozenset()
            for w in combo:
                word = word ^ w
            if word:
                words.add("".join(sorted(word)))
    return sorted(words, key=lambda w: (len(w), w))


def _generators(gen: str, k: int) -> list[str]:
    """pyDOE's generator string ('a b c abc') with its base letters renamed to the
    factors' own letters."""
    terms = gen.split()
    if len(terms) != k:
        raise ValueError(f"generator string {gen!r} has {len(terms)} terms for {k} factors")
    base = [t for t in terms if len(t) == 1]
    rename = {old: LETTERS[i] for i, old in enumerate(terms) if len(old) == 1}
    if len(base) != len(set(base)) or any(set(t) - set(rename) for t in terms):
        raise ValueError(f"generator string {gen!r} is not a 2-level regular design")
    return ["".join(sorted(rename[c] for c in t)) for t in terms]


@functools.lru_cache(maxsize=64)
def design(k: int, resolution: str | int = "IV") -> Design:
    """The fewest-run regular 2^(k-p) design of k factors with resolution at least `resolution`
    (III, IV, V or "full"), its generators chosen by pyDOE's minimum-aberration search (80 ms for
    7 factors: kept per (k, resolution), since every fit of a screening suite asks for it; callers
    never change the matrix)."""
    from pydoe import fracfact, fracfact_opt

    if not (isinstance(k, int) and 2 <= k <= 15):
        raise ValueError(f"k={k!r} factors is not allowed: 2 to 15 two-level factors")
    wanted = RESOLUTIONS.get(resolution, resolution) if isinstance(resolution, str) else resolution
    if resolution not in RESOLUTIONS and not (isinstance(wanted, int) and 3 <= wanted <= 8):
        raise ValueError(
            f"resolution {resolution!r} is not allowed: one of {', '.join(RESOLUTIONS)}"
        )
    m = max(1, math.ceil(math.log2(k + 1)))
    while True:
        if wanted is None or m >= k:  # a full factorial (or the fraction has nothing left to alias)
            gens = list(LETTERS[:k])
            return Design(
                np.asarray(fracfact(" ".join(gens)), dtype=np.int64), tuple(gens), (), None
            )
        if k - m <= 2**m - m - 1:
            gen, _, _ = fracfact_opt(k, k - m)
            gens = _generators(gen, k)
            words = _words(gens)
            if (_resolution(words) or k + 1) >= wanted:
                matrix = np.asarray(fracfact(" ".join(gens)), dtype=np.int64)
                return Design(matrix, tuple(gens), tuple(words), _resolution(words))
        m += 1


def fractional_factorial(
    k: int, resolution: str | int = "IV"
) -> tuple[np.ndarray, list[str], list[str]]:
    """(the design matrix in +-1, each factor's generator, the alias chains up to
    two-factor interactions as "a = bc = de" lines): `design` in the form the suite's tests
    and printouts read."""
    d = design(k, resolution)
    return d.matrix, list(d.generators), [" = ".join(c) for c in d.chains(2)]


def fold_over(d: Design) -> Design:
    """The design with its mirror image (every sign flipped) appended: the fold-over frees every
    main effect of two-factor interactions (a resolution III fraction becomes IV), at twice the runs
    (Box, Hunter & Hunter ch. 6)."""
    matrix = np.concatenate([d.matrix, -d.matrix])
    # odd words change sign in the mirror: they cancel
    words = tuple(w for w in d.words if len(w) % 2 == 0)
    return Design(matrix, d.generators, words, _resolution(list(words)), "folded over")


def fold_on(d: Design, j: int, keep: int | None = None) -> Design:
    """The fold-over on one factor: `d` with its rows again, factor `j`'s column mirrored. Every
    word holding j changes sign in the new rows and cancels, so j's two-factor interactions leave
    their chains (Montgomery, *Design and Analysis of Experiments*, 8th ed., section 8.6). With
    `keep` (-1 or +1) the semifold: of the new rows only those with j at `keep`, half the cost
    (Barnett, Czitrom, John & Leon, "Using fewer wafers to resolve confounding in screening
    experiments", Quality Engineering 10 (1997) 453). Its rows are no regular fraction: the words
    and chains are the full fold's, every effect column the full fold estimates is still fitted,
    and least squares estimates them correlated (`estimable` checks they can be)."""
    if not 0 <= j < d.k or d.fold:
        raise ValueError(f"fold_on: factor {j} of a {d.k}-factor design that was not folded yet")
    mirrored = d.matrix.copy()
    mirrored[:, j] *= -1
    letter = LETTERS[j].upper()
    fold = f"folded on {letter} ({letter}'s column mirrored in {d.runs} more rows)"
    if keep is not None:
        if keep not in (-1, 1):
            raise ValueError(f"fold_on: keep={keep!r}; -1 or +1")
        mirrored = mirrored[mirrored[:, j] == keep]
        fold = (
            f"semifolded on {letter} (of its {d.runs} rows with {letter}'s column mirrored, "
            f"the {len(mirrored)} at {letter} = {keep:+d})"
        )
    words = tuple(w for w in d.words if LETTERS[j] not in w)
    matrix = np.concatenate([d.matrix, mirrored])
    return Design(matrix, d.generators, words, _resolution(list(words)), fold, keep is None)


def effect_columns(d: Design, x: np.ndarray, order: int = 2) -> list[np.ndarray]:
    """One column per alias chain of `d` up to `order` factors that holds an effect of that order,
    main effects first: the product of the chain's first member's factors over the coded rows `x`
    (runs x k)."""
    return [
        np.prod(x[:, [LETTERS.index(c) for c in chain[0]]], axis=1) for chain in d.chains(order)
    ]


def main_effect_variances(d: Design) -> np.ndarray:
    """Each main effect's variance over sigma^2 when every row is run once and the intercept and
    the effect columns up to two-factor chains are fitted: 4 [(X'X)^-1]_jj (twice a coefficient).
    4 / runs for each, in a regular fraction; more where a semifold's columns are correlated."""
    x = np.column_stack([np.ones(d.runs), *effect_columns(d, d.matrix.astype(float))])
    return 4 * np.diag(np.linalg.inv(x.T @ x))[1 : d.k + 1]


def estimable(d: Design, order: int = 2) -> bool:
    """Whether the intercept and every effect column of `d` up to `order` factors are linearly
    independent over its rows: least squares can estimate each of them."""
    x = np.column_stack([np.ones(d.runs), *effect_columns(d, d.matrix.astype(float), order)])
    return int(np.linalg.matrix_rank(x)) == x.shape[1]

"""Fractional factorial designs (archlab.lab.spec.design) against the textbook: the
minimum-aberration 2^(k-p) designs of Box, Hunter & Hunter (2005, table 6.22) and the NIST/SEMATECH
e-Handbook (5.3.3.4.7, "Summary of useful fractional factorial designs"), written here as the
published generators, for k = 4..8 at resolutions III and IV.

Designs are compared by what does not depend on how the factors are lettered: the runs, the
resolution, the word-length pattern of the defining relation (how many words of each length), and
the pattern of the alias chains of main effects and two-factor interactions; and each design's
columns must be balanced and orthogonal."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

from archlab.lab.spec.design import LETTERS, _words, design, fold_over, fractional_factorial

# k, requested resolution -> the textbook's design: its runs and generators (letters: the
# factors in order)
TEXTBOOK = {
    # 4 factors in 8 runs is already resolution IV
    (4, "III"): (8, "D=ABC"),
    (4, "IV"): (8, "D=ABC"),
    # the 16-run half fraction is resolution V
    (5, "III"): (8, "D=AB E=AC"),
    (5, "IV"): (16, "E=ABCD"),
    (6, "III"): (8, "D=AB E=AC F=BC"),
    (6, "IV"): (16, "E=ABC F=BCD"),
    (7, "III"): (8, "D=AB E=AC F=BC G=ABC"),
    (7, "IV"): (16, "E=ABC F=BCD G=ACD"),
    # 16 runs: IV
    (8, "III"): (16, "E=BCD F=ACD G=ABC H=ABD"),
    (8, "IV"): (16, "E=BCD F=ACD G=ABC H=ABD"),
}


def _textbook_words(k: int, generators: str) -> list[str]:
    gens = list(LETTERS[:k])
    for item in generators.split():
        factor, word = item.split("=")
        gens[LETTERS.index(factor.lower())] = word.lower()
    return _words(gens)


def _chain_pattern(d) -> list[tuple[int, ...]]:
    """Each alias chain of main effects and two-factor interactions as the orders of
    its members, sorted."""
    return sorted(tuple(len(e) for e in chain) for chain in d.chains(2))


@pytest.mark.parametrize(("k", "resolution"), sorted(TEXTBOOK))
def test_designs_match_the_textbooks(k: int, resolution: str) -> None:
    runs, generators = TEXTBOOK[k, resolution]
    d = design(k, resolution)
    words = _textbook_words(k, generators)
    lengths = sorted(len(w) for w in words)
    assert d.runs == runs and d.k == k
    # the same word-length pattern (minimum aberration)
    assert sorted(len(w) for w in d.words) == lengths
    assert d.resolution == lengths[0]
    assert d.resolution >= {"III": 3, "IV": 4}[resolution]
    # the alias chains up to two-factor interactions have the textbook's shape
    from archlab.lab.spec.design import Design

    ref = Design(np.zeros((runs, k)), tuple(), tuple(words), lengths[0])
    assert _chain_pattern(d) == _chain_pattern(ref)
    # the matrix is the generators' product columns, balanced and orthogonal
    x = d.matrix
    assert set(np.unique(x)) == {-1, 1} and (x.sum(axis=0) == 0).all()
    assert np.array_equal(x.T @ x, runs * np.eye(k, dtype=int))
    for i, g in enumerate(d.generators):
        product = np.prod(x[:, [LETTERS.index(c) for c in g]], axis=1)
        assert np.array_equal(product, x[:, i])
    for w in d.words:  # every word of the defining relation is the identity column
        assert (np.prod(x[:, [LETTERS.index(c) for c in w]], axis=1) == 1).all()
    assert len({tuple(row) for row in x}) == runs  # no run repeated


def test_resolution_iv_keeps_main_effects_clear_of_two_factor_interactions() -> None:
    d = design(7, "IV")
    for chain in d.chains(2):
        assert sum(len(e) == 1 for e in chain) <= 1
        if len(chain[0]) == 1:
            assert all(len(e) != 2 for e in chain[1:]), chain  # a main effect aliased with no 2fi
    iii = design(7, "III")
    assert any(len(c[0]) == 1 and any(len(e) == 2 for e in c[1:]) for c in iii.chains(2))


def test_fold_over_frees_main_effects_and_the_public_tuple() -> None:
    iii = design(7, "III")
    folded = fold_over(iii)
    assert folded.runs == 16 and folded.resolution == 4
    x = folded.matrix
    assert np.array_equal(x.T @ x, 16 * np.eye(7, dtype=int))
    # main effects orthogonal to every 2fi column
    for a, b, c in itertools.combinations(range(7), 3):
        assert x[:, a] @ (x[:, b] * x[:, c]) == 0
    matrix, generators, aliases = fractional_factorial(6, "IV")
    assert matrix.shape == (16, 6) and len(generators) == 6 and aliases[0].startswith("a")
    full, gens, _ = fractional_factorial(3, "full")
    assert full.shape == (8, 3) and gens == ["a", "b", "c"]
    with pytest.raises(ValueError, match=re.escape("resolution 'VI+' is not allowed")):
        design(5, "VI+")


# Montgomery, *Design and Analysis of Experiments* (8th ed.), ch. 8: the alias structure of the
# 2^(4-1)_IV design with I = ABCD (example 8.1) and of the 2^(5-2)_III design with D = AB, E = AC, I
# = ABD = ACE = BCDE (example 8.7), cut at three-factor interactions. The defining relation's words
# of at most three letters are aliased with the mean: they form one chain of their own.
ALIASES_3 = {
    (4, "D=ABC"): ["A = BCD", "B = ACD", "C = ABD", "D = ABC", "AB = CD", "AC = BD", "AD = BC"],
    (5, "D=AB E=AC"): [
        "A = BD = CE",
        "B = AD = CDE",
        "C = AE = BDE",
        "D = AB = BCE",
        "E = AC = BCD",
        "BC = DE = ACD = ABE",
        "BE = CD = ABC = ADE",
        "ABD = ACE",
    ],
}


@pytest.mark.parametrize(("k", "generators"), sorted(ALIASES_3))
def test_alias_chains_at_order_3_are_the_textbooks(k: int, generators: str) -> None:
    from archlab.lab.spec.design import Design

    words = _textbook_words(k, generators)
    d = Design(
        np.zeros((2 ** (k - len(generators.split())), k)),
        tuple(),
        tuple(words),
        min(map(len, words)),
    )
    got = {frozenset(chain) for chain in d.chains(3)}
    want = {
        frozenset(e.strip().lower() for e in line.split("=")) for line in ALIASES_3[k, generators]
    }
    assert got == want


@pytest.mark.parametrize(("k", "resolution"), sorted(TEXTBOOK))
def test_alias_chains_at_order_3_share_one_column_and_no_other(k: int, resolution: str) -> None:
    """Read off the design's own matrix: the effects of one chain have one column (up to its sign),
    effects of two chains orthogonal columns, and every effect of at most three factors sits in
    exactly one chain."""
    d = design(k, resolution)
    x = d.matrix

    def column(effect: str) -> np.ndarray:
        return np.prod(x[:, [LETTERS.index(c) for c in effect]], axis=1)

    chains = d.chains(3)
    members = [e for chain in chains for e in chain]
    effects = ["".join(c) for r in (1, 2, 3) for c in itertools.combinations(LETTERS[:k], r)]
    assert sorted(members) == sorted(effects)
    for chain in chains:
        for e in chain[1:]:
            assert abs(column(chain[0]) @ column(e)) == d.runs, (chain, e)
    for one, other in itertools.combinations(chains, 2):
        assert column(one[0]) @ column(other[0]) == 0, (one, other)

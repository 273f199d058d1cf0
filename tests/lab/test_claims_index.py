"""The claims index (lab/spec/claims_index.py): the shipped index checks against the built-in
suites; each mistake (a missing claim or suite, two primaries, no primary, a test serving two
claims, a suite's tests: / role: that disagrees) is one line naming the entry; the suites' markings
reach the registration."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from archlab.lab.spec import registration
from archlab.lab.spec.budgets import BUDGETS
from archlab.lab.spec.claims_index import ClaimsIndexError, index_path, load_index
from archlab.lab.spec.suite import at_budget
from archlab.lab.spec.suite_file import list_suites, load_suite

SUITE = """
name: {name}
title: two arms
source: a test
design: the index's tests
base: {{preset: llama}}
arms: {{a: {{}}, b: {{model.norm: layernorm}}}}
measure: [val_loss]
claims:
  - {{text: b beats a, metric: val_loss, arm: b, versus: a{first}}}
  - {{text: b is as good as a, metric: val_loss, arm: b, versus: a, expect: same{second}}}
"""
SOURCES = {
    "cs336-lec3": {
        "title": "Stanford CS336 lecture 3",
        "url": "https://stanford-cs336.github.io/spring2025/",
    }
}


def suites(
    tmp_path: Path,
    first: str = ", tests: norm-choice, role: primary",
    second: str = ", tests: norm-choice, role: secondary",
) -> list:
    (tmp_path / "one.yaml").write_text(SUITE.format(name="one", first=first, second=second))
    (tmp_path / "two.yaml").write_text(SUITE.format(name="two", first="", second=""))
    return [load_suite(tmp_path / "one.yaml"), load_suite(tmp_path / "two.yaml")]


def entry(**change: object) -> dict:
    raw = {
        "id": "norm-choice",
        "source": "cs336-lec3",
        "where": "a table",
        "original": "RMSNorm 更快",
        "text": "RMSNorm is faster",
        "primary": {"suite": "one", "claim": "b beats a", "estimand": "b against a at the base"},
        "secondary": [
            {"suite": "one", "claim": "b is as good as a", "estimand": "non-inferiority"}
        ],
    }
    raw.update(change)
    return {k: v for k, v in raw.items() if v is not None}


def problems(tmp_path: Path, claims: list[dict], found: list | None = None) -> list[str]:
    path = tmp_path / "index.yaml"
    path.write_text(yaml.safe_dump({"sources": SOURCES, "claims": claims}, allow_unicode=True))
    with pytest.raises(ClaimsIndexError) as err:
        load_index(path, found if found is not None else suites(tmp_path))
    return err.value.problems


def test_a_good_index_loads_with_its_tests_and_their_standing(tmp_path: Path) -> None:
    path = tmp_path / "index.yaml"
    path.write_text(yaml.safe_dump({"sources": SOURCES, "claims": [entry()]}, allow_unicode=True))
    [claim] = load_index(path, suites(tmp_path))
    assert (claim.id, claim.original, claim.source.url) == (
        "norm-choice",
        "RMSNorm 更快",
        SOURCES["cs336-lec3"]["url"],
    )
    assert [(t.suite, t.claim, t.role) for t in claim.tests] == [
        ("one", "b beats a", "primary"),
        ("one", "b is as good as a", "secondary"),
    ]


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (
            {"primary": {"suite": "one", "claim": "b beats c", "estimand": "x"}},
            "suite 'one' has no claim 'b beats c'",
        ),
        (
            {"primary": {"suite": "three", "claim": "b beats a", "estimand": "x"}},
            "suite 'three' does not exist",
        ),
        ({"primary": None}, "no primary test"),
        (
            {
                "primary": [
                    {"suite": "one", "claim": "b beats a", "estimand": "x"},
                    {"suite": "one", "claim": "b is as good as a", "estimand": "y"},
                ],
                "secondary": None,
            },
            "2 primary tests: each lecture claim has exactly one",
        ),
        ({"source": "su-0000"}, "source 'su-0000' is not one of the index's sources"),
        ({"original": ""}, "original is missing or empty"),
        (
            {"secondary": [{"suite": "one", "claim": "b is as good as a"}]},
            "needs exactly ['claim', 'estimand', 'suite']",
        ),
    ],
)
def test_each_mistake_in_an_entry_is_one_line_naming_it(
    tmp_path: Path, change: dict, says: str
) -> None:
    [line] = problems(tmp_path, [entry(**change)])
    assert line.startswith("'norm-choice': ") and says in line, line


def test_two_primaries_through_the_suites_markings_are_one_line(tmp_path: Path) -> None:
    # the index lists 'b is as good as a' as secondary; its suite file says it is the primary
    [line] = problems(
        tmp_path, [entry()], suites(tmp_path, second=", tests: norm-choice, role: primary")
    )
    assert line.startswith(
        "'norm-choice': secondary test one: 'b is as good as a' states tests: "
        "norm-choice, role: primary"
    ), line


def test_a_suite_claim_marked_for_a_claim_the_index_does_not_list_it_under_is_one_line(
    tmp_path: Path,
) -> None:
    found = suites(tmp_path)
    (tmp_path / "two.yaml").write_text(
        SUITE.format(name="two", first=", tests: other-claim, role: primary", second="")
    )
    found[1] = load_suite(tmp_path / "two.yaml")
    [line] = problems(tmp_path, [entry()], found)
    assert line == (
        "two: 'b beats a' states tests: other-claim, role: primary, but the index does not list it "
        "under 'other-claim' (not an id of the index)"
    )


def test_a_test_serving_two_lecture_claims_and_a_repeated_id_are_refused(tmp_path: Path) -> None:
    twice = entry(id="norm-again", secondary=None)
    [line] = problems(tmp_path, [entry(), twice])
    assert line == (
        "'norm-again': primary test one: 'b beats a' is also a test of 'norm-choice': a suite "
        "claim tests one lecture claim"
    )
    [line] = problems(
        tmp_path,
        [
            entry(),
            entry(primary={"suite": "two", "claim": "b beats a", "estimand": "x"}, secondary=None),
        ],
        suites(tmp_path),
    )
    assert line == "'norm-choice': the id is given twice"


def test_the_shipped_index_checks_against_the_built_in_suites() -> None:
    index = load_index()
    ids = [c.id for c in index]
    assert len(ids) == len(set(ids)) >= 60
    raw = yaml.safe_load(index_path().read_text(encoding="utf-8"))
    for entry_ in raw["claims"]:  # the primary is one mapping, never a list
        assert isinstance(entry_["primary"], dict), entry_["id"]
    for c in index:  # citable sources only: the lecture's page or Su's posts
        assert (
            c.source.url == "https://stanford-cs336.github.io/spring2025/"
            or c.source.url.startswith("https://kexue.fm/archives/")
        ), c.id
        assert c.original.strip() and c.text.strip() and c.primary.estimand, c.id
    # every suite claim that states tests: is in the index, under the same id and role (both ways)
    listed = {(t.suite, t.claim): (c.id, t.role) for c in index for t in c.tests}
    marked = {
        (s.name, c.text): (c.tests, c.role) for s in list_suites() for c in s.claims if c.tests
    }
    assert marked == listed


def test_a_suites_standing_for_its_lecture_claim_reaches_the_registration() -> None:
    index = {c.id: c for c in load_index()}
    suite = at_budget(load_suite("ffn"), BUDGETS["small"])
    registered = {c["text"]: c for c in registration.claims_of(suite)}
    swiglu = registered["SwiGLU beats ReLU at equal parameters"]
    assert (swiglu["tests"], swiglu["role"]) == ("swiglu-beats-relu", "primary")
    assert index["swiglu-beats-relu"].primary.claim == swiglu["text"]
    assert (registered["GeLU beats ReLU"]["tests"], registered["GeLU beats ReLU"]["role"]) == (
        None,
        None,
    )

"""The claims index: the lecture's and Su Jianlin's claims that the lab tests, one verdict each.

src/archlab/lab/claims-index.yaml lists each claim once: an id, the sentence as its source states it
(`original`) and in English (`text`), where it comes from (a source's title and URL, and the place
in it), and its tests. Exactly one test is the claim's `primary`: the test whose estimand is the
claim (the rule is in docs/lab-statistics.md, "One verdict per lecture claim"), whose verdict is
the claim's in the summary's tally. The others are `secondary` evidence, each with its estimand in
words. A test is a (suite, claim text) of a built-in suite, and that claim states `tests: ID` and
`role: primary | secondary` in its suite file, so a plan's registration (lab/spec/registration.py)
records the standing it was judged under.

`load_index` reads the file and checks it against the built-in suites before anything uses it: every
suite and claim it names exists, every lecture claim has exactly one primary, no test serves two
lecture claims, and the suites' `tests:` / `role:` agree with the index both ways. Each mistake is
one line naming the entry.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import yaml

from archlab.lab.spec.suite import Suite

ENTRY_KEYS = {"id", "source", "where", "original", "text", "primary", "secondary"}
TEST_KEYS = {"suite", "claim", "estimand"}
ID = re.compile(r"^[a-z0-9][a-z0-9-]*$")


class ClaimsIndexError(ValueError):
    """A claims index that does not check: one line per problem, each naming the entry."""

    def __init__(self, path: Path, problems: list[str]) -> None:
        self.problems = problems
        super().__init__(f"{path}: " + f"\n{path}: ".join(problems))


@dataclass(frozen=True)
class Source:
    title: str
    url: str


@dataclass(frozen=True)
class Evidence:
    """One suite claim that tests a lecture claim, with its standing and what it estimates."""

    suite: str
    claim: str
    role: str  # primary | secondary
    estimand: str


@dataclass(frozen=True)
class LectureClaim:
    id: str
    text: str  # the claim in English
    original: str  # the source's sentence (or table row) as written
    source: Source
    where: str  # the place in the source
    primary: Evidence
    secondary: tuple[Evidence, ...]

    @property
    def tests(self) -> tuple[Evidence, ...]:
        return (self.primary, *self.secondary)


def index_path() -> Path:
    return Path(str(resources.files("archlab.lab") / "claims-index.yaml"))


def load_index(path: Path | None = None, suites: list[Suite] | None = None) -> list[LectureClaim]:
    """The lecture claims of the index at `path` (default: the shipped one), checked against
    `suites` (default: the built-in suites); raises ClaimsIndexError with every problem found,
    one line each."""
    from archlab.lab.spec.suite_file import list_suites

    path = Path(path) if path is not None else index_path()
    tree = yaml.safe_load(path.read_text(encoding="utf-8"))
    found = problems(tree, list_suites() if suites is None else suites)
    if found:
        raise ClaimsIndexError(path, found)
    sources = {name: Source(str(s["title"]), str(s["url"])) for name, s in tree["sources"].items()}
    return [_entry(raw, sources) for raw in tree["claims"]]


def _entry(raw: dict, sources: dict[str, Source]) -> LectureClaim:
    def test(t: dict, role: str) -> Evidence:
        return Evidence(
            str(t["suite"]), str(t["claim"]), role, " ".join(str(t["estimand"]).split())
        )

    return LectureClaim(
        str(raw["id"]),
        " ".join(str(raw["text"]).split()),
        str(raw["original"]).strip(),
        sources[raw["source"]],
        str(raw.get("where") or ""),
        test(raw["primary"], "primary"),
        tuple(test(t, "secondary") for t in raw.get("secondary") or []),
    )


# ------------------------------------------------------------------------------------------ checks
def problems(tree: object, suites: list[Suite]) -> list[str]:
    """Every problem of an index tree against these suites, one line each naming the entry ([]
    when it checks)."""
    if (
        not isinstance(tree, dict)
        or not isinstance(tree.get("sources"), dict)
        or not isinstance(tree.get("claims"), list)
    ):
        return [
            "must hold a mapping with 'sources' (name -> title, url) and 'claims' (a "
            "list of entries)"
        ]
    out = [
        f"source {name!r}: needs a title and an https URL, got {s!r}"
        for name, s in tree["sources"].items()
        if not (
            isinstance(s, dict) and s.get("title") and str(s.get("url", "")).startswith("https://")
        )
    ]
    by_name = {s.name: s for s in suites}
    seen_ids: set[str] = set()
    users: dict[tuple[str, str], str] = {}  # (suite, claim) -> the entry it tests
    # (suite, claim) -> (id, role) the index gives it
    listed: dict[tuple[str, str], tuple[str, str]] = {}
    # entries already reported: the suites' markings for them are not checked again
    broken: set[object] = set()
    for n, raw in enumerate(tree["claims"], start=1):
        name = f"claim {n}" if not isinstance(raw, dict) or not raw.get("id") else repr(raw["id"])
        lines = _entry_problems(raw, tree["sources"], seen_ids)
        if not lines:
            for test, role in _tests(raw):
                key = (str(test["suite"]), str(test["claim"]))
                lines += _test_problems(key, by_name)
                if key in users:
                    lines.append(
                        f"{role} test {key[0]}: {key[1]!r} is also a test of {users[key]!r}: a "
                        "suite claim tests one lecture claim"
                    )
                users.setdefault(key, str(raw["id"]))
                listed.setdefault(key, (str(raw["id"]), role))
        out += [f"{name}: {line}" for line in lines]
        if lines and isinstance(raw, dict):
            broken.add(raw.get("id"))
    return out + _marking_problems(listed, suites, seen_ids, broken)


def _entry_problems(raw: object, sources: dict, seen_ids: set[str]) -> list[str]:
    """An entry's shape: its keys, id, texts, source, and exactly one primary test."""
    if not isinstance(raw, dict):
        return [f"must be a mapping, got {raw!r}"]
    out = []
    if set(raw) - ENTRY_KEYS:
        out.append(f"unknown keys {sorted(set(raw) - ENTRY_KEYS)}; allowed: {sorted(ENTRY_KEYS)}")
    ident = raw.get("id")
    if not isinstance(ident, str) or not ID.match(ident):
        out.append(f"id {ident!r}: a lower-case slug (letters, digits, hyphens)")
    elif ident in seen_ids:
        out.append("the id is given twice")
    else:
        seen_ids.add(ident)
    out += [
        f"{key} is missing or empty: the source's sentence ('original') and its English ('text')"
        for key in ("original", "text")
        if not str(raw.get(key) or "").strip()
    ]
    if raw.get("source") not in sources:
        out.append(
            f"source {raw.get('source')!r} is not one of the index's sources: {sorted(sources)}"
        )
    primary = raw.get("primary")
    if primary is None:
        out.append(
            "no primary test: each lecture claim has exactly one (primary: "
            "{suite, claim, estimand})"
        )
    elif isinstance(primary, list):
        out.append(
            f"{len(primary)} primary tests: each lecture claim has exactly one (the "
            "others are secondary)"
        )
    secondary = raw.get("secondary") or []
    if not isinstance(secondary, list):
        out.append(f"secondary must be a list of tests, got {secondary!r}")
    if out:
        return out
    for test, role in _tests(raw):
        if (
            not isinstance(test, dict)
            or set(test) != TEST_KEYS
            or not all(str(v).strip() for v in test.values())
        ):
            out.append(
                f"{role} test {test!r}: needs exactly {sorted(TEST_KEYS)} (the estimand in words)"
            )
    return out


def _tests(raw: dict) -> list[tuple[dict, str]]:
    return [(raw["primary"], "primary")] + [(t, "secondary") for t in raw.get("secondary") or []]


def _test_problems(key: tuple[str, str], by_name: dict[str, Suite]) -> list[str]:
    suite, claim = key
    if suite not in by_name:
        return [f"suite {suite!r} does not exist; built-in suites: {', '.join(sorted(by_name))}"]
    if not any(c.text == claim for c in by_name[suite].claims):
        return [f"suite {suite!r} has no claim {claim!r}"]
    if by_name[suite].purpose != "lecture":
        return [
            f"suite {suite!r} is a {by_name[suite].purpose} suite: its claims are not the lecture's"
        ]
    return []


def _marking_problems(
    listed: dict[tuple[str, str], tuple[str, str]],
    suites: list[Suite],
    ids: set[str],
    broken: set[object],
) -> list[str]:
    """The suites' `tests:` / `role:` against the index, both ways: one line per claim that
    disagrees (claims marked for an entry already reported are left to that entry's line)."""
    out = []
    for suite in suites:
        for c in suite.claims:
            key = (suite.name, c.text)
            if c.tests in broken:
                continue
            if key in listed:
                ident, role = listed[key]
                if (c.tests, c.role) != (ident, role):
                    out.append(
                        f"{ident!r}: {role} test {suite.name}: {c.text!r} states tests: "
                        f"{c.tests}, role: {c.role} in its suite file; the index lists it as "
                        f"{ident!r}'s {role} test"
                    )
            elif c.tests is not None or c.role is not None:
                where = f"{c.tests!r}" + ("" if c.tests in ids else " (not an id of the index)")
                out.append(
                    f"{suite.name}: {c.text!r} states tests: {c.tests}, role: {c.role}, but the "
                    f"index does not list it under {where}"
                )
    return out

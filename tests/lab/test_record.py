"""The verifier (archlab.lab.publishing.verify.verify): a copy of a published page whose claims.json
is edited by hand (a Holm p changed, an mde set to NaN, a row deleted) must be named line by line,
with the edited file's hash, and NaN equals only NaN."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from archlab.lab.publishing.record import CLAIMS, differences
from archlab.lab.publishing.verify import verify

PAGE = Path(__file__).resolve().parents[2] / "docs" / "results" / "ffn"
# p 0.032, Holm p 0.095 over the page's 4 claims: inconclusive
HOLM = "SwiGLU beats ReLU at equal parameters"
MDE = "GeGLU beats GeLU at equal parameters"  # confirmed, mde 0.053
GONE = "ReGLU beats ReLU at equal parameters"
HASHED = "record.sha256: claims.json changed since the record was hashed"  # any edit of claims.json


@pytest.fixture
def page(tmp_path: Path) -> Path:
    copy = tmp_path / "ffn"
    shutil.copytree(PAGE, copy)
    assert verify(copy) == []  # the copy verifies as published
    return copy


def _edit(page: Path, edit: dict[str, dict | None]) -> dict[str, dict]:
    """claims.json with each named claim's fields replaced (None: the row deleted); returns the
    rows as published."""
    path = page / CLAIMS
    rows = json.loads(path.read_text())
    old = {r["claim"]: dict(r) for r in rows}
    kept = []
    for r in rows:
        change = edit.get(r["claim"], {})
        if change is not None:
            kept.append({**r, **change})
    path.write_text(json.dumps(kept, indent=1))
    return old


def test_a_changed_holm_p_is_named(page: Path) -> None:
    # the outcome stays inconclusive either way: only Holm's p
    old = _edit(page, {HOLM: {"p_holm_suite": 0.2}})
    # Holm's third step: 3 x p, by hand
    assert old[HOLM]["p_holm_suite"] == pytest.approx(3 * old[HOLM]["p"])
    assert verify(page) == [
        f"{HOLM!r}: p_holm_suite 0.2 recomputed as {old[HOLM]['p_holm_suite']!r}",
        HASHED,
    ]


def test_an_mde_set_to_nan_is_named(page: Path) -> None:
    old = _edit(page, {MDE: {"mde": math.nan}})
    assert math.isfinite(old[MDE]["mde"])
    assert verify(page) == [f"{MDE!r}: mde nan recomputed as {old[MDE]['mde']!r}", HASHED]


def test_a_deleted_row_is_named(page: Path) -> None:
    _edit(page, {GONE: None})
    assert verify(page) == [f"{GONE!r}: recomputed but not in claims.json", HASHED]


def test_every_edit_of_one_page_is_named_once(page: Path) -> None:
    old = _edit(page, {HOLM: {"p_holm_suite": 0.2}, MDE: {"mde": math.nan}, GONE: None})
    assert sorted(verify(page)) == sorted(
        [
            f"{HOLM!r}: p_holm_suite 0.2 recomputed as {old[HOLM]['p_holm_suite']!r}",
            f"{MDE!r}: mde nan recomputed as {old[MDE]['mde']!r}",
            f"{GONE!r}: recomputed but not in claims.json",
            HASHED,
        ]
    )


def test_nan_equals_nan_and_no_number() -> None:
    """NaN against NaN is agreement (an untested claim has no p and no mde on either side); NaN
    against a number is a difference, whichever side holds the NaN."""
    row = {
        "claim": "c",
        "outcome": "inconclusive",
        "seeds_needed": None,
        "estimate": 0.01,
        "p": math.nan,
        "p_holm_suite": math.nan,
        "mde": math.nan,
        "shared_with": [],
    }
    assert differences([row], [dict(row)]) == []
    for key in ("estimate", "p", "p_holm_suite", "mde"):
        number = {**row, key: 0.5}
        nan = {**row, key: math.nan}
        assert differences([nan], [number]) == [f"'c': {key} nan recomputed as 0.5"], key
        assert differences([number], [nan]) == [f"'c': {key} 0.5 recomputed as nan"], key

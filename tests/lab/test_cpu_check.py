"""The cross-CPU check beside the sign-optimizer-embeddings page (its cpu-check/check.py) against
the page: its interval for the registered loss claim, from scipy on the page's results.csv, is the
one the lab's verdict code published in claims.json, and every figure the page's reading quotes
from the check is the one the check's files give. Both sides are read from committed files, so the
test holds on every CPU."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "results" / "sign-optimizer-embeddings"


@pytest.fixture(scope="module")
def figures() -> dict:
    spec = importlib.util.spec_from_file_location("cpu_check", PAGE / "cpu-check" / "check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.figures()


def test_its_interval_for_the_registered_claim_is_the_pages(figures: dict) -> None:
    claims = json.loads((PAGE / "claims.json").read_text(encoding="utf-8"))
    (lazy,) = [c for c in claims if c["claim"] == "lazy rows cost no loss"]
    mean, lo, hi = figures["intel_claim"]
    assert mean == pytest.approx(lazy["estimate"], rel=1e-12)
    assert [lo, hi] == pytest.approx(lazy["ci"], rel=1e-9)


def test_the_reading_quotes_the_checks_figures(figures: dict) -> None:
    reading = " ".join((PAGE / "reading.md").read_text(encoding="utf-8").split())
    cpu = np.abs(figures["cpu"])
    mean, lo, hi = figures["cpu_interval"]
    assert figures["tiger_same"] and figures["tiger_losses"] == 400
    assert "came back bit for bit (all 400 logged losses" in reading
    assert f"a median {np.median(cpu):.3f} nats per seed (up to {cpu.max():.3f})" in reading
    assert f"{mean:+.4f} on average, 90% CI {lo:+.3f} to {hi:+.3f}" in reading
    assert f"tiger's seeds spread {figures['tiger_spread']:.3f}" in reading
    amd_mean, _, amd_hi = figures["amd_claim"]
    assert f"lazy rows end {-amd_mean:.3f} nats below Tiger" in reading
    assert f"upper 90% bound of the deficit {amd_hi:+.3f}" in reading and amd_hi < 0.03
    assert figures["amd_shares"] == [0.0] * 8

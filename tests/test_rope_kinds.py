"""A RoPE scaling kind is one entry of ROPE_KINDS (nn/positions/scaling.py), and the three places
that evaluate kinds take every entry from there: `archlab eval length` (eval/rope_methods.py), the
lab's long-context measures (lab/measures/long_context.py) and `archlab plot rope` (plots.py).
Every kind goes through all three, and so does a toy kind registered at test time, without any of
those modules changing: its scaling at a length is `RopeKind.at`, its frequencies the function
its entry names."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from archlab import ModelConfig, TransformerLM
from archlab.cli import main
from archlab.eval.length import evaluate_lengths
from archlab.eval.rope_methods import method_scaling
from archlab.lab.measures import long_context
from archlab.nn.positions.frequencies import base_inv_freq
from archlab.nn.positions.scaling import ROPE_KINDS, RopeScaling, inference_kinds
from archlab.plots import plot_rope
from tests.fixtures.toy_rope_kind import CALLS, TOY
from tests.lab.test_long_context import Run, tiny

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setitem(ROPE_KINDS, TOY.name, TOY)
    CALLS.clear()
    return TOY.name


KINDS = [*ROPE_KINDS, TOY.name]


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setitem(ROPE_KINDS, TOY.name, TOY)
    return request.param


def test_the_toy_kind_is_a_config_value_and_builds_its_own_frequencies(toy: str) -> None:
    config = ModelConfig(
        d_model=32,
        n_heads=4,
        n_layers=1,
        max_seq_len=16,
        rope=dict(scaling={"kind": toy, "factor": 4}),
    )
    rotary = TransformerLM(config).rotary
    assert CALLS[-1] == RopeScaling(toy, 4.0)
    torch.testing.assert_close(rotary.inv_freq.double(), base_inv_freq(8, 10000.0) / 2.0)


def test_every_kind_reaches_eval_length(kind: str) -> None:
    entry = ROPE_KINDS[kind]
    # training-only (inverse Leaky ReRoPE): in eval mode plain RoPE, which `none` is
    if entry.evaluation is None:
        assert kind not in inference_kinds()
        with pytest.raises(ValueError, match=f"scaling '{kind}' is not allowed: one of none, "):
            method_scaling(kind, 64, 16)
        return
    assert kind in inference_kinds()
    assert method_scaling(kind, 64, 16) == entry.at(64, 16)
    model = tiny()
    tokens = np.random.default_rng(0).integers(0, 64, 400)
    results = evaluate_lengths(
        model, tokens, [16, 64], [kind], None, n_windows=2, allow_extrapolation=True, progress=False
    )
    assert [(r.method, r.length) for r in results] == [(kind, 16), (kind, 64)]
    assert all(np.isfinite(r.loss) and 0 <= r.accuracy <= 1 for r in results)


def test_every_kind_reaches_the_lab_long_context_measures(kind: str) -> None:
    names = long_context.measure_names()
    suffix = long_context.SUFFIXES.get(kind, kind)
    # the model as trained: acc_8x_plain itself
    if kind == "none" or ROPE_KINDS[kind].evaluation is None:
        assert not any(method == kind for _, _, method in names.values() if method != "none")
        return
    assert names[f"acc_8x_plain_{suffix}"] == (8, "plain", kind)
    run = Run(tiny(), np.random.default_rng(1).integers(0, 64, 600))
    config = long_context.inference_config(run.model.config, kind, 128)
    assert config.rope.scaling == ROPE_KINDS[kind].at(128, 16)
    hits = long_context.window_accuracies(run, 8, "plain", kind)
    assert len(hits) == run.windows and all(0 <= h <= 1 for h in hits)


def test_every_kind_reaches_plot_rope(kind: str, tmp_path: Path) -> None:
    out = tmp_path / "rope.png"
    if ROPE_KINDS[kind].evaluation is None:
        with pytest.raises(ValueError, match=f"scaling '{kind}' is not allowed"):
            plot_rope(16, 10000.0, [kind], 4.0, 64, 32, out)
        return
    CALLS.clear()
    assert plot_rope(16, 10000.0, [kind], 4.0, 64, 32, out).read_bytes()[:4] == b"\x89PNG"
    # a static kind: its wavelengths are drawn from its own function at factor 4
    if kind == TOY.name:
        assert CALLS == [RopeScaling(kind, 4.0)]


def test_the_toy_kind_is_on_the_command_lines(
    toy: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    assert (
        main(
            [
                "plot",
                "rope",
                "--scalings",
                f"none,{toy}",
                "--head-dim",
                "16",
                "--train-len",
                "64",
                "--out",
                str(tmp_path / "rope.png"),
            ]
        )
        == 0
    )
    assert (
        main(["eval", "length", "--checkpoint", str(tmp_path / "missing"), "--scalings", "nope"])
        == 2
    )
    # the choices listed, the toy among them
    assert f", {toy} (comma-separated)" in capsys.readouterr().err


def test_a_kind_registered_at_import_is_a_lab_measure() -> None:
    """The lab's MEASURES table is built when lab/measures/measure.py is imported, from the kinds
    registered then (a real kind is registered in nn/positions/scaling.py, before anything imports
    it): in a fresh interpreter the toy kind, registered first, is a measure the suites can name."""
    script = (
        "from archlab.nn.positions.scaling import ROPE_KINDS\nfrom "
        "tests.fixtures.toy_rope_kind import TOY\n"
        "ROPE_KINDS[TOY.name] = TOY\nfrom archlab.lab.measures.measure import MEASURES\n"
        "print(sorted(n for n in MEASURES if 'toy' in n))"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["['acc_8x_plain_toy_sqrt',", "'acc_8x_repeated_toy_sqrt']"]

"""Which RoPE methods are duplicates at the lengths asked (eval/same_positions.py): decided from the
attention scores the position encodings give, checked here against the real model's logits under
each method's config (a duplicate gives the logits of the method it duplicates at every length; a
kept method differs from every earlier kept one at some length), for lengths inside and past the
training length, a model with its own ReRoPE window, and kinds registered under new names (the
decision follows their encodings, never their names)."""

from __future__ import annotations

import pytest
import torch

from archlab.checkpoint import build_model
from archlab.eval.rope_methods import applicable_methods, method_configs
from archlab.eval.same_positions import duplicate_methods, position_scores, same_scores
from archlab.nn.config import ModelConfig
from archlab.nn.model import TransformerLM
from archlab.nn.positions.scaling import FORMULAS, ROPE_KINDS, RopeKind
from archlab.nn.presets import build_preset
from tests.conftest import randomize_

BASE = dict(d_model=32, n_heads=4, n_kv_heads=2, n_layers=2, max_seq_len=32, vocab_size=256)


def logits_by_method(
    model: TransformerLM, configs: dict, methods: list[str], lengths: list[int]
) -> dict:
    """The reference: each method's logits over a random sequence at each length, from
    the real model."""
    gen = torch.Generator().manual_seed(0)
    ids = {n: torch.randint(0, model.config.vocab_size, (1, n), generator=gen) for n in lengths}
    state = model.state_dict()
    with torch.no_grad():
        return {
            (m, n): build_model(configs[m, n], state).eval()(ids[n])[0].double()
            for m in methods
            for n in lengths
        }


def same_logits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal up to float32 rounding of another kernel path: ReRoPE inside its window computes
    RoPE's scores through its own two score matrices (no SDPA), 5e-6 to 1.1e-5 off on logits of
    about 12 here (AVX2 and AVX-512 CPUs), where a kept method differs by 1.8 or more."""
    return torch.allclose(a, b, rtol=0, atol=1e-4)


def check_against_logits(
    config: ModelConfig, methods: list[str], lengths: list[int], extrapolate: bool
) -> dict:
    model = randomize_(TransformerLM(config), 0.5).eval()
    configs = method_configs(config, methods, lengths, None, extrapolate)
    twins = duplicate_methods(configs, methods, lengths)
    logits = logits_by_method(model, configs, methods, lengths)
    kept = [m for m in methods if m not in twins]
    assert kept[0] == methods[0]
    for method, twin in twins.items():
        assert methods.index(twin) < methods.index(method) and twin in kept
        assert all(same_logits(logits[method, n], logits[twin, n]) for n in lengths), (method, twin)
    for i, method in enumerate(kept):
        for earlier in kept[:i]:
            assert any(not same_logits(logits[method, n], logits[earlier, n]) for n in lengths), (
                method,
                earlier,
            )
            # a real difference, not rounding
            assert max((logits[method, n] - logits[earlier, n]).abs().max() for n in lengths) > 1e-3
    return twins


FACTORS = ["linear", "ntk", "ntk_by_parts", "dynamic", "yarn", "llama3", "ntk_mixed"]


@pytest.mark.parametrize(
    ("lengths", "extrapolate", "expected"),
    [
        # rerope's W = 16: every distance < 16 is exact
        ([8, 16], False, [*FACTORS[:-1], "rerope", "ntk_mixed"]),
        # at 32 ReRoPE caps distances past 16; Leaky ReRoPE (W = 8) already at 16
        ([8, 16, 32], False, FACTORS),
        ([16, 64], True, []),  # past the training length every schedule stretches in its own way
    ],
    ids=["inside-half", "inside", "past"],
)
def test_duplicates_give_the_same_logits_and_kept_methods_different_ones(
    lengths: list[int], extrapolate: bool, expected: list[str]
) -> None:
    config = ModelConfig(**BASE)
    methods = applicable_methods(config)
    assert len(methods) == 10
    twins = check_against_logits(config, methods, lengths, extrapolate)
    assert sorted(twins) == sorted(expected) and set(twins.values()) <= {"none"}


def test_a_model_with_its_own_rerope_window_and_window_layers() -> None:
    """hwfa2: window layers with RoPE, full layers decoding with ReRoPE at the model's own window
    (32 = the training length, so every distance is exact); the probe reads every kind of layer
    with its masks."""
    config = build_preset(
        "hwfa2", "tiny", max_seq_len=32, vocab_size=256, rope=dict(scaling={"window": 32})
    )
    methods = applicable_methods(config)
    twins = check_against_logits(config, methods, [16, 32], False)
    assert "rerope" in twins and "leaky_rerope" not in twins


def toy_kinds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two kinds under new names: `stretched` is linear's schedule under another name; `doubled`
    always applies factor 2, whatever the length."""
    monkeypatch.setitem(ROPE_KINDS, "stretched", RopeKind("stretched", f"{FORMULAS}:linear"))
    monkeypatch.setitem(
        ROPE_KINDS,
        "doubled",
        RopeKind(
            "doubled",
            f"{FORMULAS}:linear",
            evaluation=lambda length, train, window, k: {"factor": 2.0},
        ),
    )


@pytest.mark.parametrize(
    ("lengths", "extrapolate", "twin_of_stretched"),
    [([8, 32], False, "none"), ([32, 64], True, "linear")],
)
def test_new_kinds_are_judged_by_their_encodings_not_their_names(
    lengths: list[int], extrapolate: bool, twin_of_stretched: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    toy_kinds(monkeypatch)
    config = ModelConfig(**BASE)
    methods = ["none", "linear", "stretched", "doubled"]
    twins = check_against_logits(config, methods, lengths, extrapolate)
    assert twins.get("stretched") == twin_of_stretched and "doubled" not in twins


def test_the_probe_scores_visible_pairs_only_and_compares_within_rounding() -> None:
    config = ModelConfig(**BASE, sliding_window=8)
    (scores,) = position_scores(config, 32)
    rows = torch.linspace(0, 31, 8).round().long()
    visible = (torch.arange(32)[None] <= rows[:, None]) & (
        rows[:, None] - torch.arange(32)[None] < 8
    )
    assert torch.equal(~scores.isnan(), visible)  # the causal window: 8 keys at most
    nudged = [s * (1 + 5e-7) for s in [scores]]  # rounding-sized: the same
    assert same_scores([scores], nudged) and not same_scores(
        [scores], [s * (1 + 1e-4) for s in [scores]]
    )
    assert not same_scores([scores], [scores, scores])  # another set of layer kinds

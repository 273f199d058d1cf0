"""Optimizers: weight-decay groups by name, AdamW parity with torch, Lion/Tiger against
hand-computed float64 steps, global-norm clipping, and the trainer's loss terms (cross
entropy + z-loss)."""

from __future__ import annotations

import copy
import math
import re

import pytest
import torch

from archlab import TransformerLM, build_preset
from archlab.train import sign_optim
from archlab.train.optim import (
    Lion,
    Tiger,
    build_optimizer,
    clip_gradients,
    param_groups,
    split_param_names,
)
from archlab.train.sections import OptimizerConfig

LINEAR_WEIGHTS = (
    "qkv_proj.weight",
    "o_proj.weight",
    "gate_up_proj.weight",
    "up_proj.weight",
    "down_proj.weight",
)


def tiny(preset: str, **overrides: object) -> TransformerLM:
    torch.manual_seed(0)
    return TransformerLM(
        build_preset(preset, "tiny", d_model=32, n_layers=2, vocab_size=64, **overrides)
    )


def expected_split(model: TransformerLM, decay_embeddings: bool) -> tuple[set[str], set[str]]:
    """The intended groups, written from the parameter names alone."""
    # the tied head appears once, as embed_tokens.weight
    names = set(dict(model.named_parameters()))
    decay = {n for n in names if n.endswith(LINEAR_WEIGHTS) or n == "lm_head.weight"}
    if decay_embeddings:
        decay |= {
            n for n in names if n in ("embed_tokens.weight", "pos_embed.weight", "rel_bias.weight")
        }
    return decay, names - decay


@pytest.mark.parametrize("preset", ["llama", "gpt2", "gemma2", "olmo2", "original"])
@pytest.mark.parametrize("decay_embeddings", [False, True])
def test_decay_groups_hold_exactly_the_matrices(preset: str, decay_embeddings: bool) -> None:
    model = tiny(preset)
    split = split_param_names(model, decay_embeddings)
    want_decay, want_rest = expected_split(model, decay_embeddings)
    assert set(split.decay) == want_decay
    assert set(split.no_decay) == want_rest
    # nothing listed twice
    assert len(split.decay) + len(split.no_decay) == len(want_decay | want_rest)


def test_tied_head_counted_once_and_learned_positions_are_embeddings() -> None:
    model = tiny("gpt2")  # tied head, learned positions, biases, LayerNorm
    assert model.lm_head.weight is model.embed_tokens.weight
    groups = param_groups(model, weight_decay=0.1)
    params = [p for g in groups for p in g["params"]]
    assert len({id(p) for p in params}) == len(params)
    assert sum(p.numel() for p in params) == model.num_parameters()
    split = split_param_names(model)
    assert "lm_head.weight" not in split.decay + split.no_decay
    assert {"embed_tokens.weight", "pos_embed.weight"} <= set(split.no_decay)
    assert all(n.endswith(".bias") or "norm" in n or "embed" in n for n in split.no_decay)


def test_relative_position_table_counts_as_embedding() -> None:
    model = tiny("llama", position="relative")
    assert "rel_bias.weight" in split_param_names(model).no_decay
    assert "rel_bias.weight" in split_param_names(model, decay_embeddings=True).decay


def test_adamw_matches_torch_adamw_with_the_same_groups() -> None:
    ours_model = tiny("llama")
    ref_model = copy.deepcopy(ours_model)
    ours = build_optimizer(ours_model, OptimizerConfig(name="adamw", lr=1e-2, weight_decay=0.1))
    assert isinstance(ours, torch.optim.AdamW)
    assert ours.defaults["betas"] == (0.9, 0.95)
    # the fast path is the one checked against torch's reference loop below
    assert ours.defaults["fused"]
    decay, rest = expected_split(ref_model, decay_embeddings=False)
    by_name = dict(ref_model.named_parameters())
    ref = torch.optim.AdamW(
        [
            {
                "params": [by_name[n] for n in dict(ours_model.named_parameters()) if n in decay],
                "weight_decay": 0.1,
            },
            {
                "params": [by_name[n] for n in dict(ours_model.named_parameters()) if n in rest],
                "weight_decay": 0.0,
            },
        ],
        lr=1e-2,
        betas=(0.9, 0.95),
        eps=1e-8,
        foreach=False,
    )
    assert [(g["kind"], g["weight_decay"]) for g in ours.param_groups] == [
        ("matrices", 0.1),
        ("tables", 0.0),
        ("gains", 0.0),
    ]
    x = torch.randint(0, 64, (2, 16))
    for _ in range(3):  # the same gradients for both, so rounding differences cannot feed back
        ours_model(x).logsumexp(-1).mean().backward()
        for a, b in zip(ours_model.parameters(), ref_model.parameters()):
            b.grad = a.grad.clone()
        for opt in (ours, ref):
            opt.step()
            opt.zero_grad()
    for (name, a), b in zip(ours_model.named_parameters(), ref_model.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7, msg=name)


def two_params() -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(1)
    return [
        torch.nn.Parameter(torch.randn(4, 3, generator=gen, dtype=torch.float64)),
        torch.nn.Parameter(torch.randn(5, generator=gen, dtype=torch.float64)),
    ]


def sign_reference(
    p: list[torch.Tensor],
    grads: list[list[torch.Tensor]],
    lr: float,
    wd: float,
    b1: float,
    b2: float,
) -> list[torch.Tensor]:
    """Lion, Algorithm 2 of arXiv 2302.06675, step by step in float64 (Tiger: b1 == b2)."""
    p = [t.detach().clone() for t in p]
    m = [torch.zeros_like(t) for t in p]
    for step_grads in grads:
        for i, g in enumerate(step_grads):
            c = b1 * m[i] + (1 - b1) * g
            p[i] = p[i] - lr * (torch.sign(c) + wd * p[i])
            m[i] = b2 * m[i] + (1 - b2) * g
    return p


@pytest.mark.parametrize("foreach", [True, False])
@pytest.mark.parametrize("kind", ["lion", "tiger"])
def test_lion_and_tiger_match_their_update_equations(
    kind: str, foreach: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sign_optim, "_use_foreach", lambda params: foreach)
    params = two_params()
    gen = torch.Generator().manual_seed(2)
    grads = [
        [torch.randn(p.shape, generator=gen, dtype=torch.float64) for p in params] for _ in range(3)
    ]
    lr, wd = 0.01, 0.3
    if kind == "lion":
        opt, b1, b2 = Lion(params, lr=lr, betas=(0.9, 0.99), weight_decay=wd), 0.9, 0.99
    else:
        # archlab's flat form
        opt = Tiger(params, lr=lr, beta=0.945, weight_decay=wd, rms_lr=False, nan_shrink=1.0)
        b1 = b2 = 0.945
    want = sign_reference(params, grads, lr, wd, b1, b2)
    for step_grads in grads:
        for p, g in zip(params, step_grads):
            p.grad = g.clone()
        opt.step()
    for got, ref in zip(params, want):
        torch.testing.assert_close(got.detach(), ref, rtol=1e-13, atol=1e-13)


def test_tiger_default_beta_and_built_by_name() -> None:
    opt = build_optimizer(tiny("llama"), OptimizerConfig(name="tiger", lr=1e-4))
    assert isinstance(opt, Tiger)
    # the NLP value of kexue.fm/archives/9512 and bojone/tiger
    assert opt.defaults["betas"] == (0.965, 0.965)
    assert opt.defaults["rms_lr"] and opt.defaults["nan_shrink"] == 0.99
    assert [(g["kind"], g["weight_decay"]) for g in opt.param_groups] == [
        ("matrices", 0.1),
        ("tables", 0.0),
        ("gains", 0.0),
    ]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": "sgdx"}, "optimizer.name='sgdx' is not allowed: one of adamw, lion, tiger"),
        ({"lr": -1.0}, "optimizer.lr=-1.0 is not allowed: a learning rate >= 0"),
        (
            {"name": "tiger", "betas": (0.9, 0.99)},
            "optimizer.betas=[0.9, 0.99] is not allowed: 1 value(s) in [0, 1) for tiger",
        ),
        (
            {"name": "lion", "betas": (0.9,)},
            "optimizer.betas=[0.9] is not allowed: 2 value(s) in [0, 1) for lion",
        ),
    ],
)
def test_bad_optimizer_arguments_are_named(kwargs: dict, message: str) -> None:
    """The section refuses what `build_optimizer` would be given, before a model is touched."""
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        build_optimizer(tiny("llama"), OptimizerConfig(**kwargs))


@pytest.mark.parametrize("name", ["tiger", "lion"])
def test_the_optimizers_own_betas_check_stays_for_direct_callers(name: str) -> None:
    """The builders behind the registry still refuse a wrong count of betas, for callers that
    skip the section."""
    from archlab.train.variants import OPTIMIZERS

    with pytest.raises(ValueError, match=f"{name} takes"):
        OPTIMIZERS[name].build_function()(
            param_groups(tiny("llama"), 0.1), 1e-3, (0.9, 0.99, 0.999), 1e-8
        )


def test_clipping_gives_the_exact_global_norm() -> None:
    params = [torch.nn.Parameter(torch.zeros(s)) for s in ((7, 5), (5,), (3, 2, 2))]
    gen = torch.Generator().manual_seed(3)
    grads = [torch.randn(p.shape, generator=gen) * 3 for p in params]
    for p, g in zip(params, grads):
        p.grad = g.clone()
    want = math.sqrt(sum(float(g.double().square().sum()) for g in grads))  # float64 by hand
    norm = clip_gradients(params, 1.0)
    assert norm == pytest.approx(want, rel=1e-6)
    after = math.sqrt(sum(float(p.grad.double().square().sum()) for p in params))
    assert after == pytest.approx(1.0, rel=1e-5)
    for p, g in zip(params, grads):  # one common factor: directions are kept
        torch.testing.assert_close(p.grad, g * (1.0 / (want + 1e-6)), rtol=1e-5, atol=1e-7)


def test_clipping_leaves_small_gradients_and_zero_turns_it_off() -> None:
    p = torch.nn.Parameter(torch.zeros(3))
    p.grad = torch.tensor([0.3, 0.4, 0.0])
    assert clip_gradients([p], 1.0) == pytest.approx(0.5)
    assert torch.equal(p.grad, torch.tensor([0.3, 0.4, 0.0]))
    p.grad = torch.tensor([30.0, 40.0, 0.0])
    assert clip_gradients([p], 0.0) == pytest.approx(50.0)
    assert torch.equal(p.grad, torch.tensor([30.0, 40.0, 0.0]))

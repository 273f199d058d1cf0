"""Inverse Leaky ReRoPE (Su, "Transformer upgrade 13", kexue.fm/archives/9728; nn/positions/rope.py,
nn/positions/rerope.py): in training mode attention equals a float64 reference that rotates each
pair (m, n) by P = m - n inside the window and W + (m - n - W) s beyond it; in eval mode the same
weights are plain RoPE (SDPA, rotated keys in the cache, cached decoding equal to the full forward);
inside the window training and eval agree."""

from __future__ import annotations

import pytest
import torch

from archlab import KVCache, ModelConfig, RopeScaling, TransformerLM
from archlab.interop.family import InteropError
from archlab.interop.hf_rope import rope_to_hf
from archlab.nn.attention import kernels as attention_kernels
from archlab.nn.positions.rerope import relative_positions
from archlab.nn.positions.rope import RopePositions
from tests.nn.positions.test_rerope import SMALL, VOCAB, reference_attention, reference_positions
from tests.nn.test_kv_cache import cached_logits

W, S, N = 6, 3.0, SMALL["max_seq_len"]  # window, training slope, training length
INV = RopeScaling("inv_leaky_rerope", S, window=W)


def tiny(**fields: object) -> TransformerLM:
    torch.manual_seed(0)
    return TransformerLM(ModelConfig(**{**SMALL, **fields}))


def ids(length: int = N, batch: int = 2, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def test_relative_positions_grow_by_s_beyond_the_window() -> None:
    """Su's P(d) = d for d < W, W + (d - W) s beyond: relative_positions with factor 1/s, per
    pair in float64."""
    pos = torch.arange(N)[None]
    torch.testing.assert_close(
        relative_positions(pos, pos, W, 1 / S)[0].tril(), reference_positions(N, W, S)
    )
    assert relative_positions(pos, pos, W, 1 / S)[0, N - 1, 0] == W + (N - 1 - W) * S


@pytest.mark.parametrize(
    "layout,fraction,kv", [("half", 1.0, 4), ("interleaved", 0.5, 2), ("half", 0.5, 1)]
)
def test_training_mode_scores_equal_the_float64_reference(
    layout: str, fraction: float, kv: int
) -> None:
    model = tiny(rope=dict(scaling=INV, layout=layout, fraction=fraction), n_kv_heads=kv).train()
    x = torch.randn(2, N, 32, dtype=torch.float32)
    inputs = model.attention_inputs(torch.arange(N).expand(2, N))[0]
    assert inputs.rope.computes_scores  # two score matrices: the eager kernel
    with torch.no_grad():
        got = model.layers[0].attn(x, inputs)
    c, attn = model.config, model.layers[0].attn
    want = reference_attention(
        attn, x, reference_positions(N, W, S), c.rope_dim, layout, c.rope.theta
    )
    torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-5)
    plain = reference_attention(
        attn, x, reference_positions(N, N, 0.0), c.rope_dim, layout, c.rope.theta
    )
    assert (got.double() - plain).abs().max() > 1e-3  # W <= d < N: different by design


def test_eval_mode_is_plain_rope_with_sdpa_and_the_rotated_key_cache(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model, plain = (
        tiny(rope=dict(scaling=INV), attn_impl="sdpa").eval(),
        tiny(attn_impl="sdpa").eval(),
    )
    plan = model.attention_inputs(torch.arange(4)[None])[0].rope
    assert (
        isinstance(plan, RopePositions)
        and not plan.computes_scores
        and not plan.rotates_cached_keys
    )
    calls = {"sdpa": 0, "eager": 0}
    real_sdpa = attention_kernels.F.scaled_dot_product_attention
    # the eager kernel's softmax (any path to it)
    real_eager = attention_kernels.attention_from_scores

    def count(name: str, fn):  # noqa: ANN001, ANN202
        def wrapped(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            calls[name] += 1
            return fn(*args, **kwargs)

        return wrapped

    monkeypatch.setattr(
        attention_kernels.F, "scaled_dot_product_attention", count("sdpa", real_sdpa)
    )
    monkeypatch.setattr(attention_kernels, "attention_from_scores", count("eager", real_eager))
    x = ids(length=2 * N)  # past the training length too: eval mode is plain RoPE everywhere
    with torch.no_grad():
        full = model(x)
        torch.testing.assert_close(full, plain(x), rtol=0, atol=0)
        torch.testing.assert_close(cached_logits(model, x, (5,)), full, rtol=1e-5, atol=1e-5)
    assert calls["eager"] == 0 and calls["sdpa"] > 0
    model.train()
    with torch.no_grad():
        model(ids())
    assert calls["eager"] == SMALL["n_layers"]  # training mode: the two-matrix plan, never SDPA


def test_inside_the_window_training_and_eval_agree() -> None:
    model = tiny(rope=dict(scaling=INV))
    with torch.no_grad():
        short_train, long_train = model.train()(ids(W)), model(ids())
        short_eval, long_eval = model.eval()(ids(W)), model(ids())
    torch.testing.assert_close(short_train, short_eval, rtol=0, atol=1e-6)
    assert (long_train - long_eval).abs().max() > 1e-3


def test_gradients_flow_through_the_training_plan() -> None:
    model = tiny(rope=dict(scaling=INV)).train()
    loss = model(ids()).logsumexp(-1).mean()
    loss.backward()
    assert all(
        p.grad is not None and torch.isfinite(p.grad).all()
        for p in model.parameters()
        if p.requires_grad
    )


@pytest.mark.parametrize(
    "fields,message",
    [
        (
            dict(rope=dict(scaling={"kind": "inv_leaky_rerope", "factor": 1.0, "window": W})),
            "factor=1.0",
        ),
        (
            dict(rope=dict(scaling={"kind": "inv_leaky_rerope", "factor": 0.5, "window": W})),
            "factor=0.5",
        ),
        (
            dict(rope=dict(scaling={"kind": "inv_leaky_rerope", "factor": 2.0, "window": N})),
            f"window={N}",
        ),
        (dict(rope=dict(scaling={"kind": "inv_leaky_rerope", "factor": 2.0})), "window=None"),
        (
            dict(
                rope=dict(scaling={"kind": "inv_leaky_rerope", "factor": 2.0, "window": W}),
                attn_kernel="favor",
            ),
            "inv_leaky_rerope",
        ),
    ],
)
def test_bad_configs_fail_in_one_line(fields: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message) as err:
        ModelConfig(**{**SMALL, **fields})
    assert "\n" not in str(err.value)


def test_hf_export_refuses_it_in_one_line() -> None:
    with pytest.raises(
        InteropError, match="inv_leaky_rerope.*transformers has no inverse Leaky ReRoPE"
    ) as err:
        rope_to_hf(INV, 10000.0, 8)
    assert "\n" not in str(err.value)


def test_context_limit_is_the_longest_trained_distance() -> None:
    """Plain RoPE at inference covers the distances training reached: W + (N - 1 - W) s
    + 1 tokens."""
    assert ModelConfig(**SMALL, rope=dict(scaling=INV)).context_limit == W + 1 + int(
        S * (N - 1 - W)
    )


@pytest.mark.parametrize("first,then", [("train", "eval"), ("eval", "train")])
def test_a_cache_filled_in_one_mode_is_refused_in_the_other(first: str, then: str) -> None:
    """Training mode caches unrotated keys (the remap rotates them per query), eval mode rotated
    ones: continuing a cache in the other mode would read one as the other (0.28 in the logits
    before the guard), so it is refused in one line before anything is written; a cache rewound to 0
    starts afresh in either mode."""
    model = tiny(rope=dict(scaling=INV))
    x = ids(length=N, batch=1)
    cache = KVCache.for_model(model, 1, N)
    with torch.no_grad():
        getattr(model, first)()(x[:, : N - 4], cache=cache)
        mode = {"train": "training", "eval": "eval"}
        with pytest.raises(
            ValueError,
            match=f"filled in {mode[first]} mode and is continued in {mode[then]} mode.*"
            "'inv_leaky_rerope' remaps positions in training mode only",
        ) as err:
            getattr(model, then)()(x[:, N - 4 : N - 3], cache=cache)
        # refused before any slot was written
        assert "\n" not in str(err.value) and cache.pos == N - 4
        cache.rewind(0)
        torch.testing.assert_close(model(x, cache=cache), model(x), rtol=1e-5, atol=1e-5)


def test_cached_decoding_in_training_mode_equals_its_full_forward() -> None:
    """A cache kept in training mode (no dropout) decodes through the remap, as the
    full training forward."""
    model = tiny(rope=dict(scaling=INV)).train()
    x = ids()
    with torch.no_grad():
        torch.testing.assert_close(cached_logits(model, x, (5,)), model(x), rtol=1e-5, atol=1e-5)


def test_a_model_whose_positions_do_not_depend_on_the_mode_may_switch() -> None:
    """Plain RoPE (and a remap in both modes) caches the same keys in either mode: no
    refusal, same logits."""
    for scaling in (None, RopeScaling("leaky_rerope", 2.0, window=W)):
        model = tiny(rope=dict(scaling=scaling))
        assert not model.mode_dependent_rotaries
        x = ids(length=N, batch=1)
        cache = KVCache.for_model(model, 1, N)
        with torch.no_grad():
            model.train()(x[:, :8], cache=cache)
            out = model.eval()(x[:, 8:], cache=cache)
            torch.testing.assert_close(out, model(x)[:, 8:], rtol=1e-5, atol=1e-5)

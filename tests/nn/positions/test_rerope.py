"""ReRoPE and Leaky ReRoPE (nn/positions/rerope.py): attention equals a float64 reference that
builds the clipped (leaky) relative-position matrix and rotates each pair (m, n) by it; inside the
window it is plain RoPE; the KV cache (chunked prefill, one-token steps, rings, padding) equals the
full forward past the window."""

from __future__ import annotations

import math

import pytest
import torch

from archlab import KVCache, ModelConfig, RopeScaling, TransformerLM
from archlab.infer.generate import left_pad
from archlab.nn.attention import kernels as attention_kernels
from archlab.nn.functional import softmax
from archlab.nn.positions.frequencies import base_inv_freq
from archlab.nn.positions.rerope import ReRopePositions, relative_positions
from tests.nn.test_kv_cache import cached_logits

VOCAB, T, W = 64, 24, 6
SMALL = dict(d_model=32, n_heads=4, n_layers=2, max_seq_len=16, vocab_size=VOCAB, attn_impl="eager")
KINDS = [RopeScaling("rerope", window=W), RopeScaling("leaky_rerope", 3.0, window=W)]
TOL = dict(rtol=1e-5, atol=1e-5)


def tiny(**fields: object) -> TransformerLM:
    torch.manual_seed(0)
    return TransformerLM(ModelConfig(**{**SMALL, **fields})).eval()


def ids(batch: int = 2, length: int = T, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def reference_positions(t: int, window: int, slope: float) -> torch.Tensor:
    """P[m, n] written out per pair, slope = 1/k (0 for ReRoPE)."""
    P = torch.zeros(t, t, dtype=torch.float64)
    for m in range(t):
        for n in range(m + 1):
            P[m, n] = m - n if m - n < window else window + (m - n - window) * slope
    return P


def test_relative_positions_clip_and_leak() -> None:
    pos = torch.arange(10)[None]
    torch.testing.assert_close(
        relative_positions(pos, pos, 4, math.inf)[0].tril(), reference_positions(10, 4, 0.0)
    )
    torch.testing.assert_close(
        relative_positions(pos, pos, 4, 2.0)[0].tril(), reference_positions(10, 4, 0.5)
    )
    assert relative_positions(pos, pos, 4, 2.0)[0, 9, 0] == 4 + (9 - 4) / 2


def reference_attention(
    attn: torch.nn.Module, x: torch.Tensor, P: torch.Tensor, d_rot: int, layout: str, theta: float
) -> torch.Tensor:
    """One attention layer in float64: score(m, n) = sum over rotation pairs of Re(z_q conj(z_k)
    e^{i P w}) plus the dot product of the dims that do not rotate, causal softmax, @ v, o_proj. No
    archlab RoPE code."""
    B, t, _ = x.shape
    H, K, Dh = attn.n_heads, attn.n_kv_heads, attn.head_dim
    w_q = attn.qkv_proj.weight.double()
    q, k, v = (x.double() @ w_q.T).view(B, t, H + 2 * K, Dh).split([H, K, K], dim=2)
    k, v = k.repeat_interleave(H // K, dim=2), v.repeat_interleave(H // K, dim=2)
    half = d_rot // 2
    a, b = (
        (torch.arange(half), torch.arange(half) + half)
        if layout == "half"
        else (torch.arange(0, d_rot, 2), torch.arange(1, d_rot, 2))
    )
    zq = torch.complex(q[..., a], q[..., b])  # (B, T, H, d_rot/2)
    zk = torch.complex(k[..., a], k[..., b])
    w = theta ** (-torch.arange(0, d_rot, 2, dtype=torch.float64) / d_rot)
    phase = torch.exp(1j * P[..., None] * w)  # (T, S, d_rot/2)
    rot = torch.einsum("bmhi,bnhi,mni->bhmn", zq, zk.conj(), phase).real
    rest = torch.einsum("bmhd,bnhd->bhmn", q[..., d_rot:], k[..., d_rot:])
    scores = (rot + rest) * attn.scale
    scores = scores.masked_fill(~torch.ones(t, t, dtype=torch.bool).tril(), float("-inf"))
    y = softmax(scores) @ v.transpose(1, 2)  # (B, H, T, Dh)
    return y.transpose(1, 2).reshape(B, t, H * Dh) @ attn.o_proj.weight.double().T


@pytest.mark.parametrize("scaling", KINDS, ids=lambda s: s.kind)
@pytest.mark.parametrize(
    "layout,fraction,kv",
    [("half", 1.0, 4), ("interleaved", 1.0, 2), ("half", 0.5, 1), ("interleaved", 0.5, 4)],
)
@pytest.mark.parametrize("chunk", [None, 5], ids=["one-pass", "query-chunks"])
def test_attention_equals_the_float64_reference(
    scaling: RopeScaling,
    layout: str,
    fraction: float,
    kv: int,
    chunk: int | None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if chunk is not None:  # the eager kernel scores T = 24 queries in chunks of 5 (the last one 4)
        monkeypatch.setattr(attention_kernels, "SCORE_CHUNK", chunk)
    model = tiny(rope=dict(scaling=scaling, layout=layout, fraction=fraction), n_kv_heads=kv)
    x = torch.randn(2, T, 32)
    inputs = model.attention_inputs(torch.arange(T).expand(2, T))[0]
    with torch.no_grad():
        got = model.layers[0].attn(x, inputs)
    slope = 0.0 if scaling.kind == "rerope" else 1 / scaling.factor
    c = model.config
    want = reference_attention(
        model.layers[0].attn, x, reference_positions(T, W, slope), c.rope_dim, layout, c.rope.theta
    )
    torch.testing.assert_close(got.double(), want, rtol=1e-4, atol=1e-5)
    plain = reference_attention(
        model.layers[0].attn, x, reference_positions(T, T, 0.0), c.rope_dim, layout, c.rope.theta
    )
    assert (got.double() - plain).abs().max() > 1e-3  # past the window it is not plain RoPE


@pytest.mark.parametrize("scaling", KINDS, ids=lambda s: s.kind)
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_inside_the_window_it_is_plain_rope(scaling: RopeScaling, layout: str) -> None:
    model, plain = tiny(rope=dict(scaling=scaling, layout=layout)), tiny(rope=dict(layout=layout))
    with torch.no_grad():
        torch.testing.assert_close(model(ids(length=W)), plain(ids(length=W)), rtol=0, atol=1e-6)
        assert (model(ids()) - plain(ids())).abs().max() > 1e-3


@pytest.mark.parametrize("scaling", KINDS, ids=lambda s: s.kind)
@pytest.mark.parametrize(
    "fields",
    [
        dict(),
        dict(rope=dict(layout="interleaved")),
        dict(rope=dict(fraction=0.5), n_kv_heads=2),
        dict(sliding_window=9, window_pattern="SF"),
        dict(attn_impl="sdpa"),
    ],
    ids=lambda f: "-".join(f"{k}={v}" for k, v in f.items()) or "default",
)
def test_cached_decoding_equals_the_full_forward_past_the_window(
    scaling: RopeScaling, fields: dict
) -> None:
    model = tiny(**{**fields, "rope": {**fields.get("rope", {}), "scaling": scaling}})
    x = ids()
    with torch.no_grad():
        full = model(x)
    # steps and chunks past the window (W = 6) and past the ring (9)
    for chunks in [(3,), (4, 5), (10, 7)]:
        torch.testing.assert_close(cached_logits(model, x, chunks), full, **TOL)


@pytest.mark.parametrize(
    "fields",
    [
        dict(rope=dict(scaling=KINDS[0]), n_kv_heads=2),
        dict(rope=dict(scaling=KINDS[1])),
        dict(rope=dict(scaling=KINDS[0]), block="gau", n_heads=1),
        dict(rope=dict(scaling=RopeScaling("inv_leaky_rerope", 4.0, window=W)), train=True),
    ],
    ids=["rerope-gqa", "leaky", "rerope-gau", "inv-leaky-training"],
)
def test_query_chunks_equal_one_pass(fields: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """Plan-scored attention over more queries than SCORE_CHUNK is scored chunk by chunk, each chunk
    over the keys up to its last query under the plain causal mask: the logits equal one pass,
    prefill and cache alike."""
    train = fields.pop("train", False)
    model = tiny(**fields).train(train)
    x = ids()
    with torch.no_grad():
        whole = model(x)
    assert T < attention_kernels.SCORE_CHUNK  # the one pass above was one pass
    calls, rows = [], ReRopePositions.rows
    monkeypatch.setattr(
        ReRopePositions,
        "rows",
        lambda self, a, b, keys: calls.append((a, b, keys)) or rows(self, a, b, keys),
    )
    monkeypatch.setattr(attention_kernels, "SCORE_CHUNK", 5)
    with torch.no_grad():
        torch.testing.assert_close(model(x), whole, **TOL)
    layers = model.config.n_layers
    # keys stop at the chunk
    assert calls == [(a, min(a + 5, T), min(a + 5, T)) for a in range(0, T, 5)] * layers
    # prefill 10 (causal: keys truncated), then 14 queries at offset 10 under the cache's mask
    if not train:
        calls.clear()
        torch.testing.assert_close(cached_logits(model, x, (10, 14)), whole, **TOL)
        assert (
            calls
            == [(0, 5, 5), (5, 10, 10)] * layers + [(0, 5, T), (5, 10, T), (10, 14, T)] * layers
        )


@pytest.mark.parametrize("scaling", KINDS, ids=lambda s: s.kind)
@pytest.mark.parametrize("chunk", [None, 4], ids=["one-pass", "query-chunks"])
def test_left_padded_batch_equals_each_row_alone(
    scaling: RopeScaling, chunk: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    if chunk is not None:  # an explicit (padding) mask: chunks of queries over every key
        monkeypatch.setattr(attention_kernels, "SCORE_CHUNK", chunk)
    model = tiny(rope=dict(scaling=scaling))
    prompts = [ids(1, n, seed=n)[0].tolist() for n in (3, 11, 7)]
    steps = ids(3, 6, seed=2)
    x, mask = left_pad(prompts)
    cache = KVCache.for_model(model, 3, x.shape[1] + steps.shape[1])
    cache.set_padding(mask)
    with torch.no_grad():
        batched = torch.cat(
            [model(x, cache=cache)] + [model(steps[:, j : j + 1], cache=cache) for j in range(6)], 1
        )
    for row, prompt in enumerate(prompts):
        alone = cached_logits(
            model, torch.tensor([prompt + steps[row].tolist()]), chunks=(len(prompt),)
        )
        torch.testing.assert_close(batched[row, x.shape[1] - len(prompt) :], alone[0], **TOL)


def test_frequencies_are_plain_rope() -> None:
    model = tiny(rope=dict(scaling=KINDS[1]))
    torch.testing.assert_close(
        model.rotary.inv_freq.double(), base_inv_freq(8, 10000.0), rtol=1e-6, atol=0
    )


@pytest.mark.parametrize(
    "fields,message",
    [
        (dict(kind="rerope"), "window=None"),
        (dict(kind="rerope", window=0), "window=0"),
        (dict(kind="rerope", factor=2.0, window=4), "factor=2.0"),
        (dict(kind="linear", factor=2.0, window=4), "window=4"),
    ],
)
def test_bad_scalings_fail_in_one_line(fields: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RopeScaling(**fields)

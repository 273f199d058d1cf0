"""KVCache (nn/kv_cache.py) through TransformerLM.forward: prefill + one-token decoding equals
the full forward (fp32, 1e-5) for every preset, every position type and scaling, and the
attention switches; left-padded batches equal each row alone; the cache stores K/V heads only
and never reallocates."""

from __future__ import annotations

import itertools

import pytest
import torch

from archlab import KVCache, ModelConfig, RopeScaling, TransformerLM
from archlab.infer.generate import left_pad
from archlab.nn.presets import PRESETS, build_preset

T, PREFILL, VOCAB = 20, 6, 64
TOL = dict(rtol=1e-5, atol=1e-5)
SMALL = dict(d_model=32, n_heads=4, n_layers=2, max_seq_len=48, vocab_size=VOCAB)


def tiny(**fields: object) -> TransformerLM:
    torch.manual_seed(0)
    return TransformerLM(ModelConfig(**{**SMALL, **fields})).eval()


def tokens(batch: int = 2, length: int = T, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def cached_logits(
    model: TransformerLM, ids: torch.Tensor, chunks: tuple[int, ...] = (PREFILL,)
) -> torch.Tensor:
    """Prefill in `chunks` (a chunk after the first runs at a non-zero offset), then one
    token per step."""
    cache = KVCache.for_model(model, ids.shape[0], ids.shape[1])
    out, start = [], 0
    for size in chunks:
        out.append(model(ids[:, start : start + size], cache=cache))
        start += size
    out += [model(ids[:, t : t + 1], cache=cache) for t in range(start, ids.shape[1])]
    assert cache.pos == ids.shape[1]
    return torch.cat(out, dim=1)  # (B, T, V)


def assert_cached_equals_full(model: TransformerLM, ids: torch.Tensor | None = None) -> None:
    ids = tokens() if ids is None else ids
    with torch.no_grad():
        full = model(ids)
    torch.testing.assert_close(cached_logits(model, ids), full, **TOL)
    torch.testing.assert_close(cached_logits(model, ids, chunks=(4, 5)), full, **TOL)


@pytest.mark.parametrize("preset", PRESETS)
def test_presets(preset: str) -> None:
    # the preset's window would cover all T
    window = dict(sliding_window=5) if preset == "gemma2" else {}
    torch.manual_seed(0)
    model = TransformerLM(build_preset(preset, "tiny", **SMALL, **window)).eval()
    assert_cached_equals_full(model)


SCALINGS = [
    RopeScaling("linear", 2.0),
    RopeScaling("ntk", 2.0),
    RopeScaling("ntk_by_parts", 2.0, 12),
    RopeScaling("yarn", 2.0, 12),
    RopeScaling("llama3", 4.0, 12, low_freq_factor=1.0, high_freq_factor=4.0),
]


@pytest.mark.parametrize(
    "fields",
    [
        dict(position="sinusoidal"),
        dict(position="learned"),
        dict(position="relative", relative_buckets=8, relative_max_distance=16),
        dict(position="alibi"),
        dict(position="none"),
        dict(position="rope"),
        dict(rope=dict(layout="interleaved", fraction=0.5)),
        *[dict(rope=dict(scaling=s)) for s in SCALINGS],
    ],
    ids=lambda f: "-".join(str(getattr(v, "kind", v)) for v in f.values()),
)
def test_positions(fields: dict) -> None:
    assert_cached_equals_full(tiny(**fields))


@pytest.mark.parametrize(
    "fields",
    [
        dict(n_kv_heads=2),
        dict(n_kv_heads=1),
        dict(qk_norm="rmsnorm", qk_norm_scope="head"),
        dict(qk_norm="layernorm", qk_norm_scope="proj"),
        dict(key_norm=True),
        dict(attn_softcap=5.0, final_softcap=3.0),
        dict(attn_impl="eager"),
        dict(sliding_window=4),
        dict(sliding_window=3, window_pattern="SF", position="alibi"),
        dict(sliding_window=4, attn_softcap=5.0, position="relative"),
        dict(block="parallel"),
        dict(block="parallel", parallel_norms=2, norm="layernorm"),
        dict(norm_position="post"),
        dict(norm_position="double", sliding_window=6, attn_impl="eager"),
        dict(query_norm=True),
        dict(cosine={}),
        dict(cosine={"scale": "dynamic"}, sliding_window=4),
        dict(norm_position="deepnorm"),
        dict(
            block="gau",
            n_heads=1,
            head_dim=16,
            norm_position="deepnorm",
            sliding_window=4,
            window_pattern="SF",
        ),
    ],
    ids=lambda f: "-".join(f"{k}={v}" for k, v in f.items()),
)
def test_attention_switches(fields: dict) -> None:
    assert_cached_equals_full(tiny(**fields))


@torch.no_grad()
def prefix_references(model: TransformerLM, ids: torch.Tensor) -> torch.Tensor:
    """Dynamic NTK's reference: the logits at t of a full forward on ids[:, :t+1], i.e.
    at length t+1."""
    return torch.stack([model(ids[:, : t + 1])[:, -1] for t in range(ids.shape[1])], dim=1)


def test_dynamic_ntk_rerotates_cached_keys_at_the_current_length() -> None:
    """One layer: every decode step equals the full forward on its prefix, past M too, because the
    cache keeps keys unrotated and rotates all of them at the current length (cached rotated keys
    keep a stale base)."""
    model = tiny(n_layers=1, n_kv_heads=2, rope=dict(scaling=RopeScaling("dynamic", 2.0, 10)))
    ids = tokens()
    reference = prefix_references(model, ids)
    torch.testing.assert_close(
        cached_logits(model, ids)[:, PREFILL - 1 :], reference[:, PREFILL - 1 :], **TOL
    )
    with torch.no_grad():
        # last position of the full length
        assert (model(ids)[:, -1] - reference[:, -1]).abs().max() < 1e-5
        stale = model(ids[:, :12])[:, 10]  # position 10 seen at length 12 instead of 11
    assert (stale - reference[:, 10]).abs().max() > 1e-3  # the test can tell bases apart


def test_dynamic_ntk_deeper_layers_up_to_the_scaled_length() -> None:
    """Several layers: exact while the length stays <= M; past M, deeper layers' K/V were computed
    from hidden states at earlier lengths (true of any cache, see docs/inference.md), so the test
    stops at M."""
    model = tiny(rope=dict(scaling=RopeScaling("dynamic", 2.0, T)))
    assert_cached_equals_full(model)


@pytest.mark.parametrize(
    "fields",
    [
        dict(),
        dict(position="learned"),
        dict(position="alibi", sliding_window=4),
        dict(position="relative"),
        dict(position="sinusoidal", n_kv_heads=1),
        dict(rope=dict(scaling=RopeScaling("yarn", 2.0, 8)), attn_impl="eager"),
        dict(n_layers=1, rope=dict(scaling=RopeScaling("dynamic", 2.0, 8))),
        dict(rope=dict(scaling=RopeScaling("dynamic", 2.0, 8))),
    ],
    ids=lambda f: "-".join(f"{k}={getattr(v, 'kind', v)}" for k, v in f.items()) or "rope",
)
def test_left_padded_batch_equals_each_row_alone(fields: dict) -> None:
    model = tiny(**fields)
    prompts = [tokens(1, n, seed=n)[0].tolist() for n in (3, 9, 6)]
    steps = tokens(3, 7, seed=2)
    ids, mask = left_pad(prompts)
    cache = KVCache.for_model(model, 3, ids.shape[1] + steps.shape[1])
    cache.set_padding(mask)
    with torch.no_grad():
        batched = torch.cat(
            [model(ids, cache=cache)]
            + [model(steps[:, j : j + 1], cache=cache) for j in range(steps.shape[1])],
            dim=1,
        )
    for row, prompt in enumerate(prompts):
        alone = cached_logits(
            model, torch.tensor([prompt + steps[row].tolist()]), chunks=(len(prompt),)
        )
        torch.testing.assert_close(batched[row, ids.shape[1] - len(prompt) :], alone[0], **TOL)


def test_padding_positions_count_real_tokens_only() -> None:
    cache = KVCache(1, 2, 8, 1, 4)
    cache.set_padding(torch.tensor([[0, 0, 1, 1], [1, 1, 1, 1]]))
    assert cache.positions(4).tolist() == [[0, 0, 0, 1], [0, 1, 2, 3]]
    cache.advance(4)
    assert cache.positions(2).tolist() == [[2, 3], [4, 5]]
    assert cache.slot_positions(4).tolist() == [[0, 0, 0, 1], [0, 1, 2, 3]]


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])
def test_cache_holds_kv_heads_only(n_kv_heads: int) -> None:
    model = tiny(n_kv_heads=n_kv_heads)
    cache = KVCache.for_model(model, batch_size=3, max_len=10)
    c = model.config
    assert cache.k[0].shape == (3, n_kv_heads, 10, c.head_dim)
    per_token = 2 * c.n_layers * n_kv_heads * c.head_dim * 4  # K and V, every layer, fp32
    assert cache.nbytes() == per_token * 3 * 10


def test_decoding_writes_in_place_and_stops_at_capacity() -> None:
    model = tiny()
    cache = KVCache.for_model(model, 1, 5)
    pointers = [t.data_ptr() for t in cache.k + cache.v]
    ids = tokens(1, 6)
    with torch.no_grad():
        model(ids[:, :3], cache=cache)
        model(ids[:, 3:4], cache=cache)
        model(ids[:, 4:5], cache=cache)
        assert [t.data_ptr() for t in cache.k + cache.v] == pointers  # preallocated, never grown
        with pytest.raises(ValueError, match="KV cache full: 6 tokens needed, capacity max_len=5"):
            model(ids[:, 5:6], cache=cache)
    with pytest.raises(ValueError, match="does not fit a cache of batch 1"):
        KVCache.for_model(model, 1, 5).set_padding(torch.ones(2, 3))


def test_learned_positions_past_the_table_raise_in_decoding() -> None:
    model = tiny(position="learned", max_seq_len=8)
    cache = KVCache.for_model(model, 1, 9)
    with torch.no_grad():
        model(tokens(1, 8), cache=cache)
        with pytest.raises(ValueError, match="position 8 is past the learned position table"):
            model(tokens(1, 1), cache=cache)


@pytest.mark.parametrize("attn_impl", ["sdpa", "eager"])
def test_sliding_window_sees_itself_and_window_minus_one_keys(attn_impl: str) -> None:
    """Independent of the mask code: with one layer and no positions, a query that sees exactly the
    last W keys gives the output of the same weights run on those W tokens alone."""
    window, ids = 4, tokens(2, 12)
    windowed = tiny(n_layers=1, position="none", sliding_window=window, attn_impl=attn_impl)
    full = tiny(n_layers=1, position="none", attn_impl=attn_impl)
    decoded = cached_logits(windowed, ids)
    with torch.no_grad():
        for t in range(window, ids.shape[1]):
            alone = full(ids[:, t - window + 1 : t + 1])[:, -1]
            torch.testing.assert_close(decoded[:, t], alone, **TOL)


def test_prefill_can_keep_only_the_last_logits() -> None:
    model = tiny(final_softcap=3.0)
    ids = tokens()
    with torch.no_grad():
        torch.testing.assert_close(model(ids, logits_to_keep=1), model(ids)[:, -1:], **TOL)
        cache = KVCache.for_model(model, 2, T)
        last = model(ids[:, :PREFILL], cache=cache, logits_to_keep=1)
    assert cache.pos == PREFILL and last.shape == (2, 1, VOCAB)
    torch.testing.assert_close(last[:, 0], cached_logits(model, ids)[:, PREFILL - 1], **TOL)


# ----- sliding-window layers keep a ring of their window -----
W = 4  # the window of the ring tests; T = 20 tokens is 5 windows
# prefill chunks smaller, equal and larger than W
RING_CHUNKS = [(PREFILL,), (3, 6, 2), (9, 5), (1, 1, 2, 7)]


def window_model(preset: str | None = None, **fields: object) -> TransformerLM:
    torch.manual_seed(0)
    config = (
        build_preset(preset, "tiny", **SMALL, sliding_window=W, **fields)
        if preset
        else ModelConfig(**{**SMALL, "sliding_window": W, **fields})
    )
    return TransformerLM(config).eval()


RING_MODELS = {
    "gemma2 (SF, softcaps, GQA)": dict(preset="gemma2"),
    "mistral (all S, GQA)": dict(preset="llama", window_pattern="S"),
    "alibi SF": dict(position="alibi", window_pattern="SF"),
    "relative S, softcap": dict(
        position="relative", relative_buckets=8, relative_max_distance=16, attn_softcap=5.0
    ),
    "MQA eager FS": dict(n_kv_heads=1, attn_impl="eager", window_pattern="FS"),
    "dynamic NTK SF": dict(rope=dict(scaling=RopeScaling("dynamic", 2.0, T)), window_pattern="SF"),
    "learned, post-norm": dict(position="learned", norm_position="post"),
}


@pytest.mark.parametrize("name", RING_MODELS)
def test_ring_cache_equals_full_forward(name: str) -> None:
    """Prefill chunks of every size relative to the window, then one-token steps, to 5 windows: the
    logits of the full forward, while window layers allocate only W slots."""
    model = window_model(**RING_MODELS[name])
    ids = tokens()
    with torch.no_grad():
        full = model(ids)
    for chunks in RING_CHUNKS:
        torch.testing.assert_close(cached_logits(model, ids, chunks), full, **TOL)
    cache = KVCache.for_model(model, 2, T)
    c = model.config
    assert [k.shape[2] for k in cache.k] == [
        W if c.layer_is_sliding(i) else T for i in range(c.n_layers)
    ]
    assert any(c.layer_is_sliding(i) for i in range(c.n_layers))


def test_ring_holds_the_last_window_and_update_returns_the_slots_key_slots_names() -> None:
    """Bookkeeping against the token slots themselves: each key's value is its token slot, so
    what `update` returns must equal `key_slots` (or 0..pos+T-1 in order), and the ring the last
    W token slots."""
    cache = KVCache(2, 1, 30, 1, 1, windows=(None, W))
    pos = 0
    for t in (1, 2, 1, 1, 3, 1, 6, 1, 1, 4, 1):
        # (B, K, T, Dh) = slot
        slots = torch.arange(pos, pos + t, dtype=torch.float32).view(1, 1, t, 1)
        expected = cache.key_slots(t, W)
        expected = torch.arange(pos + t) if expected is None else expected
        full_keys, _ = cache.update(0, slots, slots)
        ring_keys, ring_values = cache.update(1, slots, slots)
        assert full_keys.flatten().tolist() == list(range(pos + t))
        assert (
            ring_keys.flatten().tolist()
            == ring_values.flatten().tolist()
            == expected.float().tolist()
        )
        cache.advance(t)
        pos += t
        assert sorted(cache.k[1].flatten().tolist()) == sorted(
            [*range(max(0, pos - W), pos), *[0] * (W - pos)]
        )
    assert cache.k[1].shape[2] == W and cache.k[0].shape[2] == 30


def test_a_plain_ring_step_builds_no_key_slots(monkeypatch) -> None:
    """Past the window, a decode step without padding, bias or unrotated keys reads the ring without
    knowing which token slot each key holds, so the model never asks `key_slots`; a padded batch's
    mask needs them. Both still equal the full forward (`test_ring_cache_equals_full_forward`, the
    padded tests below)."""
    asked = []
    original = KVCache.key_slots
    monkeypatch.setattr(
        KVCache, "key_slots", lambda self, t, window: asked.append(t) or original(self, t, window)
    )
    model = window_model(preset="llama", window_pattern="S")
    for mask in (None, torch.tensor([[False, True, True, True, True, True]])):
        cache = KVCache.for_model(model, 1, 12)
        with torch.no_grad():
            if mask is not None:
                cache.set_padding(mask)
            model(tokens(1, 6), cache=cache)  # a chunk past the window: its mask reads the slots
            asked.clear()
            for _ in range(3):
                model(tokens(1, 1), cache=cache)
        assert len(asked) == (0 if mask is None else 3)


def test_dynamic_ntk_ring_rerotates_the_window_at_the_current_length() -> None:
    """One layer, window 4, Dynamic NTK past M = 10: the ring holds unrotated keys and every call
    rotates them at the current length, equal to the full forward on the prefix that ends where the
    call ends (a chunk runs at one length, the length after it)."""
    model = window_model(
        n_layers=1, n_kv_heads=2, rope=dict(scaling=RopeScaling("dynamic", 2.0, 10))
    )
    ids = tokens()
    for chunks in RING_CHUNKS:
        ends = list(itertools.accumulate(chunks)) + list(range(sum(chunks) + 1, T + 1))
        with torch.no_grad():
            reference = torch.cat(
                [model(ids[:, :end])[:, start:] for start, end in zip([0, *ends], ends)], dim=1
            )
        torch.testing.assert_close(cached_logits(model, ids, chunks), reference, **TOL)


@pytest.mark.parametrize(
    "fields",
    [
        dict(preset="gemma2"),
        dict(position="alibi", n_kv_heads=2),
        dict(position="relative", window_pattern="SF"),
        dict(n_layers=1, rope=dict(scaling=RopeScaling("dynamic", 2.0, 8))),
    ],
    ids=lambda f: "-".join(f"{k}={getattr(v, 'kind', v)}" for k, v in f.items()),
)
def test_ring_left_padded_chunked_batch_equals_each_row_alone(fields: dict) -> None:
    """A left-padded batch prefilled in two chunks (the padding spans the first), then decoded
    past 3 windows: each row equals that row alone, prefilled in the same two chunks of
    its real tokens."""
    model = window_model(**fields)
    prompts = [tokens(1, n, seed=n)[0].tolist() for n in (2, 11, 7)]
    steps = tokens(3, 6, seed=2)
    ids, mask = left_pad(prompts)
    cache = KVCache.for_model(model, 3, ids.shape[1] + steps.shape[1])
    out = []
    with torch.no_grad():
        for part in (slice(0, 5), slice(5, None)):
            cache.set_padding(mask[:, part])
            out.append(model(ids[:, part], cache=cache))
        out += [model(steps[:, j : j + 1], cache=cache) for j in range(steps.shape[1])]
    batched = torch.cat(out, dim=1)
    for row, prompt in enumerate(prompts):
        # this row's real tokens in the first chunk
        first = max(0, 5 - (ids.shape[1] - len(prompt)))
        chunks = tuple(n for n in (first, len(prompt) - first) if n)
        alone = cached_logits(model, torch.tensor([prompt + steps[row].tolist()]), chunks=chunks)
        torch.testing.assert_close(batched[row, ids.shape[1] - len(prompt) :], alone[0], **TOL)


def test_a_cache_with_other_windows_is_refused() -> None:
    model = window_model(window_pattern="SF")
    wrong = KVCache(2, 1, 8, 4, 8, windows=(None, W))  # the rings on the wrong layer
    with pytest.raises(
        ValueError, match=r"a KVCache with windows \[None, 4\] does not fit this model's layers"
    ):
        model(tokens(1, 3), cache=wrong)
    with pytest.raises(
        ValueError, match=r"windows=\[4\] is not allowed: one entry per layer \(2\)"
    ):
        KVCache(2, 1, 8, 4, 8, windows=(W,))
    # every slot in every layer: window layers mask instead, also exact
    plain = KVCache(2, 1, T, 4, 8)
    ids = tokens(1)
    with torch.no_grad():
        torch.testing.assert_close(
            torch.cat(
                [model(ids[:, :6], cache=plain)]
                + [model(ids[:, t : t + 1], cache=plain) for t in range(6, T)],
                dim=1,
            ),
            model(ids),
            **TOL,
        )


def test_rewind_rewrites_the_forgotten_slots_as_if_never_written() -> None:
    """Decoding token b after rewinding past token a equals decoding b straight after the prompt."""
    model = tiny()
    ids = torch.randint(VOCAB, (2, PREFILL + 2), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        cache = KVCache.for_model(model, 2, T)
        model(ids[:, :PREFILL], cache=cache)
        model(ids[:, PREFILL : PREFILL + 1], cache=cache)  # token a, then forgotten
        cache.rewind(PREFILL)
        rewound = model(ids[:, PREFILL + 1 :], cache=cache)
        full = model(torch.cat([ids[:, :PREFILL], ids[:, PREFILL + 1 :]], dim=1))[:, -1:]
    assert cache.pos == PREFILL + 1
    torch.testing.assert_close(rewound, full, **TOL)
    with pytest.raises(ValueError, match=r"rewind\(9\) is not allowed: a position in 0..7"):
        cache.rewind(9)
    ring = KVCache(1, 1, 8, 1, 4, windows=[2])
    ring.pos = 3  # past its 2-slot window: the ring has overwritten slot 0
    with pytest.raises(ValueError, match="rings have not wrapped"):
        ring.rewind(2)

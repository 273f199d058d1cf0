"""KVCache (nn/kv_cache.py) through TransformerLM.forward: prefill + one-token decoding equals the full forward
(fp32, 1e-5) for every preset, every position type and scaling, and the attention switches; left-padded
batches equal each row alone; the cache stores K/V heads only and never reallocates."""

from __future__ import annotations

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
def cached_logits(model: TransformerLM, ids: torch.Tensor, chunks: tuple[int, ...] = (PREFILL,)) -> torch.Tensor:
    """Prefill in `chunks` (a chunk after the first runs at a non-zero offset), then one token per step."""
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
    window = dict(sliding_window=5) if preset == "gemma2" else {}  # the preset's window would cover all T
    torch.manual_seed(0)
    model = TransformerLM(build_preset(preset, "tiny", **SMALL, **window)).eval()
    assert_cached_equals_full(model)


SCALINGS = [
    RopeScaling("linear", 2.0), RopeScaling("ntk", 2.0), RopeScaling("ntk_by_parts", 2.0, 12),
    RopeScaling("yarn", 2.0, 12), RopeScaling("llama3", 4.0, 12, low_freq_factor=1.0, high_freq_factor=4.0),
]


@pytest.mark.parametrize("fields", [
    dict(position="sinusoidal"), dict(position="learned"), dict(position="relative", relative_buckets=8,
    relative_max_distance=16), dict(position="alibi"), dict(position="none"), dict(position="rope"),
    dict(rope_layout="interleaved", rope_fraction=0.5), *[dict(rope_scaling=s) for s in SCALINGS],
], ids=lambda f: "-".join(str(getattr(v, "kind", v)) for v in f.values()))
def test_positions(fields: dict) -> None:
    assert_cached_equals_full(tiny(**fields))


@pytest.mark.parametrize("fields", [
    dict(n_kv_heads=2), dict(n_kv_heads=1),
    dict(qk_norm="rmsnorm", qk_norm_scope="head"), dict(qk_norm="layernorm", qk_norm_scope="proj"),
    dict(key_norm=True), dict(attn_softcap=5.0, final_softcap=3.0), dict(attn_impl="eager"),
    dict(sliding_window=4), dict(sliding_window=3, window_pattern="SF", position="alibi"),
    dict(sliding_window=4, attn_softcap=5.0, position="relative"),
    dict(block="parallel"), dict(block="parallel", parallel_norms=2, norm="layernorm"),
    dict(norm_position="post"), dict(norm_position="double", sliding_window=6, attn_impl="eager"),
], ids=lambda f: "-".join(f"{k}={v}" for k, v in f.items()))
def test_attention_switches(fields: dict) -> None:
    assert_cached_equals_full(tiny(**fields))


@torch.no_grad()
def prefix_references(model: TransformerLM, ids: torch.Tensor) -> torch.Tensor:
    """Dynamic NTK's reference: the logits at t of a full forward on ids[:, :t+1], i.e. at length t+1."""
    return torch.stack([model(ids[:, : t + 1])[:, -1] for t in range(ids.shape[1])], dim=1)


def test_dynamic_ntk_rerotates_cached_keys_at_the_current_length() -> None:
    """One layer: every decode step equals the full forward on its prefix, past M too, because the cache keeps
    keys unrotated and rotates all of them at the current length (cached rotated keys keep a stale base)."""
    model = tiny(n_layers=1, n_kv_heads=2, rope_scaling=RopeScaling("dynamic", 2.0, 10))
    ids = tokens()
    reference = prefix_references(model, ids)
    torch.testing.assert_close(cached_logits(model, ids)[:, PREFILL - 1 :], reference[:, PREFILL - 1 :], **TOL)
    with torch.no_grad():
        assert (model(ids)[:, -1] - reference[:, -1]).abs().max() < 1e-5  # last position of the full length
        stale = model(ids[:, :12])[:, 10]  # position 10 seen at length 12 instead of 11
    assert (stale - reference[:, 10]).abs().max() > 1e-3  # the test can tell bases apart


def test_dynamic_ntk_deeper_layers_up_to_the_scaled_length() -> None:
    """Several layers: exact while the length stays <= M; past M, deeper layers' K/V were computed from
    hidden states at earlier lengths (true of any cache, see docs/inference.md), so the test stops at M."""
    model = tiny(rope_scaling=RopeScaling("dynamic", 2.0, T))
    assert_cached_equals_full(model)


@pytest.mark.parametrize("fields", [
    dict(), dict(position="learned"), dict(position="alibi", sliding_window=4), dict(position="relative"),
    dict(position="sinusoidal", n_kv_heads=1), dict(rope_scaling=RopeScaling("yarn", 2.0, 8), attn_impl="eager"),
    dict(n_layers=1, rope_scaling=RopeScaling("dynamic", 2.0, 8)), dict(rope_scaling=RopeScaling("dynamic", 2.0, 8)),
], ids=lambda f: "-".join(f"{k}={getattr(v, 'kind', v)}" for k, v in f.items()) or "rope")
def test_left_padded_batch_equals_each_row_alone(fields: dict) -> None:
    model = tiny(**fields)
    prompts = [tokens(1, n, seed=n)[0].tolist() for n in (3, 9, 6)]
    steps = tokens(3, 7, seed=2)
    ids, mask = left_pad(prompts)
    cache = KVCache.for_model(model, 3, ids.shape[1] + steps.shape[1])
    cache.set_padding(mask)
    with torch.no_grad():
        batched = torch.cat([model(ids, cache=cache)] + [model(steps[:, j : j + 1], cache=cache)
                                                           for j in range(steps.shape[1])], dim=1)
    for row, prompt in enumerate(prompts):
        alone = cached_logits(model, torch.tensor([prompt + steps[row].tolist()]), chunks=(len(prompt),))
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
    """Independent of the mask code: with one layer and no positions, a query that sees exactly the last W
    keys gives the output of the same weights run on those W tokens alone."""
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

"""Surgery: GQA by mean-pooling K/V heads (Ainslie et al. 2023), longer context,
QK-norm added, refusals."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from archlab import InteropError, ModelConfig, RopeScaling, TransformerLM, build_preset
from archlab.interop.surgery import adapt
from tests.conftest import randomize_

BASE = ModelConfig(
    vocab_size=64, d_model=64, n_layers=2, n_heads=8, n_kv_heads=4, max_seq_len=32, bias=True
)


@pytest.fixture
def source() -> TransformerLM:
    return randomize_(TransformerLM(BASE), 0.2).eval()


def test_fewer_kv_heads_mean_pools_each_group(source: TransformerLM) -> None:
    new = adapt(source, dataclasses.replace(BASE, n_kv_heads=2))
    dh, h = BASE.head_dim, BASE.n_heads * BASE.head_dim
    for old_w, new_w in [
        (source.layers[0].attn.qkv_proj.weight, new.layers[0].attn.qkv_proj.weight),
        (source.layers[1].attn.qkv_proj.bias, new.layers[1].attn.qkv_proj.bias),
    ]:
        assert torch.equal(new_w[:h], old_w[:h])  # queries untouched
        for part in (0, 1):  # k then v: new head g = mean of old heads 2g, 2g+1 (float64 reference)
            old_part = old_w[h + part * 4 * dh : h + (part + 1) * 4 * dh].double().view(4, dh, -1)
            new_part = new_w[h + part * 2 * dh : h + (part + 1) * 2 * dh].double().view(2, dh, -1)
            torch.testing.assert_close(new_part, (old_part[0::2] + old_part[1::2]) / 2)
    assert torch.equal(new.layers[0].attn.o_proj.weight, source.layers[0].attn.o_proj.weight)


def test_pooling_identical_heads_keeps_the_function(source: TransformerLM) -> None:
    """When every group's K/V heads are equal, pooling is exact: the GQA model computes
    the same logits."""
    with torch.no_grad():
        for layer in source.layers:
            w = layer.attn.qkv_proj.weight
            h, kv = BASE.n_heads * BASE.head_dim, BASE.n_kv_heads * BASE.head_dim
            for start in (h, h + kv):
                heads = w[start : start + kv].view(2, 2, BASE.head_dim, -1)
                heads[:, 1] = heads[:, 0]
            b = layer.attn.qkv_proj.bias
            for start in (h, h + kv):
                heads = b[start : start + kv].view(2, 2, BASE.head_dim)
                heads[:, 1] = heads[:, 0]
    new = adapt(source, dataclasses.replace(BASE, n_kv_heads=2)).eval()
    ids = torch.randint(0, 64, (2, 16))
    with torch.no_grad():
        torch.testing.assert_close(new(ids), source(ids), rtol=1e-5, atol=1e-5)


def test_longer_context_and_caps_keep_weights(source: TransformerLM) -> None:
    config = dataclasses.replace(
        BASE,
        max_seq_len=128,
        rope=dict(scaling=RopeScaling("linear", 4.0)),
        attn_softcap=50.0,
        dropout=0.1,
    )
    new = adapt(source, config)
    for (name, a), (_, b) in zip(source.state_dict().items(), new.state_dict().items()):
        if not name.startswith("rotary"):
            assert torch.equal(a, b), name


def test_unchanged_weights_are_the_sources_own_tensors(source: TransformerLM) -> None:
    """No copy of the state and no random model to load it into (they set a LoRA fine-tune's
    peak memory): the weights adapt leaves alone are the source's tensors, and a pooled or added
    one is new."""
    new = adapt(source, dataclasses.replace(BASE, n_kv_heads=2, qk_norm="rmsnorm", max_seq_len=64))
    old_params, new_params = dict(source.named_parameters()), dict(new.named_parameters())
    for name, param in new_params.items():
        shared = name in old_params and param.data_ptr() == old_params[name].data_ptr()
        assert shared == (name in old_params and "qkv_proj" not in name), name
        assert param.device.type == "cpu" and param.requires_grad, name
    assert not any(b.is_meta for b in new.buffers())
    ids = torch.randint(0, 64, (2, 16))
    assert torch.isfinite(new(ids)).all()


def test_a_tied_source_stays_tied() -> None:
    source = randomize_(TransformerLM(dataclasses.replace(BASE, tie_embeddings=True)), 0.2)
    new = adapt(source, dataclasses.replace(source.config, max_seq_len=64))
    assert new.lm_head.weight is new.embed_tokens.weight
    assert torch.equal(new.embed_tokens.weight, source.embed_tokens.weight)


def test_added_qk_norm_starts_at_unit_gain(source: TransformerLM) -> None:
    new = adapt(source, dataclasses.replace(BASE, qk_norm="rmsnorm"))
    assert torch.equal(new.layers[0].attn.q_norm.weight, torch.ones(BASE.head_dim))
    assert torch.equal(new.layers[1].attn.qkv_proj.weight, source.layers[1].attn.qkv_proj.weight)


@pytest.mark.parametrize(
    "change, message",
    [
        (dict(d_model=128), "cannot change d_model 64 -> 128: no principled weight mapping"),
        (dict(n_kv_heads=3, n_heads=6), "cannot change n_heads"),
        (dict(norm="layernorm"), "cannot change norm 'rmsnorm' -> 'layernorm'"),
        (dict(ffn="mlp"), "cannot change ffn 'glu' -> 'mlp'"),
    ],
)
def test_unmapped_changes_are_refused_by_name(
    source: TransformerLM, change: dict, message: str
) -> None:
    with pytest.raises(InteropError, match=message):
        adapt(source, dataclasses.replace(BASE, **change))


def test_learned_positions_cannot_grow() -> None:
    gpt2 = TransformerLM(build_preset("gpt2"))
    with pytest.raises(InteropError, match="cannot change max_seq_len .* learned positions"):
        adapt(gpt2, dataclasses.replace(gpt2.config, max_seq_len=gpt2.config.max_seq_len * 2))

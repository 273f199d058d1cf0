"""RoPE and windows in config.json (interop/hf_rope.py, hf_config.py): keys a config leaves out
resolve to what transformers' own config classes resolve them to; per-layer RoPE (Gemma 3's
bases and full-layer scaling, SmolLM3's NoPE layers) exports to the family that carries it with
transformers' logits, and nowhere else."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
import transformers

from archlab import InteropError, ModelConfig, RopeScaling, TransformerLM, save_hf
from archlab.interop.families import FAMILIES
from archlab.interop.family import SLIDING
from archlab.interop.hf_config import config_diff, config_from_hf
from archlab.nn.config import Rope
from tests.conftest import randomize_
from tests.interop.test_families import TOL, fresh_hf

SIZES = dict(
    vocab_size=96, hidden_size=64, intermediate_size=96, num_attention_heads=8, head_dim=16
)


@pytest.mark.parametrize(
    "model_type, config_class, keys",
    [
        ("gemma3_text", "Gemma3TextConfig", dict(num_hidden_layers=7)),
        (
            "gemma3_text",
            "Gemma3TextConfig",
            dict(num_hidden_layers=4, sliding_window_pattern=2, rope_theta=5e5),
        ),
        ("smollm3", "SmolLM3Config", dict(num_hidden_layers=5)),
        (
            "smollm3",
            "SmolLM3Config",
            dict(
                num_hidden_layers=6,
                no_rope_layer_interval=3,
                use_sliding_window=True,
                sliding_window=16,
            ),
        ),
        ("mistral", "MistralConfig", dict(num_hidden_layers=2)),
        ("gemma2", "Gemma2Config", dict(num_hidden_layers=3)),
    ],
)
def test_absent_keys_resolve_as_transformers_resolves_them(
    model_type: str, config_class: str, keys: dict
) -> None:
    hf = getattr(transformers, config_class)(**SIZES, **keys)
    ours = config_from_hf({"model_type": model_type, **SIZES, **keys}, FAMILIES[model_type])
    assert ours.n_kv_heads == hf.num_key_value_heads
    windowed = [
        t == SLIDING and getattr(hf, "use_sliding_window", True)
        for t in getattr(hf, "layer_types", None) or [SLIDING] * hf.num_hidden_layers
    ]
    assert [ours.layer_is_sliding(i) for i in range(ours.n_layers)] == windowed
    assert ours.sliding_window == (hf.sliding_window if any(windowed) else None)
    thetas = (
        hf.rope_parameters
        if model_type == "gemma3_text"
        else {"full_attention": hf.rope_parameters}
    )
    for i in range(ours.n_layers):
        kind = ours.layer_rope(i)
        if getattr(hf, "no_rope_layers", None) is not None and not hf.no_rope_layers[i]:
            assert kind is None, i
            continue
        theta = ours.rope.local_theta if kind == "local" else ours.rope.theta
        assert (
            theta
            == thetas[hf.layer_types[i] if model_type == "gemma3_text" else "full_attention"][
                "rope_theta"
            ]
        )


def gemma3_native(**fields: object) -> ModelConfig:
    """A Gemma 3 built in archlab: window layers with their own unscaled base, full layers
    with linear x4."""
    return ModelConfig(
        **{
            **dict(
                vocab_size=96,
                d_model=64,
                n_layers=4,
                n_heads=4,
                n_kv_heads=2,
                head_dim=32,
                d_ff=96,
                max_seq_len=48,
                norm_eps=1e-6,
                norm_unit_offset=True,
                norm_position="double",
                ffn="glu",
                activation="gelu_tanh",
                qk_norm="rmsnorm",
                embed_scale="sqrt_d",
                tie_embeddings=True,
                attn_scale=24**-0.5,
                sliding_window=8,
                window_pattern="SSF",
                rope=Rope(
                    theta=1000.0,
                    local_theta=50.0,
                    local_scaling=False,
                    scaling=RopeScaling("linear", 4.0),
                ),
            ),
            **fields,
        }
    )


def gemma3_rope(**fields: object) -> ModelConfig:
    """gemma3_native with some of its RoPE settings changed."""
    rope = gemma3_native().rope
    return gemma3_native(rope=dataclasses.replace(rope, **fields))


SMOLLM3_NATIVE = dict(
    vocab_size=96,
    d_model=64,
    n_layers=4,
    n_heads=4,
    n_kv_heads=2,
    d_ff=96,
    max_seq_len=48,
    norm_eps=1e-6,
    rope=Rope(theta=100.0, pattern="RRRN"),
    tie_embeddings=True,
)


@pytest.mark.parametrize(
    "config, model_type",
    [
        (gemma3_native(), "gemma3_text"),
        (
            gemma3_rope(scaling=None, local_theta=None),
            "gemma3_text",
        ),  # one base: only qk-norm is new
        (ModelConfig(**SMOLLM3_NATIVE), "smollm3"),
        (ModelConfig(**SMOLLM3_NATIVE, sliding_window=8, window_pattern="FS"), "smollm3"),
        (ModelConfig(**{**SMOLLM3_NATIVE, "rope": Rope(theta=100.0)}), "llama"),
    ],
    ids=["gemma3", "gemma3-uniform-rope", "smollm3", "smollm3-windows", "all-rope"],
)
def test_per_layer_rope_exports_to_its_family_with_the_same_logits(
    config: ModelConfig, model_type: str, tmp_path: Path
) -> None:
    torch.manual_seed(0)
    model = randomize_(TransformerLM(config)).eval()
    save_hf(model, tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == model_type
    x = torch.randint(0, 96, (2, 48), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want, got = model(x), fresh_hf(tmp_path)(x).logits
    # float32 differences between the two implementations grow with the logits: randomized weights
    # give |logit| ~ 25-30 here, where 1e-4 is ~50 ulps and 2 of 6 seeds of this draw exceed it
    # (1.4e-4 at most)
    assert (got - want).abs().max().item() <= max(TOL, 1e-5 * want.abs().max().item())


@pytest.mark.parametrize(
    "config, family, switch",
    [
        # transformers' Gemma 3 ignores it
        (gemma3_native(attn_softcap=50.0), "gemma3_text", "attn_softcap=50.0"),
        (gemma3_rope(local_scaling=True), "gemma2", "rope.pattern="),
        (gemma3_rope(pattern="RN"), "gemma3_text", "rope.pattern="),
        (ModelConfig(**SMOLLM3_NATIVE), "llama", "rope.pattern=('R(theta=100.0, unscaled)',"),
        (
            ModelConfig(
                **{**SMOLLM3_NATIVE, "rope": Rope(theta=100.0, pattern="RRRN", local_theta=50.0)},
                sliding_window=8,
            ),
            "smollm3",
            "rope.pattern=",
        ),
    ],
)
def test_per_layer_rope_a_family_cannot_carry_is_named(
    config: ModelConfig, family: str, switch: str
) -> None:
    diff = config_diff(config, FAMILIES[family])
    assert any(d.startswith(switch) for d in diff), diff


def test_inert_local_rope_fields_do_not_block_export() -> None:
    """rope.local_theta equal to the base, or rope.local_scaling without a scaling, change no layer;
    with a scaling and every layer windowed, rope.local_scaling=False leaves every layer unscaled,
    which Mistral cannot say."""
    plain = dict(d_model=64, n_heads=4, sliding_window=8)
    assert (
        config_diff(ModelConfig(**plain, rope=Rope(local_theta=10000.0)), FAMILIES["mistral"]) == []
    )
    assert (
        config_diff(ModelConfig(**plain, rope=Rope(local_scaling=False)), FAMILIES["mistral"]) == []
    )
    with pytest.raises(
        InteropError,
        match=r"rope.pattern=\('R\(theta=10000.0, unscaled\)'.*mistral gives "
        r"\('R\(theta=10000.0, linear\)'",
    ):
        save_hf(
            TransformerLM(
                ModelConfig(
                    **plain, rope=Rope(local_scaling=False, scaling=RopeScaling("linear", 2.0))
                )
            ),
            Path("unused"),
            family="mistral",
        )


def _example(kind: str) -> RopeScaling:
    """A RopeScaling of `kind` with its required fields filled (nn/positions/scaling.py
    RopeKind.required); L0 = max_seq_len, which dynamic NTK needs to export exactly (transformers
    reads its M from max_position_embeddings)."""
    from archlab.nn.positions.scaling import ROPE_KINDS

    values = {
        "original_max_seq_len": 64,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "window": 8,
    }
    entry = ROPE_KINDS[kind]
    return RopeScaling(
        kind, 1.0 if entry.no_factor else 2.0, **{k: values[k] for k in entry.required}
    )


def test_every_rope_kind_has_a_mapping_or_a_named_refusal() -> None:
    """Each kind of ROPE_KINDS is spelled in HF_ROPE_TYPE or refused in HF_ROPE_REFUSED,
    never both and never neither (a new kind without an HF decision fails here, not with a
    KeyError at export)."""
    from archlab.interop.hf_rope import HF_ROPE_KEYS, HF_ROPE_REFUSED, HF_ROPE_TYPE
    from archlab.nn.positions.scaling import ROPE_KINDS

    for kind in ROPE_KINDS:
        assert (kind in HF_ROPE_TYPE) != (kind in HF_ROPE_REFUSED), kind
        assert (kind in HF_ROPE_KEYS) == (kind in HF_ROPE_TYPE), kind
    assert set(HF_ROPE_TYPE) | set(HF_ROPE_REFUSED) == set(ROPE_KINDS)


@pytest.mark.parametrize(
    "kind",
    [
        "none",
        "linear",
        "ntk",
        "ntk_by_parts",
        "dynamic",
        "yarn",
        "llama3",
        "rerope",
        "leaky_rerope",
        "inv_leaky_rerope",
        "ntk_mixed",
    ],
)
def test_each_rope_kind_exports_with_its_frequencies_or_is_refused_in_one_line(
    kind: str, tmp_path: Path
) -> None:
    """A mapped kind goes out and back through config.json with the same frequencies (as
    transformers computes them; ntk comes back as the stretched base); a refused kind stops save_hf
    before any file is written, with the kind and the reason."""
    from archlab.interop.hf_rope import HF_ROPE_REFUSED
    from archlab.nn.positions.rope import RotaryEmbedding
    from archlab.nn.positions.scaling import ROPE_KINDS

    scaling = _example(kind)
    config = ModelConfig(
        vocab_size=96,
        d_model=64,
        n_heads=4,
        max_seq_len=64,
        rope=Rope(scaling=None if kind == "none" else scaling),
    )
    model = TransformerLM(config)
    if kind in HF_ROPE_REFUSED:
        with pytest.raises(InteropError, match=f"rope.scaling.kind='{kind}'"):
            save_hf(model, tmp_path / "out")
        assert not (tmp_path / "out").exists()
        # refused: position remaps, and NTK-RoPE-mixed's per-pair stretch (no HF rope_type has it)
        assert ROPE_KINDS[kind].remaps_positions or kind == "ntk_mixed"
        return
    assert config_diff(config, FAMILIES["llama"]) == []
    save_hf(model, tmp_path / "out", family="llama")
    hf = json.loads((tmp_path / "out" / "config.json").read_text())
    back = config_from_hf(hf, FAMILIES["llama"])
    ours = RotaryEmbedding(config.rope_dim, config.rope.theta, "half", scaling, 0)
    theirs = RotaryEmbedding(back.rope_dim, back.rope.theta, "half", back.rope.scaling, 0)
    positions = torch.arange(100)[None]
    for a, b in zip(ours(positions), theirs(positions)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)

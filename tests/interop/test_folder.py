"""Reading Hugging Face folders: config dialects, dtypes, shards, tied heads, and one clear line for
every malformed folder, raised before any tensor is read."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, LlamaConfig

from archlab import InteropError, ModelConfig, TransformerLM, from_hf, save_hf
from archlab.interop.folder import HFFolder
from tests.interop.family_cases import llama_like
from tests.interop.test_families import randomize_hf_

Q0 = "model.layers.0.self_attn.q_proj.weight"


@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    hf = randomize_hf_(AutoModelForCausalLM.from_config(LlamaConfig(**llama_like())), 1.0).eval()
    folder = tmp_path_factory.mktemp("llama")
    hf.save_pretrained(folder)
    return folder


@pytest.fixture
def copy_dir(llama_dir: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(llama_dir, tmp_path / "copy"))


def edit_weights(folder: Path, change: callable) -> None:
    weights = load_file(folder / "model.safetensors")
    change(weights)
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})


def edit_config(folder: Path, change: callable) -> None:
    config = json.loads((folder / "config.json").read_text())
    change(config)
    (folder / "config.json").write_text(json.dumps(config))


@pytest.fixture
def no_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records every tensor read, to show that a bad folder fails before any."""
    reads: list[str] = []
    real = HFFolder.get
    monkeypatch.setattr(HFFolder, "get", lambda self, key: reads.append(key) or real(self, key))
    return reads


def _drop(key: str) -> callable:
    return lambda w: w.pop(key)


MALFORMED = {
    "missing-key": (lambda d: edit_weights(d, _drop(Q0)), f"model.safetensors: '{Q0}' is missing"),
    "unexpected-key": (
        lambda d: edit_weights(d, lambda w: w.update(extra=torch.zeros(2))),
        "model.safetensors: unexpected key 'extra'",
    ),
    "shape": (
        lambda d: edit_weights(d, lambda w: w.update({Q0: torch.zeros(3, 64)})),
        f"model.safetensors: '{Q0}' has shape \\[3, 64\\], the config says \\[64, 64\\]",
    ),
    "dtype": (
        lambda d: edit_weights(d, lambda w: w.update({Q0: w[Q0].long()})),
        f"model.safetensors: '{Q0}' is stored as I64",
    ),
    "truncated": (
        lambda d: (d / "model.safetensors").write_bytes(
            (d / "model.safetensors").read_bytes()[:5000]
        ),
        "model.safetensors cannot be read, truncated or corrupt",
    ),
    "no-weights": (lambda d: (d / "model.safetensors").unlink(), "has no model.safetensors"),
    "pickle-only": (
        lambda d: (d / "model.safetensors").rename(d / "pytorch_model.bin"),
        "pytorch_model.bin is a pickle .*save_pretrained\\(OUT, safe_serialization=True\\)",
    ),
    "bad-index": (
        lambda d: (d / "model.safetensors.index.json").write_text("{not json"),
        "model.safetensors.index.json is not valid JSON",
    ),
    "index-missing-shard": (
        lambda d: (d / "model.safetensors.index.json").write_text(
            json.dumps({"weight_map": {Q0: "model-00002-of-00002.safetensors"}})
        ),
        "maps '.*' to model-00002-of-00002.safetensors, which is missing",
    ),
    "index-wrong-file": (
        lambda d: (d / "model.safetensors.index.json").write_text(
            json.dumps({"weight_map": {"nowhere": "model.safetensors"}})
        ),
        "maps 'nowhere' to model.safetensors, which does not hold",
    ),
    "no-config": (lambda d: (d / "config.json").unlink(), "config.json is missing"),
    "unknown-family": (
        lambda d: edit_config(d, lambda c: c.update(model_type="mamba")),
        "model_type 'mamba' is not supported: one of llama, mistral",
    ),
    "rope-type": (
        lambda d: edit_config(d, lambda c: c.update(rope_parameters={"rope_type": "longrope"})),
        "rope_type='longrope' is not supported",
    ),
    "unmapped-flag": (
        lambda d: edit_config(d, lambda c: c.update(model_type="mistral", attention_bias=True)),
        "config.json attention_bias=True is not supported for model_type 'mistral'",
    ),
}


@pytest.mark.parametrize("name", MALFORMED)
def test_malformed_folder_fails_in_one_line_before_reading(
    name: str, copy_dir: Path, no_reads: list[str]
) -> None:
    damage, message = MALFORMED[name]
    damage(copy_dir)
    with pytest.raises(InteropError, match=message) as err:
        from_hf(copy_dir)
    assert "\n" not in str(err.value)
    assert no_reads == []


def test_legacy_config_dialect_reads_the_same(copy_dir: Path, tmp_path: Path) -> None:
    """Top-level rope_theta + rope_scaling (Hub files before transformers 5) == rope_parameters."""
    v5 = Path(shutil.copytree(copy_dir, tmp_path / "v5"))
    edit_config(
        v5,
        lambda c: c.update(
            rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 5e5}
        ),
    )
    edit_config(
        copy_dir,
        lambda c: (
            c.pop("rope_parameters"),
            c.update(rope_theta=5e5, rope_scaling={"type": "linear", "factor": 2.0}),
        ),
    )
    assert from_hf(copy_dir).config == from_hf(v5).config
    assert from_hf(copy_dir).config.rope.scaling.factor == 2.0
    assert from_hf(copy_dir).config.rope.theta == 5e5


def test_bf16_folder_loads_as_stored_or_cast(llama_dir: Path, tmp_path: Path) -> None:
    AutoModelForCausalLM.from_pretrained(llama_dir, dtype=torch.bfloat16).save_pretrained(tmp_path)
    stored = from_hf(tmp_path)
    assert stored.embed_tokens.weight.dtype == torch.bfloat16
    cast = from_hf(tmp_path, dtype=torch.float32)
    assert cast.embed_tokens.weight.dtype == torch.float32
    assert torch.equal(
        cast.layers[0].attn.qkv_proj.weight, stored.layers[0].attn.qkv_proj.weight.float()
    )
    assert torch.equal(
        stored.embed_tokens.weight.float(),
        from_hf(llama_dir).embed_tokens.weight.bfloat16().float(),
    )


def test_sharded_folder_loads(llama_dir: Path, tmp_path: Path) -> None:
    AutoModelForCausalLM.from_pretrained(llama_dir).save_pretrained(tmp_path, max_shard_size="40KB")
    assert len(list(tmp_path.glob("model-*-of-*.safetensors"))) > 2
    sharded, single = from_hf(tmp_path), from_hf(llama_dir)
    for (name, a), (_, b) in zip(sharded.state_dict().items(), single.state_dict().items()):
        assert torch.equal(a, b), name


def test_tied_folder_without_head_loads(tmp_path: Path) -> None:
    torch.manual_seed(0)
    hf = randomize_hf_(
        AutoModelForCausalLM.from_config(LlamaConfig(**llama_like(tie_word_embeddings=True))), 1.0
    )
    hf.eval().save_pretrained(tmp_path)
    assert "lm_head.weight" not in load_file(tmp_path / "model.safetensors")
    ours = from_hf(tmp_path)
    assert ours.lm_head.weight is ours.embed_tokens.weight
    ids = torch.randint(0, 96, (1, 20))
    with torch.no_grad():
        assert (ours(ids) - hf(ids).logits).abs().max() <= 1e-4


def test_load_on_meta_leaves_no_meta_tensor(llama_dir: Path) -> None:
    model = from_hf(llama_dir)
    assert not any(t.is_meta for t in [*model.parameters(), *model.buffers()])


@pytest.mark.parametrize(
    "fields, switch",
    [
        (dict(norm_position="post", norm="layernorm"), "norm_position='post'"),
        (dict(position="alibi"), "position='alibi'"),
        (dict(key_norm=True), "key_norm=True"),
        (dict(query_norm=True), "query_norm=True"),
        (dict(cosine={}), r"cosine=\{'scale': 'fixed'\}"),
        (dict(norm_position="deepnorm", norm="layernorm"), "norm_position='deepnorm'"),
        (dict(block="gau", n_heads=1), "block='gau'"),
    ],
)
def test_save_hf_names_the_switch_no_family_has(fields: dict, switch: str, tmp_path: Path) -> None:
    model = TransformerLM(ModelConfig(**fields))
    with pytest.raises(
        InteropError, match=f"no Hugging Face family expresses this model.*{switch}"
    ):
        save_hf(model, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_save_hf_refuses_a_nonzero_bias_the_family_lacks(tmp_path: Path) -> None:
    model = TransformerLM(ModelConfig(bias=True, mlp_bias=False))
    with torch.no_grad():
        model.layers[0].attn.o_proj.bias.fill_(0.5)
    with pytest.raises(
        InteropError, match="layers.0.attn.o_proj.bias is non-zero, and model_type 'qwen2'"
    ):
        save_hf(model, tmp_path / "out", family="qwen2")
    save_hf(model, tmp_path / "out")  # llama's attention_bias covers o_proj
    assert json.loads((tmp_path / "out" / "config.json").read_text())["model_type"] == "llama"


@pytest.mark.parametrize(
    "model_type, change, message",
    [
        ("phi", dict(qk_layernorm=True), "qk_layernorm=True is not supported for model_type 'phi'"),
        (
            "gpt2",
            dict(scale_attn_by_inverse_layer_idx=True),
            "scale_attn_by_inverse_layer_idx=True is not supported",
        ),
        (
            "llama",
            dict(partial_rotary_factor=0.5),
            "partial_rotary_factor=0.5 is not supported .* whole heads",
        ),
        (
            "gptj",
            dict(rope_scaling={"rope_type": "linear", "factor": 2.0}, rotary_dim=8),
            "rope_type='linear' is not supported",
        ),
        (
            "gptj",
            dict(rope_theta=5e5, rotary_dim=8),
            "rope_theta=500000.0 is not supported .* fixed at 10000",
        ),
        (
            "mistral",
            dict(layer_types=["sliding_attention", "full_attention"]),
            "layer_types=.* every layer or none",
        ),
        ("olmo2", dict(clip_qkv=8.0), "clip_qkv=8.0 is not supported for model_type 'olmo2'"),
        ("gemma", dict(hidden_act="gelu_fast"), "hidden_act='gelu_fast' is not supported"),
        (
            "gpt2",
            dict(resid_pdrop=0.1, embd_pdrop=0.2),
            "embd_pdrop=0.2 disagrees with another key",
        ),
        (
            "gemma3_text",
            dict(
                rope_parameters=dict(
                    full_attention=dict(rope_type="linear", factor=2.0),
                    sliding_attention=dict(rope_type="linear", factor=3.0),
                )
            ),
            "rope_parameters.sliding_attention=.* no RoPE scaling or the full layers'",
        ),
        (
            "gemma3_text",
            dict(rope_parameters=dict(rope_type="default", rope_theta=1e4)),
            "keyed by layer type",
        ),
        (
            "gemma3_text",
            dict(sliding_window=None),
            "sliding_window=None is not supported .* 'sliding_attention' layers",
        ),
        (
            "gemma3_text",
            dict(sliding_window_pattern=0),
            "sliding_window_pattern=0 is not supported",
        ),
        (
            "gemma3_text",
            dict(use_bidirectional_attention=True),
            "use_bidirectional_attention=True is not supported",
        ),
        ("gemma3", dict(), "model_type 'gemma3' has no 'text_config' dict"),
        (
            "smollm3",
            dict(no_rope_layers=[1]),
            "no_rope_layers=\\[1\\] is not supported .* at least 2 entries",
        ),
        ("smollm3", dict(no_rope_layers=[1, 2]), "no_rope_layers=\\[1, 2\\] is not supported"),
        ("smollm3", dict(no_rope_layer_interval=0), "no_rope_layer_interval=0 is not supported"),
        (
            "smollm3",
            dict(sliding_window=8, layer_types=["sliding_attention", "full_attention"]),
            "use_sliding_window=None is not supported .* true when layer_types "
            "has 'sliding_attention' layers",
        ),
    ],
)
def test_unmappable_config_values_are_refused_by_name(
    model_type: str, change: dict, message: str
) -> None:
    from archlab.interop.hf import family_of
    from archlab.interop.hf_config import config_from_hf

    config = (
        dict(
            model_type=model_type,
            vocab_size=96,
            hidden_size=64,
            n_embd=64,
            num_attention_heads=4,
            n_head=4,
            num_hidden_layers=2,
            n_layer=2,
            intermediate_size=96,
            head_dim=16,
        )
        | change
    )
    with pytest.raises(InteropError, match=message):
        config_from_hf(config, family_of(config))


def test_export_names_an_activation_the_family_cannot_spell(tmp_path: Path) -> None:
    """Gemma reads "gelu" as the tanh GELU, so a (1+w)-norm GeGLU with the exact erf GELU
    has no family."""
    config = ModelConfig(
        norm_unit_offset=True, embed_scale="sqrt_d", ffn="geglu", tie_embeddings=True
    )
    with pytest.raises(InteropError, match="activation='gelu'"):
        save_hf(TransformerLM(config), tmp_path, family="gemma")


def test_gemma_bf16_embedding_scale_is_rounded_like_transformers(tmp_path: Path) -> None:
    """Gemma multiplies by sqrt(hidden) cast to the dtype (bf16: sqrt(48) = 6.93 -> 6.9375): the
    first layer's input must equal transformers' bit for bit."""
    from transformers import GemmaConfig

    torch.manual_seed(0)
    config = GemmaConfig(**llama_like(hidden_size=48, num_attention_heads=4, head_dim=16))
    randomize_hf_(AutoModelForCausalLM.from_config(config), 0.0).save_pretrained(tmp_path)
    hf = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.bfloat16).eval()
    ours = from_hf(tmp_path)
    ours.to(torch.bfloat16)
    seen: list[torch.Tensor] = []
    ours.layers[0].register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    ids = torch.randint(0, 96, (1, 16))
    with torch.no_grad():
        ours(ids)
        assert torch.equal(seen[0], hf.model.embed_tokens(ids))


def test_loaded_weights_survive_rewriting_the_folder(copy_dir: Path) -> None:
    """Parameters never stay on safetensors' memory map: save_hf over the folder they came from
    (which truncates nothing, and even a truncating writer) leaves them readable."""
    model = from_hf(copy_dir)
    expected = model.embed_tokens.weight.clone()
    save_hf(model, copy_dir)
    (copy_dir / "model.safetensors").write_bytes(b"")
    assert torch.equal(model.embed_tokens.weight, expected)


def test_original_gpt2_files_without_the_base_prefix_load(tmp_path: Path) -> None:
    """The original GPT-2 files name tensors `h.0.attn.c_attn.weight`, `wte.weight` and keep the
    causal-mask buffers `h.{i}.attn.bias`: the prefix is optional and the buffers are skipped."""
    from transformers import GPT2Config

    from tests.interop.family_cases import gpt_like

    torch.manual_seed(0)
    hf = randomize_hf_(AutoModelForCausalLM.from_config(GPT2Config(**gpt_like())), 1.0).eval()
    hf.save_pretrained(tmp_path)
    weights = {
        k.removeprefix("transformer."): v
        for k, v in load_file(tmp_path / "model.safetensors").items()
    }
    weights["h.0.attn.bias"] = torch.ones(1, 1, 48, 48)
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    ids = torch.randint(0, 96, (1, 48))
    with torch.no_grad():
        assert (from_hf(tmp_path)(ids) - hf(ids).logits).abs().max() <= 1e-4

"""A model's weights (checkpoint/weights.py): a tied head stored once and re-tied, unreadable or
misfitting weights named, and the model built on the meta device with the saved model's logits."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from archlab import TransformerLM
from archlab.checkpoint import CheckpointError, load_model, tied_aliases
from tests.checkpoint.conftest import rehash, save, tiny_model


def test_tied_head_is_stored_once_and_retied_on_load(tmp_path: Path, tokenizer_file: Path) -> None:
    model = tiny_model("gpt2")
    assert tied_aliases(model) == {"lm_head.weight": "embed_tokens.weight"}
    path = save(tmp_path / "run", 3, model, tokenizer_file)
    with safe_open(path / "model.safetensors", framework="pt") as f:
        assert "lm_head.weight" not in f.keys() and "embed_tokens.weight" in f.keys()
    loaded, tok = load_model(path)
    assert loaded.lm_head.weight is loaded.embed_tokens.weight
    assert tok.vocab_size == 256 and not loaded.training
    ids = torch.randint(0, 256, (2, 9))
    assert torch.equal(loaded(ids), model.eval()(ids))


def test_unreadable_safetensors_is_named_even_with_a_matching_manifest(
    tmp_path: Path, tokenizer_file: Path
) -> None:
    path = save(tmp_path / "run", 4, tiny_model(), tokenizer_file)
    (path / "model.safetensors").write_bytes(b"\x00" * 16)
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["files"]["model.safetensors"] = {
        "bytes": 16,
        "sha256": hashlib.sha256(b"\x00" * 16).hexdigest(),
    }
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match="model.safetensors cannot be read"):
        load_model(path)


def test_weights_that_do_not_fit_the_config_are_named(tmp_path: Path, tokenizer_file: Path) -> None:
    path = save(tmp_path / "run", 1, tiny_model(), tokenizer_file)
    config = json.loads((path / "config.json").read_text())
    config["model"]["d_ff"] = 96  # the weights were built with the default width
    (path / "config.json").write_text(json.dumps(config))
    rehash(path)
    with pytest.raises(
        CheckpointError,
        match=r"layers.0.mlp.up_proj.weight is \[128, 32\] in model.safetensors but "
        r"config.json builds \[96, 32\]",
    ):
        load_model(path)


@pytest.mark.parametrize("preset", ["original", "gpt2", "llama", "gemma2", "gptj", "hwfa", "hwfa2"])
def test_load_model_builds_without_random_init_and_gives_the_same_logits(
    preset: str, tmp_path: Path, tokenizer_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint's model is built on the meta device: init_weights never touches a real tensor,
    every buffer (RoPE tables, ALiBi slopes) is computed, a tied head is one tensor, and the logits
    equal the saved model's."""
    from tests.conftest import randomize_

    model = randomize_(tiny_model(preset), 0.2).eval()
    save(tmp_path / "run", 1, model, tokenizer_file)
    real_inits: list[bool] = []
    original = TransformerLM.init_weights

    def spy(self: TransformerLM, seed: int | None = None) -> None:
        real_inits.append(not self.embed_tokens.weight.is_meta)
        original(self, seed)

    monkeypatch.setattr(TransformerLM, "init_weights", spy)
    loaded, _ = load_model(tmp_path / "run")
    # built (on meta), never randomly initialised for real
    assert real_inits and not any(real_inits)
    assert not any(t.is_meta for t in [*loaded.parameters(), *loaded.buffers()])
    if loaded.config.tie_embeddings:
        assert loaded.lm_head.weight is loaded.embed_tokens.weight
    for (name, a), (_, b) in zip(model.named_buffers(), loaded.named_buffers()):
        assert torch.equal(a, b), name
    ids = torch.randint(
        0, model.config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(0)
    )
    with torch.no_grad():
        assert torch.equal(loaded(ids), model(ids))

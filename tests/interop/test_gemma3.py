"""Gemma 3 beyond the family parity cases: the legacy RoPE keys (`rope_theta`,
`rope_local_base_freq` and a `rope_scaling` for the full layers only) read as transformers reads
them, and the multimodal `Gemma3ForConditionalGeneration` folder loads its text model with
transformers' logits and greedy tokens, and exports as `gemma3_text`."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import transformers

from archlab import InteropError, from_hf, save_hf
from archlab.infer.generate import generate
from archlab.infer.sampling import SamplingConfig
from tests.interop.family_cases import ROPE, VOCAB, WINDOW, gemma3_like
from tests.interop.test_families import TOL, fresh_hf, randomize_hf_

LENGTH = 40  # past the window of 8
IMAGE_IDS = dict(image_token_index=VOCAB - 1, boi_token_index=VOCAB - 3, eoi_token_index=VOCAB - 2)
TINY_VISION = dict(
    model_type="siglip_vision_model",
    hidden_size=16,
    intermediate_size=32,
    num_hidden_layers=1,
    num_attention_heads=2,
    image_size=28,
    patch_size=14,
)


def text_kwargs() -> dict:
    """Window layers with base 50, full layers with base 1000 and linear x2: the scaling on
    full layers only."""
    return gemma3_like(
        dict(ROPE, rope_type="linear", factor=2.0, rope_theta=1000.0),
        dict(ROPE, rope_theta=50.0),
        sliding_window_pattern=2,
        max_position_embeddings=LENGTH,
    )


def ids(length: int = LENGTH) -> torch.Tensor:
    """Text tokens only (below the image, begin- and end-of-image ids)."""
    return torch.randint(0, VOCAB - 3, (2, length), generator=torch.Generator().manual_seed(1))


@pytest.fixture(scope="module")
def text_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    hf = transformers.AutoModelForCausalLM.from_config(
        transformers.Gemma3TextConfig(**text_kwargs())
    )
    folder = tmp_path_factory.mktemp("gemma3_text")
    randomize_hf_(hf, 0.0).eval().save_pretrained(folder)
    return folder


@pytest.fixture(scope="module", params=[True, False], ids=["tied", "untied"])
def multimodal_dir(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """A tiny random Gemma3ForConditionalGeneration; the wrapper's tie_word_embeddings is the one
    that counts, so the text config says the opposite."""
    torch.manual_seed(0)
    text = text_kwargs() | dict(tie_word_embeddings=not request.param)
    config = transformers.Gemma3Config(
        text_config=text,
        vision_config=TINY_VISION,
        mm_tokens_per_image=4,
        tie_word_embeddings=request.param,
        **IMAGE_IDS,
    )
    folder = tmp_path_factory.mktemp("gemma3")
    randomize_hf_(transformers.Gemma3ForConditionalGeneration(config), 0.0).eval().save_pretrained(
        folder
    )
    return folder


def multimodal_hf(folder: Path) -> torch.nn.Module:
    return transformers.Gemma3ForConditionalGeneration.from_pretrained(
        folder, dtype=torch.float32
    ).eval()


def test_legacy_rope_keys_read_as_transformers_reads_them(text_dir: Path, tmp_path: Path) -> None:
    legacy = Path(shutil.copytree(text_dir, tmp_path / "legacy"))
    config = json.loads((legacy / "config.json").read_text())
    rope = config.pop("rope_parameters")
    config |= dict(
        rope_theta=rope["full_attention"]["rope_theta"],
        rope_scaling=dict(rope_type="linear", factor=2.0),
        rope_local_base_freq=rope["sliding_attention"]["rope_theta"],
    )
    (legacy / "config.json").write_text(json.dumps(config))
    ours = from_hf(legacy)
    assert ours.config == from_hf(text_dir).config
    rope = ours.config.rope
    assert (rope.theta, rope.local_theta, rope.local_scaling) == (1000.0, 50.0, False)
    with torch.no_grad():
        want, got = fresh_hf(legacy)(ids()).logits, ours(ids())
    assert (got - want).abs().max().item() <= TOL


def test_multimodal_folder_loads_its_text_model(multimodal_dir: Path) -> None:
    ours = from_hf(multimodal_dir)
    assert ours.config.window_pattern == "SF" and ours.config.sliding_window == WINDOW
    with torch.no_grad():
        want, got = multimodal_hf(multimodal_dir)(input_ids=ids()).logits, ours(ids())
    assert (got - want).abs().max().item() <= TOL


def test_multimodal_greedy_decoding_matches_transformers(multimodal_dir: Path) -> None:
    prompt = ids()[:1, :8]
    new = LENGTH - 8
    want = multimodal_hf(multimodal_dir).generate(
        input_ids=prompt, max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0
    )
    got = generate(
        from_hf(multimodal_dir),
        [prompt[0].tolist()],
        SamplingConfig(max_new_tokens=new, temperature=0.0),
    )
    assert got.tokens[0] == want[0, prompt.shape[1] :].tolist()


def test_multimodal_exports_as_gemma3_text(multimodal_dir: Path, tmp_path: Path) -> None:
    ours = from_hf(multimodal_dir)
    save_hf(ours, tmp_path / "out")
    assert json.loads((tmp_path / "out" / "config.json").read_text())["model_type"] == "gemma3_text"
    with torch.no_grad():
        want, got = (
            multimodal_hf(multimodal_dir)(input_ids=ids()).logits,
            fresh_hf(tmp_path / "out")(ids()).logits,
        )
    assert (got - want).abs().max().item() <= TOL
    with pytest.raises(
        InteropError, match="model_type 'gemma3' is read only .* export one of llama, "
    ):
        save_hf(ours, tmp_path / "refused", family="gemma3")
    assert not (tmp_path / "refused").exists()


def test_multimodal_folder_with_in_memory_names_loads(multimodal_dir: Path, tmp_path: Path) -> None:
    """Files written from transformers' in-memory names (`model.language_model.*`,
    `model.vision_tower.*`, `lm_head.weight`) load as the saved names do,
    with transformers' logits."""
    from safetensors.torch import load_file, save_file

    renamed = Path(shutil.copytree(multimodal_dir, tmp_path / "renamed"))
    (file,) = renamed.glob("*.safetensors")
    tensors = load_file(file)
    moves = [
        ("language_model.model.", "model.language_model."),
        ("language_model.lm_head.", "lm_head."),
        ("vision_tower.", "model.vision_tower."),
        ("multi_modal_projector.", "model.multi_modal_projector."),
    ]

    def rename(key: str) -> str:
        return next((new + key.removeprefix(old) for old, new in moves if key.startswith(old)), key)

    save_file({rename(k): v for k, v in tensors.items()}, file, metadata={"format": "pt"})
    assert any(k.startswith("model.language_model.") for k in load_file(file))
    ours = from_hf(renamed)
    with torch.no_grad():
        want, got = multimodal_hf(multimodal_dir)(input_ids=ids()).logits, ours(ids())
    assert (got - want).abs().max().item() <= TOL

"""`archlab convert` both ways, and `generate` / `inspect` on a Hugging Face folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig

from archlab.checkpoint import load_model
from archlab.cli import main
from archlab.data.tokenizer import build_tokenizer
from archlab.interop import from_hf
from tests.interop.family_cases import llama_like
from tests.interop.test_families import randomize_hf_


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama over the 256 byte ids, with a tokenizer.json."""
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("hf")
    config = LlamaConfig(**llama_like(vocab_size=256, max_position_embeddings=64))
    randomize_hf_(AutoModelForCausalLM.from_config(config), 1.0).eval().save_pretrained(folder)
    build_tokenizer("byte", 256, None).save(folder)
    return folder


def test_convert_from_hf_and_back(hf_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    assert main(["convert", "--from-hf", str(hf_dir), "--out", str(tmp_path / "run")]) == 0
    model, tokenizer = load_model(tmp_path / "run")
    ids = torch.tensor([tokenizer.encode("hello world, again")])
    with torch.no_grad():
        assert torch.equal(model(ids), from_hf(hf_dir)(ids))
    assert main(["convert", "--to-hf", str(tmp_path / "run"), "--out", str(tmp_path / "back")]) == 0
    assert (tmp_path / "back" / "tokenizer.json").is_file()
    with torch.no_grad():
        want = AutoModelForCausalLM.from_pretrained(hf_dir)(ids).logits
        got = AutoModelForCausalLM.from_pretrained(tmp_path / "back")(ids).logits
    assert (got - want).abs().max() <= 1e-5
    assert "wrote" in capsys.readouterr().out


def test_convert_round_trips_gemma3_per_layer_rope(tmp_path: Path) -> None:
    """Gemma 3's local base and full-layer-only scaling survive the archlab checkpoint and come back."""
    from transformers import Gemma3TextConfig

    from tests.interop.family_cases import ROPE, gemma3_like

    torch.manual_seed(0)
    config = Gemma3TextConfig(**gemma3_like(dict(ROPE, rope_type="linear", factor=2.0, rope_theta=1000.0),
                                            dict(ROPE, rope_theta=50.0), vocab_size=256, sliding_window_pattern=2))
    randomize_hf_(AutoModelForCausalLM.from_config(config), 0.0).eval().save_pretrained(tmp_path / "hf")
    build_tokenizer("byte", 256, None).save(tmp_path / "hf")
    assert main(["convert", "--from-hf", str(tmp_path / "hf"), "--out", str(tmp_path / "run")]) == 0
    model, _ = load_model(tmp_path / "run")
    assert (model.config.rope_theta_local, model.config.rope_scaling_local) == (50.0, False)
    assert main(["convert", "--to-hf", str(tmp_path / "run"), "--out", str(tmp_path / "back")]) == 0
    ids = torch.randint(0, 256, (1, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = AutoModelForCausalLM.from_pretrained(tmp_path / "hf")(ids).logits
        got = AutoModelForCausalLM.from_pretrained(tmp_path / "back")(ids).logits
    assert (got - want).abs().max() <= 1e-5


def test_generate_and_inspect_read_a_hf_folder(hf_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    main(["convert", "--from-hf", str(hf_dir), "--out", str(tmp_path / "run")])
    capsys.readouterr()
    texts = []
    for source in (hf_dir, tmp_path / "run"):
        argv = ["generate", "--checkpoint", str(source), "--prompt", "ab", "--max-new-tokens", "8",
                "--temperature", "0"]
        assert main(argv) == 0
        texts.append(capsys.readouterr().out)
    assert texts[0] == texts[1] and texts[0].startswith("ab")
    assert main(["inspect", "--checkpoint", str(hf_dir), "--json", "--n_layers", "3"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["config"]["d_model"] == 64 and report["config"]["n_layers"] == 3


def test_convert_errors_are_one_line(hf_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "bare").mkdir()
    for name in ("config.json", "model.safetensors"):
        (tmp_path / "bare" / name).write_bytes((hf_dir / name).read_bytes())
    assert main(["convert", "--from-hf", str(tmp_path / "bare"), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("archlab convert: error:") and "tokenizer.json is missing" in err and "\n" not in err
    assert main(["convert", "--from-hf", str(hf_dir), "--out", str(tmp_path / "run"), "--dtype", "int8"]) == 2
    assert "--dtype='int8' is not allowed" in capsys.readouterr().err


def test_train_init_from_a_hf_folder_with_fewer_kv_heads(hf_dir: Path, tmp_path: Path) -> None:
    """`archlab train --init-from HF_DIR --model.n_kv_heads 1`: with lr 0 the saved weights are exactly the
    mean-pooled source, and the run uses the folder's tokenizer."""
    from archlab.interop.surgery import adapt

    (tmp_path / "corpus.txt").write_text("def f(x):\n    return x + 1\n" * 200)
    flags = ["--init-from", str(hf_dir), "--data", str(tmp_path / "corpus.txt"), "--steps", "1",
             "--out", str(tmp_path / "run"), "--model.n_kv_heads", "1", "--optimizer.lr", "0",
             "--schedule.warmup_steps", "0", "--data.batch_size", "2", "--data.block_size", "32",
             "--logging.samples", "0", "--logging.eval_every", "0", "--logging.tensorboard", "false",
             "--logging.progress", "false"]
    assert main(["train", *flags]) == 0
    trained, _ = load_model(tmp_path / "run")
    source = from_hf(hf_dir)
    expected = adapt(source, trained.config)
    assert trained.config.n_kv_heads == 1 and trained.config.d_model == source.config.d_model
    for (name, a), (_, b) in zip(trained.state_dict().items(), expected.state_dict().items()):
        assert torch.equal(a, b), name


def test_train_init_from_refuses_an_unmapped_change(hf_dir: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "corpus.txt").write_text("x" * 1000)
    flags = ["--init-from", str(hf_dir), "--data", str(tmp_path / "corpus.txt"), "--out", str(tmp_path / "run"),
             "--model.d_ff", "64"]
    assert main(["train", *flags]) == 2
    assert "cannot change d_ff 96 -> 64: no principled weight mapping" in capsys.readouterr().err

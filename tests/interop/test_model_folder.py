"""interop/model_folder.py: one place opens a model folder, Hugging Face or archlab. Each kind is
found, read (config, tokenizer file) without weights, and loaded to the same weights and tokenizer
as the loader of its own kind gives; every refusal is one line naming the flag and the path."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from archlab import ModelConfig, TransformerLM, save_hf
from archlab.checkpoint import load_model, save_checkpoint
from archlab.data.tokenizer import build_tokenizer
from archlab.interop import from_hf, load_hf_tokenizer, read_hf_config
from archlab.interop.model_folder import ARCHLAB, HF, find_model, model_kind, open_model
from tests.conftest import randomize_

CONFIG = ModelConfig(vocab_size=256, d_model=32, n_layers=1, n_heads=4, max_seq_len=16)


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    torch.manual_seed(0)
    model = randomize_(TransformerLM(CONFIG), 0.2).eval()
    tokenizer = build_tokenizer("byte", 256, None)
    save_hf(model, root / "hf", tokenizer)
    tok_file = tokenizer.save(root / "tok")
    save_checkpoint(
        root / "run",
        3,
        model.state_dict(),
        {},
        {"step": 3},
        {"model": CONFIG.to_dict()},
        tok_file,
        {},
    )
    (root / "empty").mkdir()
    return {"hf": root / "hf", "run": root / "run", "empty": root / "empty", "root": root}


def test_each_kind_is_found_and_read_without_its_weights(folders: dict[str, Path]) -> None:
    hf, run = find_model(folders["hf"]), find_model(folders["run"])
    assert (
        model_kind(folders["hf"]),
        model_kind(folders["run"]),
        model_kind(folders["empty"]),
    ) == (HF, ARCHLAB, None)
    assert hf.hf and hf.checkpoint is None and hf.tokenizer_file == folders["hf"] / "tokenizer.json"
    # the run's latest
    assert not run.hf and run.checkpoint == folders["run"] / "checkpoints" / "step_0000003"
    assert run.tokenizer_file == run.checkpoint / "tokenizer.json" and run.tokenizer_file.is_file()
    assert hf.config() == read_hf_config(folders["hf"]) and run.config() == CONFIG
    assert run.saved()["model"] == CONFIG.to_dict() and hf.saved() == {}


def test_open_model_gives_what_each_kinds_own_loader_gives(folders: dict[str, Path]) -> None:
    ids = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(1))
    for path, (want, want_tok) in [
        (folders["hf"], (from_hf(folders["hf"]), load_hf_tokenizer(folders["hf"]))),
        (folders["run"], load_model(folders["run"])),
    ]:
        model, tokenizer = open_model(path)
        ours, theirs = model.state_dict(), want.state_dict()
        assert ours.keys() == theirs.keys() and all(
            torch.equal(ours[k], theirs[k]) for k in ours
        ), path
        with torch.no_grad():
            assert torch.equal(model.eval()(ids), want.eval()(ids))
        assert (
            tokenizer.encode("def f():") == want_tok.encode("def f():")
            and tokenizer.vocab_size == 256
        )
    halved, _ = open_model(folders["hf"], dtype=torch.bfloat16)
    assert {p.dtype for p in halved.parameters()} == {torch.bfloat16}


@pytest.mark.parametrize(
    ("name", "flag", "message"),
    [
        ("missing", "--checkpoint", "--checkpoint {path}: no such file or folder"),
        (
            "empty",
            "--init-from",
            "{path} is neither a checkpoint nor a run folder with checkpoints",
        ),
        (
            "hf-without-tokenizer",
            "--init-from",
            "--init-from {path}: this Hugging Face folder has no tokenizer.json",
        ),
    ],
)
def test_each_refusal_is_one_line_naming_the_flag_and_the_path(
    folders: dict[str, Path], name: str, flag: str, message: str, tmp_path: Path
) -> None:
    path = folders.get(name, folders["root"] / name)
    if name == "hf-without-tokenizer":
        path = tmp_path / name
        path.mkdir()
        for file in folders["hf"].iterdir():
            if file.name != "tokenizer.json":
                (path / file.name).write_bytes(file.read_bytes())
        # the config alone needs none
        assert find_model(path, flag).config() == read_hf_config(folders["hf"])
    with pytest.raises((FileNotFoundError, ValueError)) as err:
        open_model(path, flag)
    assert str(err.value).startswith(message.format(path=path)) and "\n" not in str(err.value)

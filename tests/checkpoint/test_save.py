"""Writing checkpoints (checkpoint/save.py): every file and a round trip, atomic writes (a crash's
temp folder, a full disk), an existing step kept, one file mode, pruning, and the step-0 weights a
run may keep."""

from __future__ import annotations

import errno
import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors import SafetensorError

from archlab.checkpoint import (
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    load_initial_weights,
    prune_checkpoints,
    read_run_config,
    save_checkpoint,
    save_initial_weights,
    tied_aliases,
    verify_checkpoint,
)
from archlab.storage import StorageError
from tests.checkpoint.conftest import save, tiny_model
from tests.conftest import SmallFilesystem


def test_checkpoint_holds_every_file_and_round_trips(tmp_path: Path, tokenizer_file: Path) -> None:
    model = tiny_model("llama")
    path = save(tmp_path / "run", 7, model, tokenizer_file, val_loss=1.5)
    assert sorted(p.name for p in path.iterdir()) == [
        "config.json",
        "manifest.json",
        "model.safetensors",
        "optimizer.pt",
        "state.pt",
        "tokenizer.json",
    ]
    ckpt = load_checkpoint(path)
    assert ckpt.step == 7 and ckpt.state["step"] == 7
    assert all(torch.equal(ckpt.model[k], v) for k, v in model.state_dict().items())
    assert json.loads((path / "manifest.json").read_text())["val_loss"] == 1.5
    assert read_run_config(tmp_path / "run")["model"] == model.config.to_dict()


def test_a_temp_folder_left_by_a_crash_is_ignored_then_removed(
    tmp_path: Path, tokenizer_file: Path
) -> None:
    run = tmp_path / "run"
    save(run, 1, tiny_model(), tokenizer_file)
    crashed = run / "checkpoints" / ".tmp-step_0000002-abc"
    crashed.mkdir()
    (crashed / "model.safetensors").write_bytes(b"half")
    assert latest_checkpoint(run).name == "step_0000001"
    save(run, 3, tiny_model(), tokenizer_file)
    assert not crashed.exists()
    assert [p.name for p in list_checkpoints(run)] == ["step_0000001", "step_0000003"]


def test_saving_an_existing_step_keeps_it(tmp_path: Path, tokenizer_file: Path) -> None:
    run = tmp_path / "run"
    first = save(run, 2, tiny_model(), tokenizer_file)
    stamp = (first / "manifest.json").stat().st_mtime_ns
    assert save(run, 2, tiny_model(), tokenizer_file) == first
    assert (first / "manifest.json").stat().st_mtime_ns == stamp


def test_prune_keeps_the_last_n_and_the_best(tmp_path: Path, tokenizer_file: Path) -> None:
    run = tmp_path / "run"
    model = tiny_model()
    for step, val in [(1, 3.0), (2, 1.0), (3, 2.0), (4, 2.5), (5, None)]:
        save(run, step, model, tokenizer_file, val)
    removed = prune_checkpoints(run, keep_last=2)
    assert [p.name for p in removed] == ["step_0000001", "step_0000003"]
    assert [p.name for p in list_checkpoints(run)] == [
        "step_0000002",
        "step_0000004",
        "step_0000005",
    ]


def test_disk_full_names_the_folder_and_keeps_the_previous_checkpoint(
    tmp_path: Path, tokenizer_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Anywhere (no mount needed): safetensors' own spelling of a full disk becomes the one line."""
    model = tiny_model()
    first = save(tmp_path / "run", 1, model, tokenizer_file)

    def full(*args: object, **kwargs: object) -> None:
        raise SafetensorError(
            "Error while serializing: I/O error: No space left on device (os error 28)"
        )

    monkeypatch.setattr("archlab.checkpoint.safetensors_file.save_file", full)
    with pytest.raises(StorageError) as caught:
        save(tmp_path / "run", 2, model, tokenizer_file)
    assert str(caught.value) == (
        f"no space left on device at {tmp_path / 'run' / 'checkpoints'}: checkpoint step 2 "
        f"was not written; the previous one ({first}) is still valid; free some space, then "
        "continue with --resume"
    )
    assert caught.value.errno == errno.ENOSPC
    assert list_checkpoints(tmp_path / "run") == [first] and verify_checkpoint(first)
    # no temp folder left
    assert [p.name for p in (tmp_path / "run" / "checkpoints").iterdir()] == [first.name]


def _trained(steps: int = 1) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    """A tiny model and an AdamW that has stepped: optimizer.pt then holds two
    tensors per parameter."""
    model = tiny_model()
    opt = torch.optim.AdamW(model.parameters())
    for _ in range(steps):
        model(torch.zeros(1, 4, dtype=torch.long)).float().sum().backward()
        opt.step()
    return model, opt


def _save(
    run: Path, step: int, model: torch.nn.Module, opt: torch.optim.Optimizer, tokenizer_file: Path
) -> Path:
    return save_checkpoint(
        run,
        step,
        model.state_dict(),
        opt.state_dict(),
        {"step": step},
        {"train": {}},
        tokenizer_file,
        tied_aliases(model),
    )


@pytest.mark.parametrize("failing", ["model.safetensors", "optimizer.pt"])
def test_a_really_full_disk_mid_checkpoint_is_one_line_and_keeps_the_previous_one(
    failing: str, small_filesystem: Callable[[int], SmallFilesystem], tokenizer_file: Path
) -> None:
    """On a tmpfs that really fills up, inside safetensors (its Rust error) or inside torch.save
    (the RuntimeError of inline_container.cc): one StorageError naming the folder and the step,
    the previous checkpoint intact and verified, no temp folder left; once space is freed the
    same save succeeds."""
    fs = small_filesystem(2048)
    run = fs.path / "run"
    model, opt = _trained()
    first = _save(run, 1, model, opt, tokenizer_file)
    sizes = {p.name: p.stat().st_size for p in first.iterdir()}
    before = {p.name: p.read_bytes() for p in first.iterdir()}
    # room for half the weights, or for the weights and half the optimizer state (files take whole
    # 4 KiB pages)
    room = (
        sizes["model.safetensors"] // 2
        if failing == "model.safetensors"
        else (sizes["model.safetensors"] + 4096 + sizes["optimizer.pt"] // 2)
    )
    # so the pages' rounding cannot move the fault to another file
    assert sizes["optimizer.pt"] // 2 > 3 * 4096
    fs.fill(leave=room)
    with pytest.raises(StorageError) as caught:
        _save(run, 2, model, opt, tokenizer_file)
    raised_by = {"model.safetensors": "SafetensorError", "optimizer.pt": "RuntimeError"}[failing]
    assert type(caught.value.__cause__).__name__ == raised_by, repr(caught.value.__cause__)
    assert str(caught.value).startswith(
        f"no space left on device at {run / 'checkpoints'}: checkpoint step 2 was "
        f"not written; the previous one ({first}) is still valid"
    )
    assert list_checkpoints(run) == [first] and verify_checkpoint(first)
    assert {p.name: p.read_bytes() for p in first.iterdir()} == before
    assert [p.name for p in (run / "checkpoints").iterdir()] == [first.name]
    fs.free()
    second = _save(run, 2, model, opt, tokenizer_file)
    assert list_checkpoints(run) == [first, second] and verify_checkpoint(second)


def test_checkpoint_files_share_one_mode(tmp_path: Path, tokenizer_file: Path) -> None:
    path = save(tmp_path / "run", 1, tiny_model(), tokenizer_file)
    assert {(p.stat().st_mode & 0o777) for p in path.iterdir()} == {0o644}


def test_initial_weights_round_trip_are_kept_and_never_a_checkpoint(tmp_path: Path) -> None:
    model = tiny_model("gpt2")  # tied: the alias comes back
    run = tmp_path / "run"
    assert load_initial_weights(run) is None  # a run that kept none
    path = save_initial_weights(run, model.state_dict(), tied_aliases(model))
    weights = load_initial_weights(run)
    assert weights.keys() == model.state_dict().keys()
    assert all(torch.equal(weights[k], v) for k, v in model.state_dict().items())
    with torch.no_grad():
        model.embed_tokens.weight.add_(1.0)
    # the first is kept
    assert save_initial_weights(run, model.state_dict(), tied_aliases(model)) == path
    assert not torch.equal(
        load_initial_weights(run)["embed_tokens.weight"], model.embed_tokens.weight
    )
    assert list_checkpoints(run) == [] and latest_checkpoint(run) is None
    assert [p.name for p in run.iterdir()] == ["initial"]  # no temp folder left behind

"""Checkpoints: tied weights stored once and re-tied, atomic writes, corruption named, pruning, RNG state,
`load_model` from a checkpoint or a run folder, and the step-0 weights a run may keep."""

from __future__ import annotations

import errno
import hashlib
import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open

from archlab import TransformerLM, build_preset
from archlab.checkpoint import (
    CheckpointError,
    capture_rng_state,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    load_initial_weights,
    load_model,
    module_training_state,
    prune_checkpoints,
    read_run_config,
    restore_rng_state,
    save_checkpoint,
    save_initial_weights,
    tied_aliases,
    verify_checkpoint,
)
from archlab.data.tokenizer import build_tokenizer


@pytest.fixture
def tokenizer_file(tmp_path: Path) -> Path:
    return build_tokenizer("byte", 256, None).save(tmp_path / "tok")


def tiny_model(preset: str = "gpt2") -> TransformerLM:
    torch.manual_seed(0)
    return TransformerLM(build_preset(preset, "tiny", d_model=32, n_layers=1))


def save(run: Path, step: int, model: TransformerLM, tokenizer_file: Path, val_loss: float | None = None) -> Path:
    opt = torch.optim.AdamW(model.parameters())
    config = {"model": model.config.to_dict(), "train": {"steps": 10}}
    state = {"step": step, "rng": [capture_rng_state()]}
    return save_checkpoint(run, step, model.state_dict(), opt.state_dict(), state, config, tokenizer_file,
                           tied_aliases(model), val_loss)


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


def test_load_model_accepts_a_run_folder_and_picks_the_latest(tmp_path: Path, tokenizer_file: Path) -> None:
    run = tmp_path / "run"
    model = tiny_model("llama")
    save(run, 2, model, tokenizer_file)
    with torch.no_grad():
        model.norm.weight.add_(1.0)
    save(run, 5, model, tokenizer_file)
    loaded, _ = load_model(run)
    assert torch.equal(loaded.norm.weight, model.norm.weight)
    assert [p.name for p in list_checkpoints(run)] == ["step_0000002", "step_0000005"]
    with pytest.raises(FileNotFoundError, match="neither a checkpoint nor a run folder"):
        load_model(tmp_path / "empty")


def test_checkpoint_holds_every_file_and_round_trips(tmp_path: Path, tokenizer_file: Path) -> None:
    model = tiny_model("llama")
    path = save(tmp_path / "run", 7, model, tokenizer_file, val_loss=1.5)
    assert sorted(p.name for p in path.iterdir()) == [
        "config.json", "manifest.json", "model.safetensors", "optimizer.pt", "state.pt", "tokenizer.json"]
    ckpt = load_checkpoint(path)
    assert ckpt.step == 7 and ckpt.state["step"] == 7
    assert all(torch.equal(ckpt.model[k], v) for k, v in model.state_dict().items())
    assert json.loads((path / "manifest.json").read_text())["val_loss"] == 1.5
    assert read_run_config(tmp_path / "run")["model"] == model.config.to_dict()


def test_a_temp_folder_left_by_a_crash_is_ignored_then_removed(tmp_path: Path, tokenizer_file: Path) -> None:
    run = tmp_path / "run"
    save(run, 1, tiny_model(), tokenizer_file)
    crashed = run / "checkpoints" / ".tmp-step_0000002-abc"
    crashed.mkdir()
    (crashed / "model.safetensors").write_bytes(b"half")
    assert latest_checkpoint(run).name == "step_0000001"
    save(run, 3, tiny_model(), tokenizer_file)
    assert not crashed.exists()
    assert [p.name for p in list_checkpoints(run)] == ["step_0000001", "step_0000003"]


@pytest.mark.parametrize(("damage", "message"), [
    ("truncate", r"model.safetensors has \d+ bytes, expected \d+ \(truncated\?\)"),
    ("delete", "incomplete: optimizer.pt is missing"),
    ("flip", "state.pt does not match its sha256"),
    ("manifest", "manifest.json is missing or unreadable"),
])
def test_corrupt_checkpoints_are_named(tmp_path: Path, tokenizer_file: Path, damage: str, message: str) -> None:
    path = save(tmp_path / "run", 4, tiny_model(), tokenizer_file)
    if damage == "truncate":
        data = (path / "model.safetensors").read_bytes()
        (path / "model.safetensors").write_bytes(data[: len(data) // 2])
    elif damage == "delete":
        (path / "optimizer.pt").unlink()
    elif damage == "flip":
        data = bytearray((path / "state.pt").read_bytes())
        data[len(data) // 2] ^= 0xFF
        (path / "state.pt").write_bytes(bytes(data))
    else:
        (path / "manifest.json").unlink()
    for load in (verify_checkpoint, load_checkpoint, load_model):
        with pytest.raises(CheckpointError, match=f"checkpoint {path}.*{message}"):
            load(path)


def test_unreadable_safetensors_is_named_even_with_a_matching_manifest(tmp_path: Path, tokenizer_file: Path) -> None:
    path = save(tmp_path / "run", 4, tiny_model(), tokenizer_file)
    (path / "model.safetensors").write_bytes(b"\x00" * 16)
    manifest = json.loads((path / "manifest.json").read_text())
    manifest["files"]["model.safetensors"] = {"bytes": 16, "sha256": hashlib.sha256(b"\x00" * 16).hexdigest()}
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match="model.safetensors cannot be read"):
        load_model(path)


def test_prune_keeps_the_last_n_and_the_best(tmp_path: Path, tokenizer_file: Path) -> None:
    run = tmp_path / "run"
    model = tiny_model()
    for step, val in [(1, 3.0), (2, 1.0), (3, 2.0), (4, 2.5), (5, None)]:
        save(run, step, model, tokenizer_file, val)
    removed = prune_checkpoints(run, keep_last=2)
    assert [p.name for p in removed] == ["step_0000001", "step_0000003"]
    assert [p.name for p in list_checkpoints(run)] == ["step_0000002", "step_0000004", "step_0000005"]


def test_saving_an_existing_step_keeps_it(tmp_path: Path, tokenizer_file: Path) -> None:
    run = tmp_path / "run"
    first = save(run, 2, tiny_model(), tokenizer_file)
    stamp = (first / "manifest.json").stat().st_mtime_ns
    assert save(run, 2, tiny_model(), tokenizer_file) == first
    assert (first / "manifest.json").stat().st_mtime_ns == stamp


def test_rng_state_round_trips_through_a_weights_only_load(tmp_path: Path) -> None:
    state = capture_rng_state()
    torch.save(state, tmp_path / "rng.pt")
    want = (torch.rand(3), random.random(), np.random.rand(2))
    restore_rng_state(torch.load(tmp_path / "rng.pt", weights_only=True))
    got = (torch.rand(3), random.random(), np.random.rand(2))
    assert torch.equal(want[0], got[0]) and want[1] == got[1] and np.array_equal(want[2], got[2])


def test_missing_checkpoint_folder_is_named(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="does not exist"):
        verify_checkpoint(tmp_path / "checkpoints" / "step_0000009")
    with pytest.raises(FileNotFoundError, match="no checkpoint in"):
        read_run_config(tmp_path)


# ---------------------------------------------------------------------------------- one-line failures
def rehash(path: Path) -> None:
    """Re-write the manifest's sizes and hashes, so only the change itself is left to be found."""
    manifest = json.loads((path / "manifest.json").read_text())
    for name, entry in manifest["files"].items():
        data = (path / name).read_bytes()
        entry.update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
    (path / "manifest.json").write_text(json.dumps(manifest))


def test_disk_full_names_the_folder_and_keeps_the_previous_checkpoint(
    tmp_path: Path, tokenizer_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = tiny_model()
    first = save(tmp_path / "run", 1, model, tokenizer_file)

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("archlab.checkpoint.save_file", full)
    with pytest.raises(CheckpointError) as caught:
        save(tmp_path / "run", 2, model, tokenizer_file)
    assert str(caught.value) == (f"no space left on device at {tmp_path / 'run' / 'checkpoints'}: checkpoint step 2 "
                                 f"was not written; the previous one ({first}) is still valid")
    assert list_checkpoints(tmp_path / "run") == [first] and verify_checkpoint(first)
    assert [p.name for p in (tmp_path / "run" / "checkpoints").iterdir()] == [first.name]  # no temp folder left


def test_checkpoint_files_share_one_mode(tmp_path: Path, tokenizer_file: Path) -> None:
    path = save(tmp_path / "run", 1, tiny_model(), tokenizer_file)
    assert {(p.stat().st_mode & 0o777) for p in path.iterdir()} == {0o644}


def test_weights_that_do_not_fit_the_config_are_named(tmp_path: Path, tokenizer_file: Path) -> None:
    path = save(tmp_path / "run", 1, tiny_model(), tokenizer_file)
    config = json.loads((path / "config.json").read_text())
    config["model"]["d_ff"] = 96  # the weights were built with the default width
    (path / "config.json").write_text(json.dumps(config))
    rehash(path)
    with pytest.raises(CheckpointError, match=r"layers.0.mlp.up_proj.weight is \[128, 32\] in model.safetensors but "
                                              r"config.json builds \[96, 32\]"):
        load_model(path)


@pytest.mark.parametrize(("edit", "message"), [
    (lambda m: m.pop("files"), "manifest.json has no 'files' table"),
    (lambda m: m.pop("step"), "manifest.json has no integer 'step'"),
    (lambda m: m["files"]["state.pt"].pop("sha256"), "manifest.json entry 'state.pt' lacks 'bytes' or 'sha256'"),
], ids=["no-files", "no-step", "no-sha256"])
def test_a_manifest_missing_keys_is_named(edit, message: str, tmp_path: Path, tokenizer_file: Path) -> None:
    path = save(tmp_path / "run", 1, tiny_model(), tokenizer_file)
    manifest = json.loads((path / "manifest.json").read_text())
    edit(manifest)
    (path / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(CheckpointError, match=f"checkpoint {path} is corrupt: {message}"):
        load_checkpoint(path)


class Payload:
    """Unpickling this would run code: exactly what a weights-only load must refuse."""

    def __reduce__(self) -> tuple:
        return (print, ("pickle ran",))


def test_a_pickled_file_is_refused_without_torch_s_advice(tmp_path: Path, tokenizer_file: Path,
                                                         capsys: pytest.CaptureFixture) -> None:
    path = save(tmp_path / "run", 1, tiny_model(), tokenizer_file)
    torch.save({"step": 1, "payload": Payload()}, path / "state.pt")
    rehash(path)
    with pytest.raises(CheckpointError) as caught:
        load_checkpoint(path)
    message = str(caught.value)
    assert message == (f"checkpoint {path}: state.pt holds Python objects, not only tensors; archlab loads "
                       "weights-only files and never runs code from a checkpoint")
    assert "weights_only" not in message and "\n" not in message
    assert "pickle ran" not in capsys.readouterr().out


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
    assert save_initial_weights(run, model.state_dict(), tied_aliases(model)) == path  # the first is kept
    assert not torch.equal(load_initial_weights(run)["embed_tokens.weight"], model.embed_tokens.weight)
    assert list_checkpoints(run) == [] and latest_checkpoint(run) is None
    assert [p.name for p in run.iterdir()] == ["initial"]  # no temp folder left behind


@pytest.mark.parametrize("preset", ["original", "gpt2", "llama", "gemma2", "gptj", "hwfa", "hwfa2"])
def test_load_model_builds_without_random_init_and_gives_the_same_logits(
    preset: str, tmp_path: Path, tokenizer_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint's model is built on the meta device: init_weights never touches a real tensor, every buffer
    (RoPE tables, ALiBi slopes) is computed, a tied head is one tensor, and the logits equal the saved model's."""
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
    assert real_inits and not any(real_inits)  # built (on meta), never randomly initialised for real
    assert not any(t.is_meta for t in [*loaded.parameters(), *loaded.buffers()])
    if loaded.config.tie_embeddings:
        assert loaded.lm_head.weight is loaded.embed_tokens.weight
    for (name, a), (_, b) in zip(model.named_buffers(), loaded.named_buffers()):
        assert torch.equal(a, b), name
    ids = torch.randint(0, model.config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(loaded(ids), model(ids))


def test_a_favor_model_trained_with_redraws_reloads_with_the_projection_it_reached(tmp_path: Path,
                                                                                   tokenizer_file: Path) -> None:
    """FAVOR+'s projection lives outside the state dict; with favor.redraw its training forwards decide which draw
    it holds. load_model puts back the count state.pt carries, so the reloaded model computes what the trained one
    did (not its seed's first draw), and so do the models eval length rebuilds from it."""
    import numpy as np

    from archlab import ModelConfig
    from archlab.eval.length import evaluate_lengths, window_loss
    from archlab.eval.samples import windows
    from archlab.nn.config import Favor

    cfg = ModelConfig(d_model=32, n_heads=4, n_layers=2, vocab_size=256, max_seq_len=32, attn_kernel="favor",
                      favor=Favor(features=16, redraw=2))
    torch.manual_seed(0)
    model = TransformerLM(cfg).train()
    ids = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        for _ in range(5):  # redraws at the 3rd and 5th forward: the third draw
            model(ids)
    model.eval()
    first = TransformerLM(cfg).layers[0].attn.linear.kernel.projection
    assert not torch.equal(first, model.layers[0].attn.linear.kernel.projection)
    opt = torch.optim.AdamW(model.parameters())
    run = save_checkpoint(tmp_path / "run", 5, model.state_dict(), opt.state_dict(),
                          {"step": 5, "modules": module_training_state(model)},
                          {"model": cfg.to_dict(), "train": {}}, tokenizer_file, tied_aliases(model))
    loaded, _ = load_model(run)
    for a, b in zip(loaded.layers, model.layers):
        assert torch.equal(a.attn.linear.kernel.projection, b.attn.linear.kernel.projection)
    with torch.no_grad():
        assert torch.equal(loaded(ids), model(ids))
    tokens = np.random.default_rng(0).integers(0, 256, 300)
    got = evaluate_lengths(loaded, tokens, [16], ["none", "linear"], 8, n_windows=2, progress=False)
    assert [r.loss for r in got] == pytest.approx([window_loss(model, windows(tokens, 16, 2), 8)] * 2, rel=1e-6)


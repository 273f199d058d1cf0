"""Reading checkpoints (checkpoint/load.py): `load_model` from a checkpoint or a run folder,
weights-only files (a pickled one is refused), and a FAVOR+ model's training state put back."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from archlab import TransformerLM
from archlab.checkpoint import (
    CheckpointError,
    list_checkpoints,
    load_checkpoint,
    load_model,
    module_training_state,
    save_checkpoint,
    tied_aliases,
)
from tests.checkpoint.conftest import rehash, save, tiny_model


def test_load_model_accepts_a_run_folder_and_picks_the_latest(
    tmp_path: Path, tokenizer_file: Path
) -> None:
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


class Payload:
    """Unpickling this would run code: exactly what a weights-only load must refuse."""

    def __reduce__(self) -> tuple:
        return (print, ("pickle ran",))


def test_a_pickled_file_is_refused_without_torch_s_advice(
    tmp_path: Path, tokenizer_file: Path, capsys: pytest.CaptureFixture
) -> None:
    path = save(tmp_path / "run", 1, tiny_model(), tokenizer_file)
    torch.save({"step": 1, "payload": Payload()}, path / "state.pt")
    rehash(path)
    with pytest.raises(CheckpointError) as caught:
        load_checkpoint(path)
    message = str(caught.value)
    assert message == (
        f"checkpoint {path}: state.pt holds Python objects, not only tensors; archlab loads "
        "weights-only files and never runs code from a checkpoint"
    )
    assert "weights_only" not in message and "\n" not in message
    assert "pickle ran" not in capsys.readouterr().out


def test_a_favor_model_trained_with_redraws_reloads_with_the_projection_it_reached(
    tmp_path: Path, tokenizer_file: Path
) -> None:
    """FAVOR+'s projection lives outside the state dict; with favor.redraw its training forwards
    decide which draw it holds. load_model puts back the count state.pt carries, so the reloaded
    model computes what the trained one did (not its seed's first draw), and so do the models eval
    length rebuilds from it."""
    import numpy as np

    from archlab import ModelConfig
    from archlab.eval.length import evaluate_lengths, window_loss
    from archlab.eval.samples import windows
    from archlab.nn.config import Favor

    cfg = ModelConfig(
        d_model=32,
        n_heads=4,
        n_layers=2,
        vocab_size=256,
        max_seq_len=32,
        attn_kernel="favor",
        favor=Favor(features=16, redraw=2),
    )
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
    run = save_checkpoint(
        tmp_path / "run",
        5,
        model.state_dict(),
        opt.state_dict(),
        {"step": 5, "modules": module_training_state(model)},
        {"model": cfg.to_dict(), "train": {}},
        tokenizer_file,
        tied_aliases(model),
    )
    loaded, _ = load_model(run)
    for a, b in zip(loaded.layers, model.layers):
        assert torch.equal(a.attn.linear.kernel.projection, b.attn.linear.kernel.projection)
    with torch.no_grad():
        assert torch.equal(loaded(ids), model(ids))
    tokens = np.random.default_rng(0).integers(0, 256, 300)
    got = evaluate_lengths(loaded, tokens, [16], ["none", "linear"], 8, n_windows=2, progress=False)
    assert [r.loss for r in got] == pytest.approx(
        [window_loss(model, windows(tokens, 16, 2), 8)] * 2, rel=1e-6
    )

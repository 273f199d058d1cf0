"""The training memory estimate (train/memory.py) against what torch really allocates, the one-line
refusal of a run that cannot fit, and partial fine-tunes (train/trainable.py): frozen parameters
stay bitwise the same and get no gradient or optimizer state."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from archlab.cli import main
from archlab.nn.model import TransformerLM
from archlab.nn.presets import build_preset
from archlab.train.memory import check_fits, training_bytes
from archlab.train.trainable import freeze_all_but, trainable_names
from tests.train.test_trainer import cli_flags, make_trainer


def saved_activation_bytes(model: TransformerLM, ids: torch.Tensor) -> int:
    """Bytes of every tensor autograd keeps for the backward of one training
    forward (distinct storages)."""
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        if not isinstance(t, torch.nn.Parameter) and t.requires_grad is not None:
            storage = t.untyped_storage()
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(ids, targets=ids).loss.backward()
    return sum(n for ptr, n in seen.items() if ptr not in params)


@pytest.mark.parametrize("preset", ["llama", "gpt2", "qwen3"])
def test_the_estimate_matches_real_gradients_optimizer_state_and_saved_activations(
    preset: str,
) -> None:
    torch.manual_seed(0)
    config = build_preset(preset, "tiny", d_model=64, n_layers=3, max_seq_len=64, vocab_size=256)
    model = TransformerLM(config)
    ids = torch.randint(0, 256, (4, 64))
    # every layer trains: the whole backward is kept
    activations = saved_activation_bytes(model, ids)
    model.zero_grad(set_to_none=True)
    trainable = freeze_all_but(model, ("layers.2.*", "norm.*"))
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad])
    model(ids, targets=ids).loss.backward()
    optimizer.step()
    parts = training_bytes(config, model.num_parameters(), trainable, 4, 64, "adamw", "fp32")
    assert parts["weights"] == 4 * sum(p.numel() for p in model.parameters())
    assert parts["gradients"] == sum(
        p.grad.nbytes for p in model.parameters() if p.grad is not None
    )
    state = sum(t.nbytes for s in optimizer.state.values() for k, t in s.items() if k != "step")
    assert parts["optimizer"] == state
    assert 0.5 <= parts["activations"] / activations <= 2.0, (parts["activations"], activations)


def test_a_run_that_cannot_fit_is_refused_in_one_line_before_anything_is_allocated(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    assert main(["train", "--model.d_model", "1000000", "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "this run needs about" in err and "GB available" in err
    assert not (tmp_path / "run").exists()
    parts = {"weights": 8, "gradients": 4, "optimizer": 8, "activations": 4, "total": 24}
    check_fits(parts, torch.device("cpu"), available=24)  # fits exactly: no error
    with pytest.raises(ValueError, match=r"needs about 0\.00 GB .* but cpu has 0\.00 GB available"):
        check_fits(parts, torch.device("cpu"), available=23)


@pytest.mark.kernels
def test_trainable_patterns_freeze_the_rest_bitwise(prepared: Path, tmp_path: Path) -> None:
    trainer = make_trainer(
        tmp_path / "run",
        prepared,
        steps="3",
        trainable="layers.0.attn.*,norm.*",
        **{"optimizer.lr": "1e-2", "schedule.warmup_steps": "0"},
    )
    before = {n: p.detach().clone() for n, p in trainer.state.raw.named_parameters()}
    trainer.fit()
    train = set(trainable_names(trainer.state.raw, ("layers.0.attn.*", "norm.*")))
    assert train == {n for n in before if n.startswith("layers.0.attn.") or n.startswith("norm.")}
    for name, param in trainer.state.raw.named_parameters():
        changed = not torch.equal(param, before[name])
        assert changed == (name in train), name
    # optimizer state for the trained parameters only
    assert len(trainer.state.optimizer.state) == len(train)


def test_a_pattern_that_matches_nothing_and_a_resume_that_changes_them_are_refused(
    prepared: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    run = tmp_path / "run"
    assert main(["train", *cli_flags(prepared, run, steps="2", trainable="layer.*")]) == 2
    assert (
        "'layer.*' matches no parameter (names look like embed_tokens.weight"
        in capsys.readouterr().err
    )
    assert main(["train", *cli_flags(prepared, run, steps="2", trainable="norm.*")]) == 0
    assert (
        main(
            ["train", "--out", str(run), "--resume", "--steps", "4", "--extend", "--trainable", "*"]
        )
        == 2
    )
    assert "--resume: trainable '*' differs from the run's 'norm.*'" in capsys.readouterr().err


def test_a_lora_run_trains_adapters_only_and_saves_the_merged_weights(
    prepared: Path, tmp_path: Path
) -> None:
    """Step 0 of a LoRA run computes the base model exactly (B = 0); after training, the
    checkpoint (merged W + alpha/r B A under the plain names) loads without peft and gives the
    adapted model's logits."""
    from archlab.checkpoint import load_model

    trainer = make_trainer(
        tmp_path / "run",
        prepared,
        steps="3",
        lora_rank="4",
        lora_alpha="8",
        **{"optimizer.lr": "1e-2", "schedule.warmup_steps": "0"},
    )
    base = {
        n.replace(".base_layer", ""): p.detach().clone()
        for n, p in trainer.state.raw.named_parameters()
        if ".lora_" not in n
    }
    assert all(
        not p.requires_grad for n, p in trainer.state.raw.named_parameters() if ".lora_" not in n
    )
    adapted = {
        n.split(".lora_")[0].rsplit(".", 1)[-1]
        for n, _ in trainer.state.raw.named_parameters()
        if ".lora_" in n
    }
    assert adapted == {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"}
    from archlab.checkpoint import build_model

    ids = torch.randint(0, 256, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():  # B = 0: before training the adapted model is the base model
        assert torch.equal(
            trainer.state.raw.eval()(ids), build_model(trainer.state.model_config, base).eval()(ids)
        )
    trainer.state.raw.train()
    trainer.fit()
    for name, param in trainer.state.raw.named_parameters():  # the base stays bitwise the same
        if ".lora_" not in name:
            assert torch.equal(param, base[name.replace(".base_layer", "")]), name
    loaded, _ = load_model(tmp_path / "run")
    with torch.no_grad():
        adapted, merged = trainer.state.raw.eval()(ids), loaded(ids)
    assert (adapted - merged).abs().max() <= 1e-5
    assert not torch.equal(
        loaded.layers[0].attn.qkv_proj.weight, base["layers.0.attn.qkv_proj.weight"]
    )
    q = loaded.layers[0].attn.qkv_proj.weight  # W + (8 / 4) B A, from the adapters themselves
    lora = trainer.state.raw.layers[0].attn.qkv_proj
    want = (
        base["layers.0.attn.qkv_proj.weight"]
        + 2.0 * lora.lora_B["default"].weight @ lora.lora_A["default"].weight
    )
    assert torch.allclose(q, want, atol=1e-6)


@pytest.mark.parametrize(
    ("rank", "targets"),
    [
        (4, ("qkv_proj", "o_proj", "gate_up_proj", "down_proj")),
        (2, ("qkv_proj",)),
        (8, ("down_proj", "lm_head")),
    ],
)
def test_the_lora_estimate_counts_the_adapters_peft_adds(
    rank: int, targets: tuple[str, ...], tmp_path: Path
) -> None:
    """The memory estimate of a LoRA run: weights are the base plus the adapters, gradients and
    AdamW's two states the adapters only, as many as peft's injection really adds (counted on
    the built model)."""
    from archlab.train import memory
    from archlab.train.config import resolve_config
    from archlab.train.distributed import setup
    from archlab.train.trainable import add_lora, lora_parameter_count

    config = build_preset("llama", "tiny", n_layers=3, vocab_size=256)
    model = TransformerLM(config)
    base = sum(p.numel() for p in model.parameters())
    add_lora(model, rank, 16.0, targets)
    adapters = sum(p.numel() for n, p in model.named_parameters() if ".lora_" in n)
    assert adapters > 0 and lora_parameter_count(TransformerLM(config), rank, targets) == adapters
    train, model_config = resolve_config(
        [
            {
                "model.n_layers": "3",
                "lora_rank": str(rank),
                "lora_targets": ",".join(targets),
                "out": str(tmp_path / "run"),
            }
        ]
    )
    parts = memory.memory_estimate(train, model_config, setup("none", "cpu"))
    assert parts["weights"] == 4 * (base + adapters)
    assert (parts["gradients"], parts["optimizer"]) == (4 * adapters, 2 * 4 * adapters)

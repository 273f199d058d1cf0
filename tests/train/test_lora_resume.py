"""LoRA runs resume exactly (train/trainable.py, train/state.py): a run stopped at step k and
resumed ends bitwise where the uninterrupted run ends; a missing or changed base (sha256 in the
manifest) and another rank, alpha or target list are refused in one line with the run untouched; the
checkpoints stay plain merged models that load without peft and equal W + (alpha / r) B A of the
base and the saved adapters."""

from __future__ import annotations

import json
import math
import signal
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from archlab.checkpoint import latest_checkpoint, load_model
from archlab.cli import main
from archlab.train.metrics import read_metrics
from archlab.train.trainable import check_merged, merged_state
from tests.conftest import snapshot
from tests.train.test_trainer import cli_flags, finish, launch, wait_for

pytestmark = pytest.mark.kernels  # bitwise claims: rerun under AVX2 caps on AVX-512 CPUs

RANK, ALPHA = 4, 8.0
LORA = {
    "lora_rank": str(RANK),
    "lora_alpha": str(ALPHA),
    "optimizer.lr": "1e-2",
    "schedule.warmup_steps": "1",
    "schedule.horizon": "8",
    "model.dropout": "0.1",
    "checkpoint.save_every": "3",
}


def rows(run: Path) -> list[tuple]:
    return [(r["step"], r["loss"], r["grad_norm"], r["lr"]) for r in read_metrics(run, "train")]


def last(run: Path) -> Path:
    return latest_checkpoint(run)


@pytest.fixture
def source(prepared: Path, tmp_path: Path) -> Path:
    """A plain tiny run of 2 steps: the base the LoRA runs start from."""
    src = tmp_path / "source"
    assert main(["train", *cli_flags(prepared, src, steps="2")]) == 0
    return src


def lora_run(prepared: Path, source: Path, run: Path, steps: int) -> int:
    return main(
        ["train", "--init-from", str(source), *cli_flags(prepared, run, steps=str(steps), **LORA)]
    )


def test_a_stopped_lora_run_resumes_bitwise_to_the_uninterrupted_run(
    prepared: Path, source: Path, tmp_path: Path
) -> None:
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    assert lora_run(prepared, source, straight, 8) == 0
    assert lora_run(prepared, source, resumed, 4) == 0  # stopped at step 4 of the 8-step schedule
    assert main(["train", "--out", str(resumed), "--resume", "--steps", "8"]) == 0
    a, b = last(straight), last(resumed)
    assert a.name == b.name == "step_0000008"
    wa, wb = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    sa, sb = (torch.load(p / "state.pt", weights_only=True)["lora"]["adapters"] for p in (a, b))
    assert sa.keys() == sb.keys() and len(sa) == 8 and all(torch.equal(sa[k], sb[k]) for k in sa)
    oa, ob = (torch.load(p / "optimizer.pt", weights_only=True)["state"] for p in (a, b))
    assert oa.keys() == ob.keys() and all(
        torch.equal(oa[k]["exp_avg_sq"], ob[k]["exp_avg_sq"]) for k in oa
    )
    assert rows(straight) == rows(resumed) and len(rows(resumed)) == 8
    # it trained
    assert not torch.equal(
        sa["layers.0.attn.qkv_proj.lora_B.default.weight"], torch.zeros(96, RANK)
    )


def test_a_lora_run_on_a_seeded_base_resumes_bitwise(prepared: Path, tmp_path: Path) -> None:
    """Without --init-from the base is the seed's initialisation: rebuilt on resume and checked
    by its digest."""
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    assert main(["train", *cli_flags(prepared, straight, steps="6", **LORA)]) == 0
    assert main(["train", *cli_flags(prepared, resumed, steps="3", **LORA)]) == 0
    assert main(["train", "--out", str(resumed), "--resume", "--steps", "6"]) == 0
    wa, wb = (
        load_file(last(straight) / "model.safetensors"),
        load_file(last(resumed) / "model.safetensors"),
    )
    assert all(torch.equal(wa[k], wb[k]) for k in wa) and rows(straight) == rows(resumed)


def test_a_missing_or_changed_base_is_refused_in_one_line_before_anything_is_written(
    prepared: Path, source: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    run = tmp_path / "run"
    assert lora_run(prepared, source, run, 4) == 0
    capsys.readouterr()
    before = snapshot(run)
    moved = source.rename(tmp_path / "moved")
    assert main(["train", "--out", str(run), "--resume", "--steps", "8"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"archlab train: error: --resume: LoRA run {run} was started from {source}, which is "
        "missing; its checkpoints hold the adapters, not the base: restore the source at that "
        f"path, or start a new run with --init-from {run}"
    )
    assert snapshot(run) == before
    moved.rename(source)
    # the source trains one more step: same path, other weights
    assert main(["train", "--out", str(source), "--resume", "--steps", "3", "--extend"]) == 0
    capsys.readouterr()
    assert main(["train", "--out", str(run), "--resume", "--steps", "8"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(
        f"archlab train: error: --resume: the base weights from {source} have sha256 "
    )
    assert f"but LoRA run {run} was trained on " in err and "(checkpoint step_0000004)" in err
    assert snapshot(run) == before


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--lora_rank", "8", "lora_rank 8 differs from the run's 4"),
        ("--lora_alpha", "4", "lora_alpha 4.0 differs from the run's 8.0"),
        (
            "--lora_targets",
            "qkv_proj",
            "lora_targets 'qkv_proj' differs from the run's "
            "'qkv_proj,o_proj,gate_up_proj,up_proj,down_proj'",
        ),
    ],
)
def test_another_rank_alpha_or_targets_on_resume_is_refused_in_one_line(
    flag: str,
    value: str,
    message: str,
    prepared: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
) -> None:
    run = tmp_path / "run"
    assert main(["train", *cli_flags(prepared, run, steps="3", **LORA)]) == 0
    capsys.readouterr()
    before = snapshot(run)
    assert main(["train", "--out", str(run), "--resume", "--steps", "6", flag, value]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"archlab train: error: --resume: {message}; the adapters and their optimizer state belong "
        "to it: resume without changing it, or start a new run with --init-from RUN_DIR"
    )
    assert snapshot(run) == before


def test_lora_checkpoints_load_without_peft_and_equal_base_plus_scaled_adapters(
    prepared: Path, source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = tmp_path / "run"
    assert lora_run(prepared, source, run, 4) == 0
    assert main(["train", "--out", str(run), "--resume", "--steps", "6"]) == 0
    base = load_file(last(source) / "model.safetensors")
    adapters = torch.load(last(run) / "state.pt", weights_only=True)["lora"]["adapters"]
    # `import peft` fails: the checkpoint must not need it
    monkeypatch.setitem(sys.modules, "peft", None)
    model, _ = load_model(run)
    loaded = dict(model.named_parameters())
    targets = {k.split(".lora_A.")[0] for k in adapters if ".lora_A." in k}
    assert targets == {
        "layers.0.attn.qkv_proj",
        "layers.0.attn.o_proj",
        "layers.0.mlp.gate_up_proj",
        "layers.0.mlp.down_proj",
    }
    # W + (alpha / r) B A in float64, from the source's weights and the saved adapters
    for name in targets:
        a = adapters[f"{name}.lora_A.default.weight"].double()
        b = adapters[f"{name}.lora_B.default.weight"].double()
        want = base[f"{name}.weight"].double() + (ALPHA / RANK) * (b @ a)
        assert (loaded[f"{name}.weight"].double() - want).abs().max() < 1e-6, name
        assert (b @ a).abs().max() > 1e-4, name  # the adapters moved the weights
    for name, param in loaded.items():  # everything else is the frozen base, bitwise
        if name.removesuffix(".weight") not in targets and name in base:
            assert torch.equal(param, base[name]), name


def test_a_lora_run_stopped_by_sigint_resumes_bitwise(
    prepared: Path, source: Path, tmp_path: Path
) -> None:
    """Ctrl-C in a LoRA fine-tune saves a checkpoint; resumed, it ends where a run that
    never stopped ends."""
    stopped, straight = tmp_path / "stopped", tmp_path / "straight"
    flags = {**LORA, "schedule.horizon": "100000", "checkpoint.save_every": "0"}
    proc = launch(
        ["--init-from", str(source), *cli_flags(prepared, stopped, steps="100000", **flags)]
    )
    wait_for(
        lambda: (stopped / "metrics.jsonl").is_file() and len(read_metrics(stopped, "train")) >= 3,
        proc,
    )
    proc.send_signal(signal.SIGINT)
    assert "(stopped by SIGINT)" in finish(proc)
    at = int(last(stopped).name.removeprefix("step_"))
    finish(launch(["--out", str(stopped), "--resume", "--steps", str(at + 2)]))
    finish(
        launch(
            ["--init-from", str(source), *cli_flags(prepared, straight, steps=str(at + 2), **flags)]
        )
    )
    wa, wb = (
        load_file(last(straight) / "model.safetensors"),
        load_file(last(stopped) / "model.safetensors"),
    )
    assert last(stopped).name == last(straight).name == f"step_{at + 2:07d}"
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    assert rows(straight) == rows(stopped) and len(rows(stopped)) == at + 2


def test_the_merge_check_allows_rounding_and_refuses_another_base() -> None:
    """base + (alpha/r) B A recomputed on resume may differ from the saved merge by a rounding
    (another CPU's matmul); a base that is not the one trained on is refused in one line."""
    g = torch.Generator().manual_seed(0)
    state = {
        "l.base_layer.weight": torch.randn(8, 6, generator=g),
        "l.lora_A.default.weight": torch.randn(2, 6, generator=g),
        "l.lora_B.default.weight": torch.randn(8, 2, generator=g),
    }
    merged = merged_state(state, 2, 4.0)
    nudged = {
        "l.weight": torch.nextafter(
            merged["l.weight"], torch.full_like(merged["l.weight"], math.inf)
        )
    }
    check_merged(state, nudged, 2, 4.0, "ckpt")  # one unit in the last place: accepted
    other = {**state, "l.base_layer.weight": state["l.base_layer.weight"] + 1e-3}
    with pytest.raises(
        ValueError, match=r"^--resume: checkpoint ckpt: its merged weights differ .* at l\.weight"
    ):
        check_merged(other, merged, 2, 4.0, "ckpt")


def test_a_seeded_base_that_changed_is_refused_by_its_digest_in_one_line(
    prepared: Path, tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without --init-from the base is rebuilt from the run's seed on resume; if the initialisation
    changed since (here: it draws seed 1's weights for seed 0), or --seed asks for another, the
    digest in the checkpoint's manifest refuses it, in one line naming both digests and the seed,
    before anything is written."""
    from archlab.checkpoint.manifest import read_manifest
    from archlab.nn.config import ModelConfig
    from archlab.nn.model import TransformerLM
    from archlab.train.trainable import base_digest

    run = tmp_path / "run"
    assert main(["train", *cli_flags(prepared, run, steps="3", **LORA)]) == 0
    capsys.readouterr()
    before = snapshot(run)
    old = read_manifest(last(run))["provenance"]["base_sha256"]
    config = ModelConfig.from_dict(json.loads((run / "config.json").read_text())["model"])

    def digest(seed: int) -> str:  # the base a seed draws, recomputed here
        model = TransformerLM(config)
        model.init_weights(seed=seed)
        return base_digest(model)

    assert digest(0) == old and len({old, digest(1), digest(5)}) == 3
    assert main(["train", "--out", str(run), "--resume", "--steps", "6", "--seed", "5"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"archlab train: error: --resume: LoRA run {run} was trained on the seed-0 initialisation "
        f"with sha256 {old[:16]}... (checkpoint step_0000003), but --seed 5 builds a base with "
        f"sha256 {digest(5)[:16]}...; its adapters fit that base only: resume without --seed (the "
        "run's seed is 0)"
    )
    assert snapshot(run) == before
    new, real = digest(1), TransformerLM.init_weights
    monkeypatch.setattr(TransformerLM, "init_weights", lambda self, seed=None: real(self, seed=1))
    assert main(["train", "--out", str(run), "--resume", "--steps", "6"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"archlab train: error: --resume: LoRA run {run} was trained on the seed-0 initialisation "
        f"with sha256 {old[:16]}... (checkpoint step_0000003), but this archlab rebuilds "
        f"it as {new[:16]}... (the model's initialisation changed since); its adapters fit "
        "that base only: resume with the archlab that started the run, or start a new run "
        f"with --init-from {last(run)}"
    )
    assert snapshot(run) == before

"""The training loop end to end on tiny models: loss falls for every preset, accumulation, bf16,
skipped non-finite steps, divergence, exact resume after SIGKILL, clean stop on SIGINT/SIGTERM,
the run config (layering, YAML files, every bad input's message) and the run's outputs
(metrics, TensorBoard, plot)."""

from __future__ import annotations

import json
import logging
import math
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from safetensors.torch import load_file

from archlab import PRESETS, TransformerLM
from archlab.checkpoint import list_checkpoints
from archlab.cli import main
from archlab.nn.model import LossOutput
from archlab.overrides import load_yaml
from archlab.plots import plot_run
from archlab.train.config import resolve_config
from archlab.train.distributed import setup
from archlab.train.metrics import read_metrics
from archlab.train.trainer import Trainer, TrainingDiverged

REPO = Path(__file__).resolve().parents[2]
TINY = {
    "model.d_model": "32",
    "model.n_layers": "1",
    "model.n_heads": "2",
    "model.max_seq_len": "32",
    "data.batch_size": "8",
    "data.block_size": "32",
    "logging.progress": "false",
    "logging.tensorboard": "false",
    "logging.samples": "0",
    "logging.eval_every": "0",
    "logging.eval_batches": "2",
    "logging.log_every": "1",
    "checkpoint.save_every": "0",
}


def make_trainer(run: Path, prepared: Path, **flags: str) -> Trainer:
    train, model = resolve_config(
        [{**TINY, "data.source": str(prepared), "out": str(run), **flags}]
    )
    return Trainer(train, model, setup("none", "cpu"))


def cli_flags(prepared: Path, run: Path, **flags: str) -> list[str]:
    merged = {**TINY, "data.source": str(prepared), "out": str(run), **flags}
    return [item for key, value in merged.items() for item in (f"--{key}", value)]


# ----------------------------------------------------------------------------------------- learning
@pytest.mark.parametrize("preset", list(PRESETS))
def test_loss_falls_for_every_preset(preset: str, prepared: Path, tmp_path: Path) -> None:
    trainer = make_trainer(
        tmp_path / "run",
        prepared,
        preset=preset,
        steps="25",
        **{"optimizer.lr": "1e-2", "schedule.name": "constant", "schedule.warmup_steps": "3"},
    )
    losses = [trainer.train_step()["loss"] for _ in range(25)]
    assert sum(losses[-5:]) / 5 < losses[0] - 0.5, losses


def test_gradient_accumulation_equals_the_full_batch(prepared: Path, tmp_path: Path) -> None:
    # 2 micro-batches of 4 draw the same windows as one batch of 8 (one
    # generator, consecutive draws)
    full = make_trainer(tmp_path / "a", prepared, steps="3")
    accum = make_trainer(tmp_path / "b", prepared, steps="3", **{"optimizer.grad_accum": "2"})
    for _ in range(3):
        a, b = full.train_step(), accum.train_step()
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-6)
        assert b["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-5)
    for (name, p), q in zip(full.state.raw.named_parameters(), accum.state.raw.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6, msg=name)


# relative: bf16 keeps 8 mantissa bits (~0.4% per rounding), fp32 master weights
BF16_CURVE_TOLERANCE = 0.02


def test_bf16_autocast_trains_with_fp32_master_weights_and_tracks_the_fp32_curve(
    prepared: Path, tmp_path: Path
) -> None:
    """The same 8 steps in fp32 and in bf16 autocast: each bf16 loss within 2% of the fp32 one.
    Valid on a CPU without bf16 units too (emulated, hence allow_slow_bf16), just slower."""
    curves = {}
    for dtype in ("fp32", "bf16"):
        trainer = make_trainer(
            tmp_path / dtype,
            prepared,
            steps="8",
            **{
                "precision.dtype": dtype,
                "precision.allow_slow_bf16": "true",
                "optimizer.lr": "1e-2",
            },
        )
        curves[dtype] = [trainer.train_step()["loss"] for _ in range(8)]
        assert all(p.dtype == torch.float32 for p in trainer.state.raw.parameters())
    fp32, bf16 = curves["fp32"], curves["bf16"]
    assert all(math.isfinite(x) for x in bf16) and bf16[-1] < bf16[0]
    assert bf16 != fp32  # autocast really ran in bf16
    for step, (a, b) in enumerate(zip(fp32, bf16)):
        assert abs(a - b) <= BF16_CURVE_TOLERANCE * a, (step, a, b)


class NanForward:
    """Wraps a model's forward: NaN logits (or NaN loss terms, given targets) on the chosen
    call numbers (0-based)."""

    def __init__(
        self, forward: Callable[..., torch.Tensor | LossOutput], bad: Callable[[int], bool]
    ) -> None:
        self.forward, self.bad, self.calls = forward, bad, 0

    def __call__(self, x: torch.Tensor, **kwargs: object) -> torch.Tensor | LossOutput:
        out = self.forward(x, **kwargs)
        self.calls += 1
        if not self.bad(self.calls - 1):
            return out
        if isinstance(out, LossOutput):
            return LossOutput(*(None if t is None else t * float("nan") for t in out))
        return out * float("nan")


def test_a_non_finite_step_is_skipped(prepared: Path, tmp_path: Path) -> None:
    trainer = make_trainer(tmp_path / "run", prepared, steps="5")
    trainer.state.model.forward = NanForward(trainer.state.model.forward, lambda call: call == 2)
    trainer.train_step()
    trainer.train_step()
    before = {n: p.detach().clone() for n, p in trainer.state.raw.named_parameters()}
    adam_steps = [float(s["step"]) for s in trainer.state.optimizer.state.values()]
    row = trainer.train_step()  # call 2: NaN
    assert row["skipped"] and math.isnan(row["loss"])
    assert all(torch.equal(p, before[n]) for n, p in trainer.state.raw.named_parameters())
    assert [float(s["step"]) for s in trainer.state.optimizer.state.values()] == adam_steps
    assert all(p.grad is None for p in trainer.state.raw.parameters())
    assert not trainer.train_step()["skipped"]
    assert trainer.state.stats.skipped == 1 and trainer.state.stats.bad_steps == 0


def test_a_skipped_step_is_logged_and_the_run_goes_on(prepared: Path, tmp_path: Path) -> None:
    trainer = make_trainer(tmp_path / "run", prepared, steps="5")
    trainer.state.model.forward = NanForward(trainer.state.model.forward, lambda call: call == 2)
    assert trainer.fit().step == 5
    skips = read_metrics(tmp_path / "run", "skip")
    assert [r["step"] for r in skips] == [3] and skips[0]["loss"] == "nan"
    assert [r["skipped"] for r in read_metrics(tmp_path / "run", "train")] == [
        False,
        False,
        True,
        False,
        False,
    ]


def test_consecutive_non_finite_steps_stop_the_run_naming_the_last_good_checkpoint(
    prepared: Path, tmp_path: Path
) -> None:
    trainer = make_trainer(tmp_path / "run", prepared, steps="20", **{"checkpoint.save_every": "2"})
    trainer.state.model.forward = NanForward(trainer.state.model.forward, lambda call: call >= 2)
    with pytest.raises(
        TrainingDiverged,
        match=r"5 consecutive steps \(up to step 7\) had a non-finite loss or "
        r"gradient; last good checkpoint: .*step_0000002",
    ):
        trainer.fit()


# ------------------------------------------------------------------------------- resume and signals
def launch(args: list[str]) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "archlab", "train", *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(condition: Callable[[], bool], proc: subprocess.Popen, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None:
            raise AssertionError(
                f"run ended early (rc {proc.returncode}): {proc.stderr.read()[-2000:]}"
            )
        assert time.monotonic() < deadline, "timed out waiting for the run"
        time.sleep(0.01)


def finish(proc: subprocess.Popen) -> str:
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err[-3000:]
    return out


def train_rows(run: Path) -> list[tuple]:
    return [(r["step"], r["loss"], r["grad_norm"], r["lr"]) for r in read_metrics(run, "train")]


@pytest.mark.kernels
def test_resume_after_sigkill_is_bitwise_identical(prepared: Path, tmp_path: Path) -> None:
    # Evaluating (100 val batches) and sampling every step make steps slow enough for the kill to
    # land between checkpoint 5 and the end; neither may touch the training RNG streams, so both
    # runs use them.
    flags = {
        "steps": "10",
        "checkpoint.save_every": "5",
        "model.dropout": "0.1",
        "logging.eval_every": "1",
        "logging.eval_batches": "100",
        "logging.samples": "1",
        "logging.sample_tokens": "8",
    }
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    proc = launch(cli_flags(prepared, killed, **flags))
    wait_for(lambda: (killed / "checkpoints" / "step_0000005").is_dir(), proc)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert [p.name for p in list_checkpoints(killed)] == ["step_0000005"], (
        "the kill landed after the end"
    )
    finish(launch(["--out", str(killed), "--resume"]))  # everything else comes from the checkpoint
    finish(launch(cli_flags(prepared, straight, **flags)))
    a = load_file(straight / "checkpoints" / "step_0000010" / "model.safetensors")
    b = load_file(killed / "checkpoints" / "step_0000010" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert train_rows(straight) == train_rows(killed) and len(train_rows(killed)) == 10
    assert read_metrics(straight, "eval") == read_metrics(killed, "eval")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_saves_a_checkpoint_and_exits_cleanly(
    sig: signal.Signals, prepared: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    proc = launch(cli_flags(prepared, run, steps="100000", **{"schedule.warmup_steps": "2"}))
    wait_for(
        lambda: (run / "metrics.jsonl").is_file() and len(read_metrics(run, "train")) >= 3, proc
    )
    proc.send_signal(sig)
    out = finish(proc)
    assert f"(stopped by {sig.name})" in out
    (ckpt,) = list_checkpoints(run)
    stopped_at = int(ckpt.name.removeprefix("step_"))
    assert 3 <= stopped_at < 100000 and read_metrics(run, "train")[-1]["step"] == stopped_at
    out = finish(launch(["--out", str(run), "--resume", "--steps", str(stopped_at + 2)]))
    assert out.startswith(f"step {stopped_at + 2}:")


# --------------------------------------------------------------------------------------- run config
def test_layers_defaults_preset_yaml_flags(tmp_path: Path) -> None:
    yaml_file = tmp_path / "run.yaml"
    yaml_file.write_text(
        "preset: gpt2\nmodel:\n  n_layers: 3\n  d_model: 48\noptimizer:\n  lr: 1.0e-2\n"
        "  betas: [0.8, 0.9]\nsteps: 50\n"
    )
    train, model = resolve_config(
        [load_yaml(yaml_file), {"optimizer.lr": "2e-2", "model.n_layers": "4"}]
    )
    assert (train.preset, train.steps, train.optimizer.lr, train.optimizer.betas) == (
        "gpt2",
        50,
        2e-2,
        (0.8, 0.9),
    )
    assert (model.n_layers, model.d_model, model.position, model.tie_embeddings) == (
        4,
        48,
        "learned",
        True,
    )
    assert train.out == "runs/gpt2-tiny" and train.data.block_size == model.max_seq_len
    assert resolve_config([{"optimizer.name": "lion"}])[0].optimizer.betas == (0.9, 0.99)


@pytest.mark.parametrize("path", sorted((REPO / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_every_yaml_config_loads_and_builds(path: Path) -> None:
    train, model_config = resolve_config([load_yaml(path)])
    model = TransformerLM(model_config)
    assert model(torch.zeros(1, 4, dtype=torch.long)).shape == (1, 4, model_config.vocab_size)
    if path.name == "demo.yaml":
        assert 1_000_000 <= model.num_parameters() <= 3_000_000


BAD_INPUTS = [
    (
        ["--optimizer.name", "sgdx"],
        "optimizer.name='sgdx' is not allowed: one of adamw, lion, tiger",
    ),
    (["--optimizer.lr", "-1"], "optimizer.lr=-1.0 is not allowed: a learning rate >= 0"),
    (["--steps", "0"], "steps=0 is not allowed: an integer from 1 to 1,000,000,000"),
    (
        ["--optimizer.lrr", "1"],
        r"unknown config key 'optimizer.lrr': did you mean optimizer\.lr\? OptimizerConfig has "
        "the fields name, lr",
    ),
    (["--optimizer.grad_clip", "abc"], "optimizer.grad_clip='abc' is not allowed: expected float"),
    (
        ["--optimizer.name", "tiger", "--optimizer.betas", "0.9,0.99"],
        r"optimizer.betas=\[0.9, 0.99\] is not allowed: 1 value\(s\) in \[0, 1\) for tiger",
    ),
    (["--preset", "gpt5"], "preset='gpt5' is not allowed: one of original, gpt2, llama"),
    (["--model.norm", "batchnorm"], "ModelConfig.norm='batchnorm' is not allowed"),
    (
        ["--model.n_layerz", "2"],
        r"unknown config key 'model.n_layerz': did you mean model\.n_layers\? ModelConfig has "
        "the fields vocab_size",
    ),
    (
        ["--data.block_size", "64"],
        "data.block_size=64 is not allowed: at most model.max_seq_len=32",
    ),
    (
        ["--data.batch_size", "6", "--optimizer.grad_accum", "4"],
        "must divide evenly over 1 ranks x 4",
    ),
    (["--config", "missing.yaml"], "config file missing.yaml does not exist"),
    (["--data", "/no/such/corpus.txt"], "corpus path /no/such/corpus.txt does not exist"),
    (["--distributed", "ddp"], "--distributed ddp needs torchrun"),
    (["--resume"], "--resume: no checkpoint in .*checkpoints to resume from"),
    (["--logging.eval_every", "-1"], "logging.eval_every=-1 is not allowed: an integer >= 0"),
    (["--model"], "flag --model needs a value"),
]


@pytest.mark.parametrize(("extra", "message"), BAD_INPUTS, ids=[" ".join(a) for a, _ in BAD_INPUTS])
def test_bad_inputs_fail_with_one_clear_line(
    extra: list[str], message: str, prepared: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    argv = ["train", *cli_flags(prepared, tmp_path / "run", steps="3"), *extra]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("archlab train: error: ") and "\n" not in err
    assert re.search(message, err), err


def test_resume_refuses_another_model_a_finished_run_and_a_corrupt_checkpoint(
    prepared: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    run = tmp_path / "run"
    assert main(["train", *cli_flags(prepared, run, steps="2")]) == 0
    cases = [
        (
            ["--resume", "--model.n_layers", "2"],
            "the model config differs from the checkpoint's (n_layers 1 -> 2)",
        ),
        (
            ["--resume", "--preset", "gpt2"],
            "--resume: preset 'gpt2' differs from the checkpoint's 'llama'",
        ),
        ([], "already holds checkpoints; pass --resume to continue it or choose another --out"),
    ]
    for extra, message in cases:
        assert main(["train", "--out", str(run), *extra]) == 2
        assert message in capsys.readouterr().err
    weights = run / "checkpoints" / "step_0000002" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    assert main(["train", "--out", str(run), "--resume", "--steps", "4"]) == 2
    assert (
        f"checkpoint {weights.parent} is corrupt: model.safetensors has 100 bytes"
        in capsys.readouterr().err
    )


# ------------------------------------------------------------------------------------------ outputs
def test_run_outputs_metrics_tensorboard_config_samples_and_plot(
    prepared: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    run = tmp_path / "run"
    flags = cli_flags(
        prepared,
        run,
        steps="4",
        **{
            "logging.tensorboard": "true",
            "logging.eval_every": "2",
            "logging.samples": "1",
            "logging.sample_tokens": "8",
            "logging.ratio_every": "2",
            "z_loss_coef": "1e-4",
        },
    )
    assert main(["train", *flags]) == 0
    assert capsys.readouterr().out.startswith("step 4: train loss ")
    kinds = [r["kind"] for r in read_metrics(run)]
    assert kinds.count("train") == 4 and kinds.count("eval") == 2 and kinds.count("sample") == 2
    ratios = read_metrics(run, "ratios")
    assert [r["step"] for r in ratios] == [2, 4] and {"layers.0", "embed_tokens", "lm_head"} <= set(
        ratios[0]
    )
    assert all(0 < r["z_loss"] < 1e-2 for r in read_metrics(run, "train"))
    assert list((run / "tb").glob("events.out.tfevents.*"))
    saved = json.loads((run / "config.json").read_text())
    assert saved["train"]["z_loss_coef"] == 1e-4 and saved["model"]["n_layers"] == 1
    png = plot_run(run)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (
        main(["plot", "run", str(run), "--out", str(tmp_path / "c.png")]) == 0
        and (tmp_path / "c.png").is_file()
    )


def test_sample_prompt_defaults_to_the_corpus_own_first_characters(tmp_path: Path) -> None:
    corpus = tmp_path / "english.txt"
    corpus.write_text(
        "\n\n".join(f"Once upon a time there was story number {i}." for i in range(400))
    )
    trainer = make_trainer(
        tmp_path / "run",
        corpus,
        steps="2",
        **{"logging.samples": "1", "logging.sample_tokens": "8"},
    )
    # byte ids: the text's bytes
    val = np.fromfile(tmp_path / "run" / "data" / "val.bin", dtype=np.uint16)
    assert (
        trainer.sample_prompt == bytes(val[:4].tolist()).decode()
        and trainer.sample_prompt != "def "
    )
    explicit = make_trainer(
        tmp_path / "run2", corpus, steps="2", **{"logging.sample_prompt": "Once"}
    )
    assert explicit.sample_prompt == "Once"


def test_a_run_prints_one_summary_line_and_progress_lines_without_a_terminal(
    prepared: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    run = tmp_path / "run"
    with caplog.at_level(logging.INFO, logger="archlab"):
        assert (
            main(["train", *cli_flags(prepared, run, steps="40", **{"logging.progress": "true"})])
            == 0
        )
    messages = [r.getMessage() for r in caplog.records if r.name.startswith("archlab")]
    assert all("\n" not in m for m in messages), "a multi-line log message (the resolved config?)"
    assert sum("parameters;" in m and "config.yaml" in m for m in messages) == 1
    progress = [m for m in messages if re.match(r"step \d+/40: loss", m)]
    # every 5% of the run
    assert [int(m.split("/")[0].split()[1]) for m in progress] == list(range(2, 41, 2))
    assert yaml.safe_load((run / "config.yaml").read_text()) == json.loads(
        (run / "config.json").read_text()
    )


# ------------------------------------------------------------------------------ guards against bugs
def test_each_step_uses_the_lr_of_its_own_index(
    prepared: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trainer = make_trainer(tmp_path / "run", prepared, steps="6", **{"schedule.warmup_steps": "2"})
    seen: list[float] = []
    step = trainer.state.optimizer.step
    record = lambda: seen.append(trainer.state.optimizer.param_groups[0]["lr"]) or step()  # noqa: E731
    monkeypatch.setattr(trainer.state.optimizer, "step", record)
    for _ in range(6):
        trainer.train_step()
    # update s (0-based) takes warmup lr 1e-3 (s+1)/2, then the cosine to 1e-4 at 6, written out
    want = [5e-4, 1e-3] + [
        1e-4 + 0.45e-3 * (1 + math.cos(math.pi * (s - 2) / 4)) for s in range(2, 6)
    ]
    assert seen == pytest.approx(want, rel=1e-12)


def test_a_finite_loss_with_a_non_finite_gradient_is_skipped(
    prepared: Path, tmp_path: Path
) -> None:
    trainer = make_trainer(tmp_path / "run", prepared, steps="3")
    trainer.train_step()
    before = {n: p.detach().clone() for n, p in trainer.state.raw.named_parameters()}
    weight = trainer.state.raw.layers[0].mlp.down_proj.weight
    # the loss stays finite, one gradient does not
    hook = weight.register_hook(lambda g: g * float("inf"))
    row = trainer.train_step()
    hook.remove()
    assert math.isfinite(row["loss"]) and not math.isfinite(row["grad_norm"]) and row["skipped"]
    assert all(torch.equal(p, before[n]) for n, p in trainer.state.raw.named_parameters())
    assert not trainer.train_step()["skipped"]
    assert all(torch.isfinite(p).all() for p in trainer.state.raw.parameters())


def test_validation_runs_in_eval_mode(prepared: Path, tmp_path: Path) -> None:
    trainer = make_trainer(tmp_path / "run", prepared, steps="2", **{"model.dropout": "0.5"})
    # dropout on would draw new masks each time
    first, second = trainer.evaluate(), trainer.evaluate()
    assert first == second and trainer.state.raw.training

"""What `--resume` keeps and refuses (train/resume.py): the lr schedule continues exactly,
`--extend` stretches it, another corpus or a step already reached is refused in one line with the
run folder untouched, and the resumes are recorded in metrics.jsonl and marked on the plot."""

from __future__ import annotations

import math
from pathlib import Path

import matplotlib.axes
import pytest
import torch

from archlab.checkpoint import load_model
from archlab.cli import main
from archlab.plots import plot_run
from archlab.train.config import resolve_config
from archlab.train.distributed import setup
from archlab.train.metrics import read_metrics
from archlab.train.trainer import Trainer
from tests.conftest import snapshot
from tests.train.test_trainer import TINY, NanForward, cli_flags

pytestmark = pytest.mark.kernels  # bitwise claims: rerun under AVX2 caps on AVX-512 CPUs

MAX, MIN = 1e-3, 1e-4  # optimizer.lr and its min_lr_ratio 0.1 (defaults)


def cosine(s: int, warmup: int, end: int) -> float:
    if s < warmup:
        return MAX * (s + 1) / warmup
    return MIN + 0.5 * (MAX - MIN) * (
        1 + math.cos(math.pi * min(1.0, (s - warmup) / (end - warmup)))
    )


def run_cli(*argv: str) -> int:
    return main(["train", *argv])


def test_resume_keeps_the_schedule_and_extend_continues_its_decay(
    prepared: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    run = tmp_path / "run"
    # a cosine planned for 8 steps, stopped at 4, resumed to 6 (same curve), then extended to 12
    assert (
        run_cli(
            *cli_flags(
                prepared, run, steps="4", **{"schedule.horizon": "8", "schedule.warmup_steps": "1"}
            )
        )
        == 0
    )
    assert run_cli("--out", str(run), "--resume", "--steps", "6") == 0
    before = snapshot(run)
    assert run_cli("--out", str(run), "--resume", "--steps", "12") == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "archlab train: error: --resume: --steps 12 is past the end of the run's lr schedule (step "
        "8); add --extend to stretch the schedule to 12 steps, or give --steps <= 8"
    )
    assert snapshot(run) == before
    assert run_cli("--out", str(run), "--resume", "--steps", "12", "--extend") == 0
    rows = read_metrics(run, "train")
    assert [r["step"] for r in rows] == list(range(1, 13))
    # the lr the extension starts from: a half cosine from it to MIN over steps 6..12
    lr6 = cosine(6, 1, 8)
    want = [cosine(s, 1, 8) for s in range(6)] + [
        MIN + (lr6 - MIN) * 0.5 * (1 + math.cos(math.pi * (s - 6) / 6)) for s in range(6, 12)
    ]
    assert [r["lr"] for r in rows] == pytest.approx(want, rel=1e-12)
    resumes = read_metrics(run, "resume")
    assert [(r["step"], r["steps"], r["schedule_end"]) for r in resumes] == [(4, 6, 8), (6, 12, 12)]


def test_a_finished_run_extended_decays_again_to_the_new_end(
    prepared: Path, tmp_path: Path
) -> None:
    """The README's `--resume --steps 400 --extend` after a finished run, at 8 -> 16 steps: the
    logged lr re-warms over the warmup steps onto the cosine planned for 16 and reaches MIN at
    its last step."""
    run = tmp_path / "run"
    assert run_cli(*cli_flags(prepared, run, steps="8", **{"schedule.warmup_steps": "2"})) == 0
    assert run_cli("--out", str(run), "--resume", "--steps", "16", "--extend") == 0
    lrs = [r["lr"] for r in read_metrics(run, "train")]
    target = cosine(10, 2, 16)
    want = (
        [cosine(s, 2, 8) for s in range(8)]
        + [MIN + (target - MIN) * k / 2 for k in (1, 2)]
        + [cosine(s, 2, 16) for s in range(10, 16)]
    )
    assert lrs == pytest.approx(want, rel=1e-12)
    assert lrs[8] > MIN and lrs[-1] < lrs[10]  # it rises off the minimum, then decays


def test_the_plot_marks_every_resume(
    prepared: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = tmp_path / "run"
    assert run_cli(*cli_flags(prepared, run, steps="3", **{"schedule.horizon": "6"})) == 0
    assert run_cli("--out", str(run), "--resume", "--steps", "5") == 0
    marks: list[float] = []
    original = matplotlib.axes.Axes.axvline
    monkeypatch.setattr(
        matplotlib.axes.Axes,
        "axvline",
        lambda ax, x=0, **kw: marks.append(x) or original(ax, x, **kw),
    )
    plot_run(run)
    assert marks == [3, 3, 3]  # on the loss, lr and gradient-norm panels


def test_resume_refuses_another_corpus_and_never_replaces_the_run_data(
    prepared: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    corpus, other = tmp_path / "a.txt", tmp_path / "b.txt"
    corpus.write_text("the first corpus of this run\n" * 300)
    other.write_text("a different text altogether\n" * 300)
    run = tmp_path / "run"
    flags = cli_flags(
        prepared, run, steps="2", **{"data.source": str(corpus), "schedule.horizon": "6"}
    )
    assert run_cli(*flags) == 0
    before = snapshot(run)
    assert run_cli("--out", str(run), "--resume", "--data", str(other)) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"archlab train: error: --resume: data.source '{other}' differs from the run's '{corpus}'; "
        "a run trains on one corpus and tokenizer: resume without changing data.*, or start "
        "a new --out"
    )
    assert run_cli("--out", str(run), "--resume", "--data.tokenizer", "bpe") == 2
    assert "data.tokenizer 'bpe' differs from the run's 'byte'" in capsys.readouterr().err
    # same path, new text
    corpus.write_text("the corpus was edited after the run prepared it\n" * 300)
    assert run_cli("--out", str(run), "--resume", "--steps", "4") == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(
        f"{corpus} changed since {run / 'data'} was prepared from it (or its tokenizer or split "
        "did); a run's prepared data is never replaced: restore the corpus or start a new --out"
    )
    assert snapshot(run) == before


def test_resume_to_a_step_already_reached_says_so(
    prepared: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    run = tmp_path / "run"
    assert run_cli(*cli_flags(prepared, run, steps="4")) == 0
    capsys.readouterr()
    before = snapshot(run)
    assert run_cli("--out", str(run), "--resume", "--steps", "2") == 2
    err = capsys.readouterr()
    assert err.out == "" and err.err.strip() == (
        "archlab train: error: --resume: the run is already at step 4, so --steps 2 leaves nothing "
        "to do; to train longer: --resume --steps N --extend (N > 4)"
    )
    # a finished run resumed to its own end: done, exit 0 (README order)
    for extra in ([], ["--steps", "4"]):
        assert run_cli("--out", str(run), "--resume", *extra) == 0
        out = capsys.readouterr()
        assert out.err == "" and out.out.strip() == (
            f"{run} is already at step 4 of 4: nothing to resume; to train longer: --resume "
            "--steps N --extend (N > 4)"
        )
    assert run_cli("--out", str(run), "--resume", "--steps", "3", "--extend") == 2
    assert "--extend: --steps 3 does not lengthen the run" in capsys.readouterr().err
    assert snapshot(run) == before


def resumed_pair(prepared: Path, run: Path, **flags: str) -> tuple[Trainer, Trainer]:
    """A trainer that ran 3 steps of a 5-step plan (and saved), and one resumed
    from that checkpoint."""
    train, model = resolve_config(
        [
            {
                **TINY,
                "data.source": str(prepared),
                "out": str(run),
                "steps": "3",
                "schedule.horizon": "5",
                **flags,
            }
        ]
    )
    first = Trainer(train, model, setup("none", "cpu"))
    first.fit()
    train, model = resolve_config(
        [
            {
                **TINY,
                "data.source": str(prepared),
                "out": str(run),
                "steps": "5",
                "schedule.horizon": "5",
                **flags,
            }
        ]
    )
    return first, Trainer(train, model, setup("none", "cpu"), resume=True)


def test_resume_restores_the_optimizer_exactly_hyperparameter_types_included(
    prepared: Path, tmp_path: Path
) -> None:
    first, resumed = resumed_pair(prepared, tmp_path / "run")
    a, b = first.state.optimizer.state_dict(), resumed.state.optimizer.state_dict()
    # (0.9, 0.95) != [0.9, 0.95]: the types must survive too
    assert a["param_groups"] == b["param_groups"]
    assert isinstance(b["param_groups"][0]["betas"], tuple)
    assert a["state"].keys() == b["state"].keys()
    for i in a["state"]:
        assert all(torch.equal(a["state"][i][k], b["state"][i][k]) for k in a["state"][i])


def test_resume_restores_the_run_counters(prepared: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    train, model = resolve_config(
        [
            {
                **TINY,
                "data.source": str(prepared),
                "out": str(run),
                "steps": "3",
                "schedule.horizon": "5",
            }
        ]
    )  # evaluated at its end, step 3
    first = Trainer(train, model, setup("none", "cpu"))
    # step 2 is skipped
    first.state.model.forward = NanForward(first.state.model.forward, lambda call: call == 1)
    first.fit()
    stats = first.state.stats
    assert stats.skipped == 1 and stats.best_step == 3 and stats.tokens_seen == 3 * 8 * 32
    assert stats.best_val_loss is not None
    train.steps = 5
    resumed = Trainer(train, model, setup("none", "cpu"), resume=True)
    assert resumed.state.step == 3
    # tokens_seen, skipped, bad_steps, best val loss and its step
    assert resumed.state.stats == first.state.stats


def test_a_favor_run_with_redraws_resumes_bitwise(prepared: Path, tmp_path: Path) -> None:
    """FAVOR+ redraws its projection every 2 training forwards; the count travels in state.pt, so a
    run stopped at step 3 (between redraws) and resumed ends with the uninterrupted run's weights,
    losses and projection."""
    flags = {
        "schedule.horizon": "7",
        "schedule.warmup_steps": "1",
        "model.attn_kernel": "favor",
        "model.favor.redraw": "2",
    }
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    assert run_cli(*cli_flags(prepared, straight, steps="7", **flags)) == 0
    assert run_cli(*cli_flags(prepared, resumed, steps="3", **flags)) == 0
    assert run_cli("--out", str(resumed), "--resume", "--steps", "7") == 0
    assert [r["loss"] for r in read_metrics(straight, "train")] == [
        r["loss"] for r in read_metrics(resumed, "train")
    ]
    a, b = (
        torch.load(run / "checkpoints" / "step_0000007" / "state.pt", weights_only=True)["modules"]
        for run in (straight, resumed)
    )
    assert a == b == {"layers.0.attn.linear.kernel": {"calls": 7}}
    wa, wb = (load_model(run)[0].state_dict() for run in (straight, resumed))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def test_a_resumed_run_writes_the_same_weights_file_as_an_uninterrupted_one(
    prepared: Path, tmp_path: Path
) -> None:
    """2 steps then a resume to 4 and 4 straight steps: model.safetensors hashes the same, byte
    for byte (the header's metadata is written sorted; safetensors alone orders it afresh for each
    save). Both runs on this machine."""
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    horizon = {"schedule.horizon": "4", "schedule.warmup_steps": "1"}
    assert run_cli(*cli_flags(prepared, straight, steps="4", **horizon)) == 0
    assert run_cli(*cli_flags(prepared, resumed, steps="2", **horizon)) == 0
    assert run_cli("--out", str(resumed), "--resume", "--steps", "4") == 0
    files = [
        run / "checkpoints" / "step_0000004" / "model.safetensors" for run in (straight, resumed)
    ]
    assert files[0].read_bytes() == files[1].read_bytes()
    assert [r["step"] for r in read_metrics(resumed, "resume")] == [2]

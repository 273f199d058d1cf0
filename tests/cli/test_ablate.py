"""`archlab ablate` end to end at the tiny budget: a 2-arm suite stops during its first arm, and a
rerun finishes it without retraining the finished run, resuming the stopped one, then writes tables,
plots and computed verdicts; --collect and --print-commands."""

from __future__ import annotations

import csv
import json
import math
import shlex
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from archlab.checkpoint import load_model
from archlab.cli import main
from archlab.data.tokens import TokenData
from archlab.lab.runs.plan import RunSpec, plan_suite, prepare
from archlab.lab.runs.runner import final_step, run_plan, run_wall_s
from archlab.lab.spec.budgets import BUDGETS
from archlab.lab.spec.suite_file import load_suite
from archlab.train.config import resolve_config
from archlab.train.hardware import cpu_model
from tests.train.test_provenance import checkout_state


def _fixed_set_loss(run_dir: Path) -> float:
    """Mean float64 cross entropy of the run's final checkpoint on ceil(65,536 / block)
    windows evenly strided over the validation split (or all the non-overlapping windows it
    holds), by hand."""
    model = load_model(run_dir)[0]
    config = json.loads((run_dir / "config.json").read_text())["train"]["data"]
    block, val = (
        config["block_size"],
        np.asarray(TokenData(config["source"]).splits["val"]).astype(np.int64),
    )
    n = min(math.ceil(65_536 / block), (len(val) - 1) // block)
    windows = torch.from_numpy(
        np.stack(
            [val[round(i * (len(val) - block - 1) / (n - 1)) :][: block + 1] for i in range(n)]
        )
    )
    with torch.no_grad():
        logits = model(windows[:, :-1]).double()
    return float(F.cross_entropy(logits.flatten(0, 1), windows[:, 1:].flatten()))


SUITE = """
name: two-arms
title: MHA vs GQA at the tiny budget
source: a test
narang: Not measured.
base: {preset: llama}
match_params: none
arms:
  mha: {}
  gqa: {model.n_kv_heads: 2}
measure: [val_loss, kv_bytes_per_token]
claims:
  - {text: GQA cuts the KV cache, metric: kv_bytes_per_token, arm: gqa, versus: mha}
  - {text: GQA is as good as MHA, metric: val_loss, arm: gqa, versus: mha, expect: same}
"""


@pytest.mark.slow
def test_two_arm_suite_end_to_end_with_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    spec, out = tmp_path / "two-arms.yaml", tmp_path / "suite"
    spec.write_text(SUITE, encoding="utf-8")
    plan = plan_suite(load_suite(spec), BUDGETS["tiny"], out)
    prepare(plan)

    # the first arm: seed 0 finished, seed 1 stopped at step 12 (as a kill would leave it);
    # gqa not started
    first, stopped = plan.runs_of("mha")
    # the 24-step schedule, stopped at 12
    keys = {**stopped.keys, "steps": "12", "schedule.horizon": "24"}
    plan.runs = [first, RunSpec(stopped.arm, stopped.seed, stopped.run_dir, keys, 12)]
    run_plan(plan, jobs=2, poll_s=0.1)
    assert final_step(first.run_dir) == 24 and final_step(stopped.run_dir) == 12
    first_session = run_wall_s(stopped.run_dir)
    assert first_session > 0
    finished_log = (first.run_dir / "train.log").read_text()
    assert not any(
        r.run_dir.exists()
        for r in plan_suite(load_suite(spec), BUDGETS["tiny"], out).runs_of("gqa")
    )

    assert main(["ablate", str(spec), "--budget", "tiny", "--out", str(out), "--jobs", "2"]) == 0
    printed = capsys.readouterr().out
    # a finished run is not retrained
    assert (first.run_dir / "train.log").read_text() == finished_log
    steps = [
        json.loads(line)["step"]
        for line in (stopped.run_dir / "metrics.jsonl").read_text().splitlines()
        if json.loads(line)["kind"] == "train"
    ]
    # resumed at 12, not restarted
    assert steps == list(range(2, 25, 2)) and final_step(stopped.run_dir) == 24
    # tiny, 2 seeds: each tested verdict carries the caveat on its line, a formula's does not; one
    # line says why
    lines = printed.splitlines()
    smoke = "(2 seeds, budget tiny: a smoke test, not evidence)"
    assert (
        lines[-4].startswith("by construction")
        and "GQA cuts the KV cache" in lines[-4]
        and smoke not in lines[-4]
    )
    assert "GQA is as good as MHA" in lines[-3] and lines[-3].endswith(smoke)
    assert lines[-2].startswith(
        "A smoke test, not evidence: 2 seeds at budget tiny, below the budget small"
    )
    # the resumed session's time is added to the first's
    assert run_wall_s(stopped.run_dir) > first_session
    recorded = json.loads((out / "lab-time.json").read_text())
    assert (
        recorded["jobs"] == 2
        and recorded["train_wall_s"] > 0
        and cpu_model() in recorded["machine"]
    )

    rows = list(csv.DictReader((out / "results.csv").open()))
    assert [(r["arm"], r["seed"]) for r in rows] == [
        ("mha", "0"),
        ("mha", "1"),
        ("gqa", "0"),
        ("gqa", "1"),
    ]
    kv = {r["arm"]: float(r["kv_bytes_per_token"]) for r in rows}
    assert kv["gqa"] == kv["mha"] / 2  # 2 of 4 K/V heads, from costs.kv_cache_bytes
    # val_loss: the step-24 checkpoint's mean CE on the fixed, evenly strided windows
    for row in rows:
        run_dir = out / "runs" / row["arm"] / f"seed{row['seed']}"
        assert final_step(run_dir) == 24 and run_dir.resolve().name == row["run"]
        assert float(row["val_loss"]) == pytest.approx(_fixed_set_loss(run_dir), rel=1e-9)
    md = (out / "results.md").read_text()
    assert (
        "| GQA cuts the KV cache | kv_bytes_per_token (lower is better) | gqa vs mha | 2 | -256 |"
        in md
    )
    # what trained the runs is their own records (train/provenance.py), gathered on the page; the
    # registration was made when `archlab ablate` began, after the two mha runs above had trained
    state = checkout_state()
    commit = state["commit"] + (" (with local changes)" if state["dirty"] is True else "")
    assert f"Trained by archlab at commit {commit}: all 4 runs (recorded by the runs)." in md
    assert "Resumed runs: mha/seed1 at step 12: nothing changed." in md
    [registered] = json.loads((out / "registration.json").read_text())["registrations"]
    assert (registered["runs_trained"], registered["before_first_run"]) == (2, False)
    assert (
        f"Registered at commit {state['commit'][:12]}" in md
        and "after 2 of the plan's runs had trained" in md
    )
    assert "| by construction |" in md
    # the page words it as the terminal does: the same sentence in its header, the same caveat
    # after each outcome
    assert lines[-2] in md and f" {smoke} | " in md
    report = (out / "report.html").read_text()
    # verdict line and table row
    assert lines[-2].replace("'", "&#x27;") in report and report.count(smoke) == 2
    walls = sorted(
        run_wall_s(r.run_dir) for r in plan_suite(load_suite(spec), BUDGETS["tiny"], out).runs
    )
    assert f"Machine: {recorded['machine']}." in md and f"median {walls[2]:.0f} s per run" in md
    assert f"{sum(walls) / 60:.1f} run-minutes in all" in md
    assert f"Suite wall time: {recorded['train_wall_s'] / 60:.1f} min with --jobs 2." in md
    for png in ("val_loss.png", "grad_norm.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    html = (out / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 2 and "archlab ablate" in html

    # --collect rebuilds the report from the run folders alone (budget and seeds from plan.json)
    (out / "results.md").unlink()
    assert main(["ablate", str(spec), "--collect", str(out)]) == 0
    assert (out / "results.md").read_text() == md
    # and the folder verifies: claims, registration, hashes, results.md and report.html as its
    # files give them
    capsys.readouterr()
    assert main(["ablate", "--verify", str(out)]) == 0, capsys.readouterr().out


def test_print_commands_are_plain_train_commands(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    out = tmp_path / "suite"
    assert (
        main(["ablate", "norm-type", "--budget", "tiny", "--out", str(out), "--print-commands"])
        == 0
    )
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("archlab ")]
    assert lines[0].startswith("archlab data prepare --data stdlib --tokenizer byte")
    train = [shlex.split(line) for line in lines if line.startswith("archlab train")]
    assert len(train) == 4
    for argv in train:  # each line is what `archlab train` parses: --key value pairs
        keys = {argv[i][2:]: argv[i + 1] for i in range(2, len(argv), 2)}
        cfg, model = resolve_config([keys])
        # the store beside --out
        assert cfg.out.startswith(str(tmp_path / "store")) and cfg.steps == 24
    norms = {
        shlex.split(line)[shlex.split(line).index("--model.norm") + 1]
        if "--model.norm " in line
        else "rmsnorm"
        for line in lines[1:]
    }
    assert norms == {"rmsnorm", "layernorm"}


def test_bad_suite_name_is_one_line(capsys: pytest.CaptureFixture) -> None:
    assert main(["ablate", "no-such-suite"]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err.startswith("archlab ablate: error: suite 'no-such-suite': no such suite")
        and "\n" not in err
    )


def test_slurm_flags_are_documented_and_checked_before_compute(
    capsys: pytest.CaptureFixture,
) -> None:
    with pytest.raises(SystemExit):
        main(["ablate", "--executor", "slurm", "--help"])
    text = capsys.readouterr().out
    for flag in (
        "--slurm-partition",
        "--slurm-time",
        "--slurm-gpus",
        "--slurm-cpus",
        "--slurm-array-parallelism",
    ):
        assert flag in text
    assert main(["ablate", "heads", "--executor", "slurm", "--slurm-cpus", "0"]) == 2
    assert (
        capsys.readouterr().err.strip()
        == "archlab ablate: error: --slurm-cpus 0 is not allowed: at least 1"
    )


@pytest.mark.parametrize("seeds", ["0", "1", "-3"])
def test_too_few_seeds_are_refused_in_one_line_not_taken_for_the_default(
    seeds: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    assert (
        main(
            [
                "ablate",
                "heads",
                "--budget",
                "tiny",
                "--seeds",
                seeds,
                "--out",
                str(tmp_path / "out"),
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert err == (
        f"archlab ablate: error: --seeds {seeds} is not allowed: at least 2 seeds per arm (a "
        "verdict needs a spread)"
    ), err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--max-seeds", "8"], "--max-seeds 8 needs --sequential (it caps the second look)"),
        (
            ["--sequential", "pocock", "--max-seeds", "2"],
            "--max-seeds 2 is not allowed: more than the first look's 2 seeds per arm",
        ),
    ],
)
def test_a_bad_sequential_cap_is_one_line_before_any_work(
    flags: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    assert (
        main(["ablate", "heads", "--budget", "tiny", "--out", str(tmp_path / "out"), *flags]) == 2
    )
    captured = capsys.readouterr()
    assert captured.err.strip() == f"archlab ablate: error: {message}" and captured.out == ""
    assert not (tmp_path / "out").exists()


def test_verify_recomputes_a_folder_or_names_what_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    docs = Path(__file__).resolve().parents[2] / "docs" / "results" / "norm-type"
    assert main(["ablate", "--verify", str(docs)]) == 0
    assert (
        capsys.readouterr()
        .out.strip()
        .endswith("every verdict and page recomputed from its files agrees")
    )
    assert main(["ablate", "--verify", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(
        f"archlab ablate: error: {tmp_path} is not a lab record: it lacks suite.yaml"
    )
    assert "\n" not in err
    assert main(["ablate", "heads", "--verify", str(docs)]) == 2
    assert "--verify" in capsys.readouterr().err

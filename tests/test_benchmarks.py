"""benchmarks/gpu.sh --dry-run: the GPU script's code paths (bf16 autocast, fused AdamW, ceilings,
MFU, decode) run on the CPU with a tiny model and write a complete result file. Its figures are not
checked: they are CPU figures of a tiny model."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_gpu_script_dry_run_writes_every_figure(tmp_path: Path) -> None:
    env = {**os.environ, "PY": sys.executable, "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [
            "bash",
            str(REPO / "benchmarks" / "gpu.sh"),
            "--dry-run",
            "--no-compile",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads((tmp_path / "gpu.json").read_text())
    assert result["dry_run"] and result["device"] == "cpu (dry run)"
    train = result["train"]
    assert train["fused_adamw"] is True
    assert train["tokens_per_s"] > 0 and train["mfu"] > 0 and train["flops_per_step"] > 0
    assert train["tokens_per_s"] == result["batch"] * result["block"] / train["step_s"]
    assert result["decode"]["tokens_per_s"] > 0 and result["ceiling"]["bf16_gemm_tflops"] > 0
    assert "TRAIN" in out.stdout and "DECODE" in out.stdout


def test_every_benchmark_script_imports_and_answers_help() -> None:
    """The benchmarks are not run in CI, so an import they lose in a refactor (as bench_train.py
    once lost load_yaml) is caught here: each script starts, imports everything it uses and
    prints its --help."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    for script in sorted((REPO / "benchmarks").glob("bench_*.py")):
        done = subprocess.run(
            [sys.executable, str(script), "--help"],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert done.returncode == 0 and "usage:" in done.stdout, (
            f"{script.name}: {done.stderr[-500:]}"
        )


def test_lab_timings_script_runs_every_comparison_on_tiny_settings(tmp_path: Path) -> None:
    """benchmarks/bench_lab_timings.py --tiny: every comparison of the three timing kinds runs and
    its figures hang together (ratios inside their intervals, the step effect = share x (1 - 1 /
    speedup)); no value is checked against a speed."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    out = tmp_path / "timings.json"
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "bench_lab_timings.py"),
            "--tiny",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(out.read_text())
    rows = result["block"] + result["norm"] + [result["norm_step"]] + result["decode"]
    assert [r["comparison"] for r in result["block"]] == [
        "fused parallel vs serial (train step)",
        "fused parallel vs unfused parallel (train step)",
    ]
    assert [r["comparison"] for r in result["norm"]] == [
        f"RMSNorm vs LayerNorm, {b}, d 32" for b in ("composite", "module")
    ]
    assert [r["comparison"][:10] for r in result["decode"]] == ["GQA vs MHA", "MQA vs MHA"]
    for r in rows:
        lo, hi = r["ci95"]
        assert r["pairs"] == 3 and 0 < lo <= r["mean_ratio"] <= hi
    for e in result["norm_step_effect"]:
        assert e["step_effect"] == pytest.approx(e["norm_share"] * (1 - 1 / e["op_speedup"]))
    assert "HEADS: one-token decode step" in done.stdout

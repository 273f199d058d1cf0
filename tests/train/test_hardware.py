"""bf16 detection and refusal, and the CPU thread rule, with the machine's answers replaced
by fixed ones."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest
import torch

from archlab.cli import main
from archlab.train import hardware

CPU = torch.device("cpu")


def test_bf16_is_refused_in_one_line_on_a_cpu_without_units_unless_allowed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(hardware, "cpu_flags", lambda: {"avx2", "fma"})
    with pytest.raises(
        ValueError, match=r"precision.dtype='bf16' is not allowed on this cpu: it has no bf16 units"
    ):
        hardware.check_precision("bf16", CPU, allow_slow_bf16=False)
    hardware.check_precision("bf16", CPU, allow_slow_bf16=True)  # forced: no error
    hardware.check_precision("fp32", CPU, allow_slow_bf16=False)


def test_fp32_run_is_told_about_bf16_units(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(hardware, "cpu_flags", lambda: {"avx512f", "amx_bf16"})
    assert hardware.bf16_units(CPU) == "amx_bf16"
    with caplog.at_level(logging.INFO, logger=hardware.__name__):
        hardware.check_precision("fp32", CPU, allow_slow_bf16=False)
        hardware.check_precision("bf16", CPU, allow_slow_bf16=False)  # supported: no error
    assert "amx_bf16: --precision.dtype bf16 should train faster" in caplog.text


def test_bf16_advice_follows_the_step_size(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A small step is told nothing in fp32 and warned in bf16 (measured slower there); a large
    one is told."""
    monkeypatch.setattr(hardware, "cpu_flags", lambda: {"avx512f", "avx512_bf16"})
    small, large = hardware.BF16_STEP_FLOPS / 4, hardware.BF16_STEP_FLOPS * 2
    with caplog.at_level(logging.INFO, logger=hardware.logger.name):
        hardware.check_precision("fp32", CPU, allow_slow_bf16=False, step_flops=small)
        assert "should train faster" not in caplog.text
        hardware.check_precision("bf16", CPU, allow_slow_bf16=False, step_flops=small)
        assert f"likely slower than fp32 for a step of {small / 1e9:.1f} GFLOP" in caplog.text
        caplog.clear()
        hardware.check_precision("bf16", CPU, allow_slow_bf16=False, step_flops=large)
        assert caplog.text == ""
        hardware.check_precision("fp32", CPU, allow_slow_bf16=False, step_flops=large)
        assert "avx512_bf16: --precision.dtype bf16 should train faster" in caplog.text


def test_cli_refuses_bf16_before_any_work(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setattr(hardware, "cpu_flags", lambda: set())
    # a corpus that exists: bf16 is the refusal
    (tmp_path / "corpus.txt").write_text("def f(x):\n    return x\n" * 50)
    code = main(
        [
            "train",
            "--data",
            str(tmp_path / "corpus.txt"),
            "--out",
            str(tmp_path / "run"),
            "--precision.dtype",
            "bf16",
            "--precision.device",
            "cpu",
        ]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        code == 2
        and len(err) == 1
        and err[0].startswith("archlab train: error: precision.dtype='bf16'")
    )
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "flops, cores, load, requested, want",
    [
        (5e7, 8, 0.0, 0, 1),  # small step: one thread however many cores are idle
        # 1 GFLOP on an idle 2-core machine: both (measured 1.5x faster at 1.9 GFLOP)
        (1e9, 2, 0.0, 0, 2),
        (1e12, 8, 0.0, 0, 8),  # large step on an idle machine: every physical core
        (1e12, 8, 3.2, 0, 5),  # three cores busy: the five idle ones
        (1e12, 2, 7.0, 0, 1),  # overloaded: one thread, never zero
        (1e9, 2, 7.0, 3, 3),  # precision.threads wins
    ],
)
def test_thread_rule(
    monkeypatch: pytest.MonkeyPatch,
    flops: float,
    cores: int,
    load: float,
    requested: int,
    want: int,
) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(hardware, "physical_cores", lambda: cores)
    monkeypatch.setattr(hardware, "busy_cores", lambda: load)
    n, why = hardware.pick_threads(flops, requested)
    assert n == want and why


@pytest.mark.parametrize(
    "omp, requested, want",
    [
        ("1", 0, 1),  # the lab's --jobs 2 starts each run with 1: kept on an idle 2-core machine
        ("3", 0, 3),
        ("1", 2, 2),  # precision.threads still wins
        ("0", 0, 2),
        ("", 0, 2),
        ("four", 0, 2),  # not a positive count: the load rule
    ],
)
def test_an_omp_cap_set_by_the_caller_is_kept(
    monkeypatch: pytest.MonkeyPatch, omp: str, requested: int, want: int
) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", omp)
    monkeypatch.setattr(hardware, "physical_cores", lambda: 2)
    # two runs started together both see an idle machine
    monkeypatch.setattr(hardware, "busy_cores", lambda: 0.0)
    assert hardware.pick_threads(1e12, requested)[0] == want


def test_busy_cores_reads_the_non_idle_share_of_each_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """/proc/stat per-CPU lines: idle and iowait are free, everything else (steal too) busy; the
    summary line and CPUs outside the affinity mask are skipped."""
    monkeypatch.setattr(hardware.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    # user nice system idle iowait irq softirq steal guest guest_nice
    line = "cpu{} {} 0 {} {} {} 0 0 {} 0 0"
    before = "\n".join(
        [
            "cpu 1 1 1 1 1 1 1 1 0 0",
            line.format(0, 100, 0, 100, 0, 0),
            line.format(1, 100, 0, 100, 0, 0),
            line.format(2, 0, 0, 0, 0, 0),
            "intr 5",
        ]
    )
    # cpu0: 100 user + 50 system of 200 ticks -> 0.75 busy; cpu1: 20 steal + 80 iowait of 100 ->
    # 0.2; cpu2 ignored
    after = "\n".join(
        [
            "cpu 9 9 9 9 9 9 9 9 0 0",
            line.format(0, 200, 50, 150, 0, 0),
            line.format(1, 100, 0, 100, 80, 20),
            line.format(2, 500, 0, 0, 0, 0),
            "intr 9",
        ]
    )
    t0, t1 = hardware.cpu_times(before), hardware.cpu_times(after)
    assert set(t0) == {0, 1} and t0[0] == (100, 200)
    assert hardware.busy_between(t0, t1) == pytest.approx(0.75 + 0.2)
    assert hardware.busy_between(t1, t1) == 0.0  # no ticks elapsed: nothing known to be busy


def test_busy_cores_samples_this_machine() -> None:
    assert 0.0 <= hardware.busy_cores(0.05) <= len(os.sched_getaffinity(0)) + 0.5


def test_physical_cores_counts_this_machine() -> None:
    assert 1 <= hardware.physical_cores() <= len(os.sched_getaffinity(0))


def test_machine_line_names_the_flags_that_decide_speed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        hardware, "cpu_flags", lambda: {"avx2", "fma", "avx512f", "avx512_bf16", "sse2"}
    )
    monkeypatch.setattr(hardware, "cpu_model", lambda: "Test CPU 9000")
    monkeypatch.setattr(hardware, "physical_cores", lambda: 3)
    line = hardware.describe_machine()
    assert line.startswith("Test CPU 9000, 3 physical cores")
    assert (
        "flags: avx2 fma avx512f avx512_bf16; no amx_bf16" in line
        and f"torch {torch.__version__}" in line
    )
    monkeypatch.setattr(hardware, "cpu_flags", lambda: {"sse2"})
    assert (
        "flags: none of avx2/avx512; no avx512f / amx_bf16 / avx512_bf16"
        in hardware.describe_machine()
    )


def test_cpu_class_is_the_vendor_the_aten_kernels_and_the_isa_caps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.is_file():
        pytest.skip("no /proc/cpuinfo on this system")
    vendor = next(
        line.split(":", 1)[1].strip()
        for line in cpuinfo.read_text().splitlines()
        if line.startswith("vendor_id")
    )
    for name in hardware.ISA_CAPS:
        monkeypatch.delenv(name, raising=False)
    assert hardware.cpu_class() == f"{vendor} {torch.backends.cpu.get_cpu_capability()}"
    monkeypatch.setenv("MKL_ENABLE_INSTRUCTIONS", "AVX2")
    assert (
        hardware.cpu_class()
        == f"{vendor} {torch.backends.cpu.get_cpu_capability()} (MKL_ENABLE_INSTRUCTIONS=AVX2)"
    )
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert hardware.cpu_class().endswith("(ONEDNN_MAX_CPU_ISA=AVX2, MKL_ENABLE_INSTRUCTIONS=AVX2)")


@pytest.mark.slow
def test_cpu_class_follows_atens_cap_in_a_fresh_interpreter() -> None:
    """ATEN_CPU_CAPABILITY is read by torch at import: a capped interpreter runs (and names)
    its DEFAULT kernels."""
    import subprocess
    import sys

    env = {**os.environ, "ATEN_CPU_CAPABILITY": "default"}
    out = subprocess.run(
        [sys.executable, "-c", "from archlab.train.hardware import cpu_class; print(cpu_class())"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out[1] == "DEFAULT"

"""What the machine offers a run: bf16 units, and how many CPU threads a training step should use.

bf16 autocast pays off where the hardware multiplies bf16 natively: CUDA GPUs from Ampere on, and
CPUs with AVX512-BF16 or AMX-BF16 (Intel Cooper Lake / Sapphire Rapids, AMD Zen 4 on). Elsewhere
PyTorch emulates it with conversions around fp32 kernels, several times slower than fp32, so
`check_precision` refuses bf16 there (one line; `precision.allow_slow_bf16 true` overrides) and
recommends it where it helps.

Threads (`pick_threads`): an OpenMP thread pool only helps a step when every thread gets a core. Two
rules, measured on 2-core machines quiet and shared (docs/performance.md): below `SMALL_STEP_FLOPS`
of matmul work per step, one thread (the per-op fork/join costs more than it saves); otherwise the
physical cores not already busy, sampled from /proc/stat at the start (a busy core makes the other
threads spin-wait on it). `precision.threads N` overrides both, and so does an `OMP_NUM_THREADS` the
caller set (the lab's `--jobs N` starts each run with 1): without it, two runs started together each
saw an idle machine and took both cores, four threads on two cores at half the speed of one each.
"""

from __future__ import annotations

import logging
import os
import platform
import time
from pathlib import Path

import torch

logger = logging.getLogger(__name__)

BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")  # /proc/cpuinfo flags of native bf16 dot products
# matmul FLOPs per step below which one thread wins on an idle machine: 2 threads lost 4% at 0.009
# GFLOP and won 11% at 0.21, 52% at 1.9 GFLOP (docs/performance.md, "Threads")
SMALL_STEP_FLOPS = 1e8
# matmul FLOPs per step from which bf16 autocast beats fp32 on a CPU with bf16 units: measured 0.97x
# at 1.9 GFLOP, 1.25x at 5.3 and 1.60x at 12 with AMX, 1.22x / 1.29x / 1.48x with avx512_bf16 alone
# (Zen 4) (2 threads, T <= 512; docs/performance.md, "bf16")
BF16_STEP_FLOPS = 5e9


def cpu_flags() -> set[str]:
    """The CPU feature flags of /proc/cpuinfo (empty where the file does not exist, e.g. macOS)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith(("flags", "Features")):
            return set(line.split(":", 1)[1].split())
    return set()


def bf16_units(device: torch.device) -> str | None:
    """What multiplies bf16 natively on `device` (a CPU flag or 'cuda'), or None when
    it is emulated."""
    if device.type == "cuda":
        return "cuda" if torch.cuda.is_bf16_supported(including_emulation=False) else None
    flags = cpu_flags()
    return next((f for f in BF16_CPU_FLAGS if f in flags), None)


def check_precision(
    dtype: str, device: torch.device, allow_slow_bf16: bool, step_flops: float | None = None
) -> None:
    """Refuse bf16 where it would be emulated (unless allowed). Where a CPU has the units, recommend
    bf16 to an fp32 run whose step (`step_flops` of matmul work, when known) is large enough to gain
    from it, and warn a bf16 run whose step is too small to."""
    refuse_emulated_bf16(dtype, device, allow_slow_bf16)
    units = bf16_units(device)
    if units is None or device.type != "cpu":
        return
    small = step_flops is not None and step_flops < BF16_STEP_FLOPS
    if dtype == "fp32" and not small:
        logger.info("this CPU has %s: --precision.dtype bf16 should train faster", units)
    elif dtype == "bf16" and small:
        logger.warning(
            "bf16 on this CPU (%s) is likely slower than fp32 for a step of %.1f GFLOP: the casts "
            "around each op cost more than the faster matmuls save below ~%.0f GFLOP per step",
            units,
            step_flops / 1e9,
            BF16_STEP_FLOPS / 1e9,
        )


def refuse_emulated_bf16(dtype: str, device: torch.device, allow_slow_bf16: bool) -> None:
    """The refusal half of `check_precision`, which logs nothing: a run checks it with its other
    inputs, before its data is prepared, and takes the advice once every input passed."""
    if dtype == "bf16" and bf16_units(device) is None and not allow_slow_bf16:
        raise ValueError(
            f"precision.dtype='bf16' is not allowed on this {device.type}: it has no bf16 units "
            f"({' / '.join(BF16_CPU_FLAGS)}), so autocast would run several times slower than "
            "fp32; use fp32, or pass --precision.allow_slow_bf16 true to run it anyway"
        )


def physical_cores() -> int:
    """Cores (not SMT siblings) among the CPUs this process may run on."""
    cpus = (
        sorted(os.sched_getaffinity(0))
        if hasattr(os, "sched_getaffinity")
        else list(range(os.cpu_count() or 1))
    )
    cores = set()
    for cpu in cpus:
        topo = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            cores.add(
                (
                    topo.joinpath("physical_package_id").read_text().strip(),
                    topo.joinpath("core_id").read_text().strip(),
                )
            )
        except OSError:
            cores.add(("cpu", str(cpu)))
    return max(1, len(cores))


def busy_cores(interval: float = 0.3) -> float:
    """CPUs that other processes keep busy right now: the non-idle share of each CPU this
    process may run on, over `interval` seconds of /proc/stat while this process sleeps. Where
    /proc/stat is missing, the 1-minute load average, which lags: it still counts a run that
    ended seconds ago (two threads measured 1.9x faster than the one such a stale load picked); 0
    where neither exists."""
    before = cpu_times()
    if before:
        time.sleep(interval)
        return busy_between(before, cpu_times())
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0


def cpu_times(stat: str | None = None) -> dict[int, tuple[int, int]]:
    """CPU -> (busy, total) jiffies from /proc/stat's per-CPU lines (user nice system idle iowait
    irq softirq steal; guest time is already inside user), for the CPUs this process may run on;
    {} where unreadable."""
    if stat is None:
        try:
            stat = Path("/proc/stat").read_text()
        except OSError:
            return {}
    allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    times = {}
    for line in stat.splitlines():
        name, *fields = line.split()
        if not name.startswith("cpu") or name == "cpu" or len(fields) < 8:
            continue
        cpu = int(name[3:])
        if allowed is None or cpu in allowed:
            ticks = [int(f) for f in fields[:8]]
            total = sum(ticks)
            # idle and iowait are not busy; steal is
            times[cpu] = (total - ticks[3] - ticks[4], total)
    return times


def busy_between(before: dict[int, tuple[int, int]], after: dict[int, tuple[int, int]]) -> float:
    """Busy CPUs (0 .. number of CPUs) between two `cpu_times` snapshots."""
    busy = 0.0
    for cpu, (b1, t1) in after.items():
        b0, t0 = before.get(cpu, (b1, t1))
        if t1 > t0:
            busy += (b1 - b0) / (t1 - t0)
    return busy


def pick_threads(step_flops: float, requested: int = 0) -> tuple[int, str]:
    """CPU threads for a training step doing `step_flops` of matmul work, and the reason,
    for the log."""
    if requested > 0:
        return requested, "precision.threads"
    omp = os.environ.get("OMP_NUM_THREADS", "").strip()
    # the caller's cap (lab --jobs): the load seen at start does not know it
    if omp.isdigit() and int(omp) > 0:
        return int(omp), "OMP_NUM_THREADS"
    if step_flops < SMALL_STEP_FLOPS:
        return 1, f"small step ({step_flops / 1e9:.3f} GFLOP < {SMALL_STEP_FLOPS / 1e9:.1f})"
    cores, load = physical_cores(), busy_cores()
    free = max(1, min(cores, round(cores - load)))
    return free, f"{cores} physical cores, {load:.1f} busy with other work"


def cpuinfo_field(key: str) -> str | None:
    """The first value of `key` in /proc/cpuinfo ('model name', 'vendor_id'), or None."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        if line.split(":", 1)[0].strip() == key:
            return line.split(":", 1)[1].strip()
    return None


def cpu_model() -> str:
    """The CPU's marketing name from /proc/cpuinfo, or the platform's processor string where
    that is missing."""
    found = cpuinfo_field("model name") or platform.processor() or platform.machine()
    return found or "unknown CPU"


# environment variables that cap the instruction set of oneDNN and MKL (ATen's own cap,
# ATEN_CPU_CAPABILITY, shows in torch.backends.cpu.get_cpu_capability())
ISA_CAPS = ("ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")


def cpu_vendor() -> str:
    """/proc/cpuinfo's vendor_id (GenuineIntel, AuthenticAMD), or the platform's machine name."""
    return cpuinfo_field("vendor_id") or platform.machine() or "unknown"


def cpu_class() -> str:
    """The class of CPU kernels a float result comes from: the vendor, the instruction set ATen's
    kernels use (AVX512, AVX2, DEFAULT, ...) and any cap on oneDNN's and MKL's, e.g.
    'AuthenticAMD AVX2', or under CI's AVX2 pass on an Intel CPU
    'GenuineIntel AVX2 (ONEDNN_MAX_CPU_ISA=AVX2, MKL_ENABLE_INSTRUCTIONS=AVX2)'.
    PyTorch, oneDNN and MKL pick kernels per instruction set, so the last bits of a float computed
    on one class can differ on another: bitwise fingerprints are compared within a class only."""
    caps = [f"{name}={os.environ[name]}" for name in ISA_CAPS if os.environ.get(name)]
    return f"{cpu_vendor()} {torch.backends.cpu.get_cpu_capability()}" + (
        f" ({', '.join(caps)})" if caps else ""
    )


def describe_machine() -> str:
    """One line for reports: CPU, cores, the vector and bf16 flags that decide speed,
    torch and Python."""
    flags = cpu_flags()
    vector = [f for f in ("avx2", "fma", "avx512f", *BF16_CPU_FLAGS) if f in flags]
    missing = [f for f in ("avx512f", *BF16_CPU_FLAGS) if f not in flags]
    gpu = f", GPU {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else ", no GPU"
    return (
        f"{cpu_model()}, {physical_cores()} physical cores ({os.cpu_count()} logical); flags: "
        f"{' '.join(vector) or 'none of avx2/avx512'}"
        + (f"; no {' / '.join(missing)}" if missing else "")
        + f"{gpu}; torch {torch.__version__}, Python {platform.python_version()}"
    )


def resolve_device(name: str, local_rank: int = 0, flag: str = "--device") -> torch.device:
    """`name` (auto, cpu, cuda, cuda:N, mps) as a device this machine has, or one line naming
    `flag`, the value and what the machine lacks. `auto` picks CUDA when present; a bare `cuda`
    under torchrun is the GPU of the process's `local_rank`."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ValueError(
            f"{flag} {name!r} is not allowed: auto, cpu, cuda, cuda:N or mps"
        ) from None
    if device.type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"{flag} {name!r} is not allowed: archlab runs on cpu, cuda or mps")
    if device.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0:
            raise ValueError(
                f"{flag} {name}: this machine has no CUDA device (torch sees none); use cpu"
            )
        if device.index is None:
            return torch.device("cuda", local_rank % count)
        if device.index >= count:
            raise ValueError(
                f"{flag} {name}: this machine has {count} CUDA device(s), cuda:0..cuda:{count - 1}"
            )
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"{flag} {name}: MPS is not available on this machine; use cpu")
    return device

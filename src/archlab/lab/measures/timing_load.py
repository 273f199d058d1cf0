"""The machine's load beside every timing: read with each pair, shown beside each timing verdict,
warned about when it exceeds the machine's CPUs.

A timing compares the speed of two arms on this machine; other work running at the same time slows
both, but not alike (a pair's two halves meet different moments of it), so a loaded machine can
turn a 1.1x difference into anything: the norm-type suite's timings were judged at a load of 4.7
on 2 cores, and one norm's time ratio came out at 0.14. `time_pairs` (lab/measures/timing.py)
reads the 1-minute load average (`os.getloadavg`) after each pair and keeps it with the times
(SUITE/lab-timings.json, timings.csv), with the CPU count and the cores the process may use; the
verdicts and the page show the highest load beside each timing, and one line warns when it exceeds
the CPUs (the load average counts runnable threads over the whole machine: above its CPU count some
of them waited for one). No torch here: the verdicts and the page read it.
"""

from __future__ import annotations

import os
from collections.abc import Callable

LoadAvg = Callable[[], tuple[float, float, float]]


def cpu_count() -> int:
    """The machine's CPUs, the scale of its load average."""
    return os.cpu_count() or 1


def usable_cores() -> int:
    """The cores this process may run on (its affinity; the CPU count where that is unknown)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else cpu_count()


def read_load(loadavg: LoadAvg | None = None) -> float:
    """The 1-minute load average now (`os.getloadavg`, looked up when called; NaN where the
    platform has none)."""
    try:
        return float((loadavg or os.getloadavg)()[0])
    except (OSError, AttributeError):
        return float("nan")


def peak_load(record: dict) -> float | None:
    """The highest 1-minute load read during a timing (None when none was recorded: a
    page from before)."""
    loads = [x for x in record.get("load") or [] if x == x]  # NaN: not readable there
    return max(loads) if loads else None


def load_note(record: dict) -> str:
    """'timed at load 4.7 (1-min average, the highest of its 24 pairs) on 2 CPUs', or ''
    without a record."""
    peak = peak_load(record)
    if peak is None:
        return ""
    cpus = record.get("cpus") or "?"
    return (
        f"timed at load {peak:.1f} (1-min average, the highest of its {len(record['load'])} pairs) "
        f"on {cpus} CPUs, {record.get('threads') or 'all'} thread(s)"
    )


def load_warning(metric: str, record: dict) -> str:
    """One line when the load during the timing exceeded the machine's CPUs, else ''."""
    peak, cpus = peak_load(record), record.get("cpus")
    if peak is None or not cpus or peak <= cpus:
        return ""
    return (
        f"warning: timing {metric} ran at load {peak:.1f} on {cpus} CPUs: other work competed for "
        "the cores, so its times and its verdict are not a clean measurement; time it again on a "
        "quiet machine (delete its entry in lab-timings.json)"
    )

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

The 1-minute average lags: a timing of a few seconds right after two training runs ended reads the
load those runs left (the heads page: 1.87 at all 48 pairs, timed with nothing else running). So
each pair also records the CPUs other processes kept busy while it ran (`OtherWork`): the
machine's busy time in /proc/stat over the pair, less this process's own CPU time, over the pair's
wall time. The note and the warning use that mean over the pairs where a timing recorded it (Linux),
and the load average where it did not (a page timed before).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable

LoadAvg = Callable[[], tuple[float, float, float]]
# other work below this many CPUs is the kernel's and the clock ticks' (10 ms) noise, not a load
NOISE_CPUS = 0.1


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


def busy_cpu_seconds(stat: str = "/proc/stat") -> float | None:
    """Seconds every CPU of the machine has spent busy since boot (all but idle and iowait, from
    /proc/stat's `cpu` line); None where there is no such file (not Linux)."""
    try:
        with open(stat, encoding="ascii") as f:
            fields = f.readline().split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu":
        return None
    ticks = [int(x) for x in fields[1:]]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
    return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")  # guest time is inside user


class OtherWork:
    """The CPUs other processes kept busy between `start()` and `stop()`: the machine's busy
    seconds (`busy`) less this process's own CPU seconds (`own`), over the wall seconds (`wall`).
    NaN where the machine's busy time cannot be read."""

    def __init__(
        self,
        busy: Callable[[], float | None] | None = None,
        own: Callable[[], float] = time.process_time,
        wall: Callable[[], float] = time.perf_counter,
    ) -> None:
        # None: busy_cpu_seconds, looked up when called
        self.busy, self.own, self.wall = busy, own, wall
        self._at: tuple[float | None, float, float] | None = None

    def _busy(self) -> float | None:
        return (self.busy or busy_cpu_seconds)()

    def start(self) -> None:
        self._at = (self._busy(), self.own(), self.wall())

    def stop(self) -> float:
        if self._at is None:
            raise RuntimeError("OtherWork.stop() before start()")
        (busy0, own0, wall0), busy1 = self._at, self._busy()
        own1, wall1 = self.own(), self.wall()
        if busy0 is None or busy1 is None or wall1 <= wall0:
            return math.nan
        # busy time counts in 10 ms ticks: a short pair can read below 0 or above the truth, and
        # only the mean over the pairs (other_work) is unbiased, so no pair is clamped here
        return ((busy1 - busy0) - (own1 - own0)) / (wall1 - wall0)


def other_work(record: dict) -> float | None:
    """The mean CPUs of other work over a timing's pairs, at least 0 (None when it did not record
    them)."""
    values = [x for x in record.get("others") or [] if x == x]
    return max(0.0, sum(values) / len(values)) if values else None


def peak_load(record: dict) -> float | None:
    """The highest 1-minute load read during a timing (None when none was recorded: a
    page from before)."""
    loads = [x for x in record.get("load") or [] if x == x]  # NaN: not readable there
    return max(loads) if loads else None


def load_note(record: dict) -> str:
    """'timed with 0.02 CPUs of other work (the mean over its 24 pairs) on 2 CPUs', or, for a
    timing that recorded only the load average, 'timed at load 4.7 (1-min average, the highest of
    its 24 pairs) on 2 CPUs'; '' without either."""
    cpus, threads = record.get("cpus") or "?", record.get("threads") or "all"
    others = other_work(record)
    if others is not None:
        return (
            f"timed with {others:.2f} CPUs of other work (the mean over its "
            f"{len(record['others'])} pairs) on {cpus} CPUs, {threads} thread(s)"
        )
    peak = peak_load(record)
    if peak is None:
        return ""
    return (
        f"timed at load {peak:.1f} (1-min average, the highest of its {len(record['load'])} pairs) "
        f"on {cpus} CPUs, {threads} thread(s)"
    )


def load_warning(metric: str, record: dict) -> str:
    """One line when other work competed for the cores during the timing, else '': other
    processes' CPUs and the timing's threads together above the machine's CPUs (or, for a timing
    that recorded only the load average, a load above them)."""
    cpus, others = record.get("cpus"), other_work(record)
    if not cpus:
        return ""
    if others is not None:
        if others + (record.get("threads") or cpus) <= cpus + NOISE_CPUS:
            return ""
        what = f"with {others:.2f} CPUs of other work"
    else:
        peak = peak_load(record)
        if peak is None or peak <= cpus:
            return ""
        what = f"at load {peak:.1f}"
    return (
        f"warning: timing {metric} ran {what} on {cpus} CPUs: other work competed for "
        "the cores, so its times and its verdict are not a clean measurement; time it again on a "
        "quiet machine (delete its entry in lab-timings.json)"
    )

"""A worker process that keeps torch imported and trains the lab's runs one after another.

Each run is the `archlab train` command line of its plan (`RunSpec.command`), run through the same entry point
(`archlab.cli.main`) with the process's stdout and stderr pointed at the run's `train.log`, exactly as the run's
own `archlab train` process would run it: the trainer seeds every stream from the run's config, so a run's values
do not depend on the runs the worker trained before it (tests/lab/test_worker.py compares with `archlab train`
alone, bit for bit). What the worker saves is what a fresh process pays per run: the interpreter, importing torch
and archlab (and torch's meta-device machinery the memory check builds a model with), and the exit.

The worker starts with `threads` intra-op threads (OMP_NUM_THREADS / MKL_NUM_THREADS set before torch is
imported, as the runner sets them for a subprocess) and ignores SIGINT between runs; during a run the trainer's
own handlers checkpoint on SIGINT / SIGTERM. This module imports no torch: the worker imports it after its
environment is set.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path


def _serve(conn: Connection, threads: int | None) -> None:
    """The worker's loop: receive (argv, log path), run `archlab ARGV` with its output in the log, send back the
    exit code; None stops it."""
    if threads is not None:
        os.environ.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides; a run's trainer handles its own
    from archlab.cli import main  # torch and archlab, once

    while (job := conn.recv()) is not None:
        argv, log = job
        conn.send(_run(main, argv, Path(log)))


def _run(main, argv: list[str], log: Path) -> int:
    """`main(argv)` with fds 1 and 2 appended to `log` (as a subprocess's would be); its exit code."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with log.open("a", encoding="utf-8") as out:
        os.dup2(out.fileno(), 1)
        os.dup2(out.fileno(), 2)
        try:
            return main(argv)
        except BaseException:  # noqa: BLE001 - the run fails, the worker goes on; the log has the traceback
            traceback.print_exc()
            return 1
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])


@dataclass
class Worker:
    """One worker process and the run it is training (None when idle)."""

    process: multiprocessing.process.BaseProcess
    conn: Connection
    busy: object = None

    @classmethod
    def start(cls, threads: int | None) -> Worker:
        ctx = multiprocessing.get_context("spawn")  # a forked copy of a parent that has run torch can hang
        parent, child = ctx.Pipe()
        process = ctx.Process(target=_serve, args=(child, threads), daemon=True, name="archlab-lab-worker")
        process.start()
        child.close()
        return cls(process, parent)

    def submit(self, run: object, argv: list[str], log: Path) -> None:
        self.busy = run
        self.conn.send((argv, str(log)))

    def result(self, timeout: float = 0.0) -> int | None:
        """The exit code of the run under way once it ended (None while it trains). A worker that died reports
        its own exit code, negative for a signal, as a subprocess would."""
        if self.conn.poll(timeout):
            try:
                return int(self.conn.recv())
            except EOFError:
                pass
        elif self.process.is_alive():
            return None
        self.process.join()
        return self.process.exitcode if self.process.exitcode not in (None, 0) else 1

    def interrupt(self) -> None:
        """SIGTERM: the run under way checkpoints its current step and returns."""
        if self.process.is_alive() and self.process.pid is not None:
            os.kill(self.process.pid, signal.SIGTERM)

    def stop(self) -> None:
        if self.process.is_alive():
            try:
                self.conn.send(None)
            except (BrokenPipeError, OSError):
                pass
            self.process.join(timeout=30)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.conn.close()

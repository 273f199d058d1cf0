"""A worker process that keeps torch imported and trains the lab's runs one after another.

Each run is what its `archlab train` command line asks (`RunSpec.keys`, the layer of dotted keys
the command's flags make), started as the command starts it: the request checked and its configs
resolved by `archlab.train.launch` (a stopped run resumed from its checkpoint), then `train()`,
with the process's stdout and stderr (the trainer's log) appended to the run's `train.log`, and
the command's exit codes: 0, 1 for a run that diverged or a full disk, 2 for a refused input. The
trainer seeds every stream from the run's config, so a run's values do not depend on the runs the
worker trained before it (tests/lab/test_worker.py compares with `archlab train` alone, bit for
bit). What the worker saves is what a fresh process pays per run: the interpreter, importing torch
and archlab, torch's meta-device machinery the memory check builds a model with, and the exit.

The worker starts with `threads` intra-op threads (OMP_NUM_THREADS / MKL_NUM_THREADS set before
torch is imported, as the runner sets them for a subprocess) and ignores SIGINT between runs; during
a run the trainer's own handlers checkpoint on SIGINT / SIGTERM. This module imports no torch: the
worker imports it after its environment is set.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import sys
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

logger = logging.getLogger(__name__)
EXIT_FAILED, EXIT_REFUSED = 1, 2  # archlab train's exit codes: diverged or a fault; a refused input


def _serve(conn: Connection, threads: int | None) -> None:
    """The worker's loop: receive (keys, resume, log path), train the run with its output in the
    log, send back its exit code; None stops it."""
    if threads is not None:
        os.environ.update(OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    # the parent decides; a run's trainer handles its own
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=logging.INFO, format="%(message)s")  # as `archlab train` logs
    import archlab.train.trainer  # noqa: F401 - torch and archlab, once

    while (job := conn.recv()) is not None:
        keys, resume, log = job
        conn.send(_logged(Path(log), lambda: train_run(keys, resume)))


def train_run(keys: dict[str, str], resume: bool) -> int:
    """One run as `archlab train` runs it (module doc: train/launch.py's `train_run`);
    its exit code."""
    from archlab.storage import StorageError
    from archlab.train.launch import NothingToTrain
    from archlab.train.launch import train_run as begin_and_train
    from archlab.train.trainer import TrainingDiverged

    try:
        result = begin_and_train([dict(keys)], resume)
    except NothingToTrain as done:
        logger.info("%s", done)
        return 0
    except TrainingDiverged as err:
        logger.error("archlab train: %s", err)
        return EXIT_FAILED
    except StorageError as err:
        logger.error("archlab train: error: %s", err)
        return EXIT_FAILED
    except (ValueError, FileNotFoundError) as err:
        logger.error("archlab train: error: %s", err)
        return EXIT_REFUSED
    stopped = f" (stopped by {result.interrupted})" if result.interrupted else ""
    losses = [f"{x:.4f}" if x is not None else "-" for x in (result.train_loss, result.val_loss)]
    logger.info(
        "step %d%s: train loss %s, val loss %s, %s tokens/s; checkpoint %s",
        result.step,
        stopped,
        *losses,
        f"{result.tokens_per_s:,.0f}",
        result.checkpoint,
    )
    return 0


def _logged(log: Path, run) -> int:  # noqa: ANN001 - a function of no arguments returning an exit code
    """`run()` with fds 1 and 2 appended to `log` (as a subprocess's would be); its exit code, 1 on
    an error it did not expect (the traceback in the log)."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with log.open("a", encoding="utf-8") as out:
        os.dup2(out.fileno(), 1)
        os.dup2(out.fileno(), 2)
        try:
            return run()
        except Exception:  # the run fails, the worker goes on
            logger.exception("the run failed")
            return EXIT_FAILED
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
        """A worker whose process starts with `threads` intra-op threads (None: torch's choice). The
        caps are in its environment from the start: a spawned interpreter imports the parent's main
        module, and so torch and its OpenMP pool, before `_serve` runs; a pool made with every core
        and cut to one thread later left its other threads spinning (measured: two workers at --jobs
        2 trained at 0.44x the speed of two processes)."""
        # a forked copy of a parent that has run torch can hang
        ctx = multiprocessing.get_context("spawn")
        parent, child = ctx.Pipe()
        process = ctx.Process(
            target=_serve, args=(child, threads), daemon=True, name="archlab-lab-worker"
        )
        caps = (
            {"OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
            if threads is not None
            else {}
        )
        before = {name: os.environ.get(name) for name in caps}
        # the spawned process inherits this environment; this one gets its own back
        os.environ.update(caps)
        try:
            process.start()
        finally:
            for name, value in before.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
        child.close()
        return cls(process, parent)

    def submit(self, run: object, keys: dict[str, str], resume: bool, log: Path) -> None:
        """Train `run` (its dotted keys, resumed or not) next; its output goes to `log`."""
        self.busy = run
        self.conn.send((dict(keys), resume, str(log)))

    def result(self, timeout: float = 0.0) -> int | None:
        """The exit code of the run under way once it ended (None while it trains). A worker that
        died reports its own exit code, negative for a signal, as a subprocess would."""
        if self.conn.poll(timeout):
            try:
                return int(self.conn.recv())
            # a worker that died: EOF, or ECONNRESET where a message to it was still unread
            except (EOFError, ConnectionResetError):
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

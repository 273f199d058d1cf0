"""The `archlab` command line: one sub-command per module in `archlab.commands`.

Each command module owns its flags and calls one library function; this file only dispatches, and
turns what users cause into one line on stderr: bad input (exit 2), a write the filesystem refused
(a full disk, a read-only folder: `archlab.storage.StorageError`, exit 1), Ctrl-C (exit 130), a
closed pipe such as `archlab inspect ... | head` (quiet exit, like other Unix tools). Only the named
command's module is imported, so `archlab --help` answers without importing torch.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import sys
from typing import NoReturn

from archlab.storage import StorageError, fault_line

# sub-command name -> (module exposing `register(subparsers)`, one-line help for `archlab --help`)
COMMANDS = {
    "inspect": (
        "archlab.commands.inspect",
        "parameter count, FLOPs per token and KV-cache bytes of a config",
    ),
    "data": ("archlab.commands.data", "prepare training data (token memmaps)"),
    "train": (
        "archlab.commands.train",
        "train a model (single process, or under torchrun with --distributed)",
    ),
    "generate": (
        "archlab.commands.generate",
        "generate text from a checkpoint (streams to the terminal)",
    ),
    "plot": ("archlab.commands.plot", "plot training curves to PNG"),
    "convert": ("archlab.commands.convert", "Hugging Face folder <-> archlab checkpoint"),
    "ablate": ("archlab.commands.ablate", "run an ablation suite and compute its verdicts"),
    "eval": ("archlab.commands.eval", "loss vs context length per RoPE method; passkey retrieval"),
}
EXIT_INTERRUPTED = 128 + signal.SIGINT  # what a shell reports for a process ended by Ctrl-C
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE
EXIT_STORAGE = 1  # the input was fine; the machine refused a write (the message says what to free)


class UsageError(Exception):
    """A command line argparse cannot read (an unknown flag, a value of the wrong type,
    a missing one)."""


class Parser(argparse.ArgumentParser):
    """argparse's parser, its errors one line like every other refusal (`archlab CMD: error: ...`,
    exit 2) instead of the usage block; each command's parser inherits it through add_subparsers."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see {self.prog} --help)")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser with the command `only` registered by its module, or every command listed by name
    only (so `archlab --help` and a mistyped command never import torch)."""
    parser = Parser(prog="archlab", description="Build, train and compare transformer LMs.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, summary) in COMMANDS.items():
        if only is None:
            sub.add_parser(name, help=summary, add_help=False)
        elif name == only:
            importlib.import_module(module).register(sub)
    return parser


def _quiet_stdout() -> None:
    """After a closed pipe: point stdout at /dev/null so the interpreter's final flush
    does not complain."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    argv = sys.argv[1:] if argv is None else argv
    command = argv[0] if argv and argv[0] in COMMANDS else None
    parser = build_parser(command)
    try:
        args, extra = parser.parse_known_args(argv)
        if getattr(args, "func", None) and extra and not getattr(args, "accepts_overrides", False):
            raise UsageError(
                f"unrecognized arguments: {' '.join(extra)} (see archlab {command} --help)"
            )
    except UsageError as err:
        print(f"archlab{f' {command}' if command else ''}: error: {err}", file=sys.stderr)
        return 2
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    args.overrides = extra
    try:
        return int(args.func(args) or 0)
    except StorageError as err:  # a full disk, a read-only folder: one line naming the path
        print(f"archlab {args.command}: error: {err}", file=sys.stderr)
        return EXIT_STORAGE
    except (ValueError, FileNotFoundError) as err:  # user errors: one line, no traceback
        print(f"archlab {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # a Ctrl-C nothing else handled (or the second one while a run stops)
        print(f"archlab {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        _quiet_stdout()
        return EXIT_BROKEN_PIPE
    except Exception as err:  # a full disk where no writer said so itself: still one line
        line = fault_line(err)
        if line is None:
            raise
        print(f"archlab {args.command}: error: {line}", file=sys.stderr)
        return EXIT_STORAGE


if __name__ == "__main__":
    sys.exit(main())

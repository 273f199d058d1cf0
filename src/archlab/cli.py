"""The `archlab` command line: one sub-command per module in `archlab.commands`.

Each command module owns its flags and calls one library function; this file only dispatches.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

# sub-command name -> module exposing `register(subparsers)`; the module sets `func` on its parser.
COMMANDS = {
    "inspect": "archlab.commands.inspect",
    "data": "archlab.commands.data",
    "train": "archlab.commands.train",
    "generate": "archlab.commands.generate",
    "plot": "archlab.commands.plot",
    "convert": "archlab.commands.convert",
    "ablate": "archlab.commands.ablate",
    "eval": "archlab.commands.eval",
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The parser with every sub-command, or with `only` that one (so `archlab inspect` never imports the
    trainer's dependencies)."""
    parser = argparse.ArgumentParser(prog="archlab", description="Build, train and compare transformer LMs.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, module in COMMANDS.items():
        if only is not None and name != only:
            continue
        importlib.import_module(module).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv[0] if argv and argv[0] in COMMANDS else None)
    args, extra = parser.parse_known_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    if extra and not getattr(args, "accepts_overrides", False):
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.overrides = extra
    try:
        return int(args.func(args) or 0)
    except (ValueError, FileNotFoundError) as err:  # user errors: one line, no traceback
        print(f"archlab {args.command}: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

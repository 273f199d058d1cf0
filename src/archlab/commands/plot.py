"""`archlab plot run RUN_DIR`: the curves of a run as one PNG (archlab.plots)."""

from __future__ import annotations

import argparse

from archlab.plots import plot_run


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("plot", help="plot training curves to PNG")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    run = actions.add_parser("run", help="loss (train + val), lr and grad-norm curves of a run")
    run.add_argument("run_dir", help="a run folder (holds metrics.jsonl)")
    run.add_argument("--out", default=None, help="PNG path (default RUN_DIR/curves.png)")
    run.set_defaults(func=run_plot)


def run_plot(args: argparse.Namespace) -> int:
    print(plot_run(args.run_dir, args.out))
    return 0

"""`archlab plot run RUN_DIR`: the curves of a run as one PNG; `archlab plot rope`: RoPE wavelengths
per pair and the relative position each method feeds attention (archlab.plots)."""

from __future__ import annotations

import argparse

from archlab.nn.positions.scaling import inference_kinds


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("plot", help="plot training curves to PNG")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    run = actions.add_parser("run", help="loss (train + val), lr and grad-norm curves of a run")
    run.add_argument("run_dir", help="a run folder (holds metrics.jsonl)")
    run.add_argument("--out", default=None, help="PNG path (default RUN_DIR/curves.png)")
    run.set_defaults(func=run_plot)
    rope = actions.add_parser(
        "rope", help="RoPE wavelength per pair and relative positions per scaling method"
    )
    rope.add_argument("--head-dim", type=int, default=64, help="rotary dims per head")
    rope.add_argument("--theta", type=float, default=10000.0, help="RoPE base")
    rope.add_argument(
        "--scalings",
        default=None,
        help="comma-separated RoPE scaling kinds, of "
        f"{', '.join(inference_kinds())} (default: all of them)",
    )
    rope.add_argument("--factor", type=float, default=4.0, help="context extension factor")
    rope.add_argument("--train-len", type=int, default=2048, help="training length L0")
    rope.add_argument(
        "--window", type=int, default=None, help="ReRoPE window (default train-len / 2)"
    )
    rope.add_argument("--out", default="rope.png", help="PNG path")
    rope.set_defaults(func=run_plot_rope)


def run_plot(args: argparse.Namespace) -> int:
    from archlab.plots import (
        plot_run,  # torch and matplotlib: imported when a plot is drawn, not for --help
    )

    print(plot_run(args.run_dir, args.out))
    return 0


def run_plot_rope(args: argparse.Namespace) -> int:
    from archlab.plots import plot_rope

    if args.head_dim < 4 or args.head_dim % 2 or args.train_len < 4 or not args.factor >= 1:
        raise ValueError(
            f"--head-dim {args.head_dim} (even, >= 4), --train-len {args.train_len} (>= 4) and "
            f"--factor {args.factor} (>= 1) are not all allowed"
        )
    window = args.window or args.train_len // 2
    scalings = (
        [s.strip() for s in args.scalings.split(",") if s.strip()]
        if args.scalings
        else inference_kinds()
    )
    print(
        plot_rope(
            args.head_dim, args.theta, scalings, args.factor, args.train_len, window, args.out
        )
    )
    return 0

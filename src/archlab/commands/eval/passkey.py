"""`archlab eval passkey`: passkey retrieval accuracy per length and depth (archlab.eval.passkey),
as a table and a heat-map PNG."""

from __future__ import annotations

import argparse

from archlab.commands.eval.inputs import (
    FORCE_HELP,
    OUT_HELP,
    WINDOW_HELP,
    check_positive,
    int_list,
    load_for_eval,
)
from archlab.eval.source import eval_source, output_folder
from archlab.nn.positions.scaling import inference_kinds


def add_parser(actions: argparse._SubParsersAction) -> None:
    passkey = actions.add_parser(
        "passkey", help="passkey retrieval accuracy per length and needle depth"
    )
    passkey.add_argument(
        "--checkpoint", required=True, help="a checkpoint or run folder, or a Hugging Face folder"
    )
    passkey.add_argument(
        "--lengths",
        default=None,
        help="comma-separated prompt lengths in characters (default: "
        "those of 256,512,1024,2048 the scaling covers for the model, said in one line)",
    )
    passkey.add_argument(
        "--depths", default="0,0.25,0.5,0.75,1", help="comma-separated needle depths in [0, 1]"
    )
    passkey.add_argument("--trials", type=int, default=10, help="prompts per cell")
    passkey.add_argument(
        "--scaling", default="none", help=f"RoPE method, one of {', '.join(inference_kinds())}"
    )
    passkey.add_argument("--window", type=int, default=None, help=WINDOW_HELP)
    passkey.add_argument(
        "--allow-extrapolation", action="store_true", help="allow lengths past the context"
    )
    passkey.add_argument(
        "--out", default=None, help="folder for passkey.md and passkey.png " + OUT_HELP
    )
    passkey.add_argument("--force", action="store_true", help=FORCE_HELP)
    passkey.add_argument("--no-progress", action="store_true", help="no progress bar")
    passkey.set_defaults(func=run_passkey)


def _depths(text: str) -> list[float]:
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or not all(0 <= v <= 1 for v in values):
        raise ValueError(f"--depths {text!r} is not allowed: comma-separated fractions in [0, 1]")
    return values


def run_passkey(args: argparse.Namespace) -> int:
    from archlab.data.passkey import min_length
    from archlab.eval.passkey import default_passkey_lengths, evaluate_passkey, passkey_table
    from archlab.eval.rope_methods import method_configs
    from archlab.plots import plot_passkey

    lengths = int_list(args.lengths, "--lengths") if args.lengths is not None else None
    depths = _depths(args.depths)
    check_positive(args, "trials", "window")
    if args.scaling not in inference_kinds():
        raise ValueError(
            f"--scaling {args.scaling!r} is not allowed: one of {', '.join(inference_kinds())}"
        )
    if lengths is not None and min(lengths) < min_length():
        raise ValueError(
            f"--lengths {args.lengths} is not allowed: each at least {min_length()} characters "
            "(the needle and the question)"
        )
    source = eval_source(args.checkpoint, needs_data=False)
    given = lengths is not None
    lengths = lengths or default_passkey_lengths(
        source.config, args.scaling, args.window, args.allow_extrapolation
    )
    method_configs(source.config, [args.scaling], lengths, args.window, args.allow_extrapolation)
    out = output_folder(args.out, "passkey", source, ("passkey.md", "passkey.png"), args.force)
    model, tokenizer = load_for_eval(source)
    if not given:
        print(
            f"lengths: {', '.join(map(str, lengths))} (the default: those of 256-2048 that scaling "
            f"{args.scaling!r} covers for this model; --lengths to choose)"
        )
    results = evaluate_passkey(
        model,
        tokenizer,
        lengths,
        depths,
        args.trials,
        args.scaling,
        args.window,
        args.allow_extrapolation,
        progress=not args.no_progress,
    )
    out.mkdir(parents=True, exist_ok=True)
    table = passkey_table(results)
    (out / "passkey.md").write_text(table + "\n", encoding="utf-8")
    title = f"passkey, {args.scaling} (trained at {model.config.max_seq_len})"
    plot_passkey([(r.length, r.depth, r.accuracy) for r in results], out / "passkey.png", title)
    print(table)
    print(f"wrote {out / 'passkey.md'}, {out / 'passkey.png'}")
    return 0

"""`archlab eval length`: loss or next-token accuracy against context length per RoPE extension
method, on plain or repeated samples (archlab.eval.length), as a markdown table (printed and saved),
a CSV and a PNG. Every flag, the model's config, the data and the output folder are checked before
the model is loaded."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from archlab.commands.eval.inputs import (
    DATA_HELP,
    FORCE_HELP,
    OUT_HELP,
    WINDOW_HELP,
    check_positive,
    int_list,
    load_for_eval,
)
from archlab.eval.source import EvalSource, eval_source, output_folder
from archlab.eval.variants import METRICS, SAMPLES
from archlab.nn.positions.scaling import inference_kinds

if TYPE_CHECKING:
    from pathlib import Path

    import numpy as np

    from archlab.eval.length import LengthResult
    from archlab.nn.config import ModelConfig
    from archlab.nn.model import TransformerLM


def add_parser(actions: argparse._SubParsersAction) -> None:
    length = actions.add_parser(
        "length", help="loss or accuracy vs context length per RoPE scaling method"
    )
    length.add_argument(
        "--checkpoint", required=True, help="a checkpoint or run folder, or a Hugging Face folder"
    )
    length.add_argument(
        "--lengths",
        default=None,
        help="comma-separated context lengths (default: those of "
        "256,512,1024,2048,4096 that every scaling covers for the model, said in one line)",
    )
    length.add_argument(
        "--scalings",
        default=None,
        help=f"comma-separated, of {', '.join(inference_kinds())}; "
        "default: every one the model takes (none alone without RoPE; no dynamic or ReRoPE with "
        "a linear attn_kernel)",
    )
    length.add_argument("--data", default=None, help=DATA_HELP)
    _add_scoring_flags(length)
    length.add_argument(
        "--out", default=None, help="folder for length.md, length.csv, length.png " + OUT_HELP
    )
    length.add_argument("--force", action="store_true", help=FORCE_HELP)
    length.add_argument("--no-progress", action="store_true", help="no progress bar")
    length.set_defaults(func=run_length)


def _add_scoring_flags(length: argparse.ArgumentParser) -> None:
    """What is scored and how: the tokens per window, the metric, the samples, the windows, and
    the methods' settings."""
    length.add_argument(
        "--score-last",
        default=None,
        help="tokens scored per window, or 'all' (every prediction, "
        "as Su's tables; default: half the shortest length)",
    )
    length.add_argument(
        "--metric",
        default="loss",
        help=f"what the table shows, one of {', '.join(METRICS)} "
        "(next-token accuracy: argmax == target); the CSV holds both",
    )
    length.add_argument(
        "--samples",
        default="plain",
        help=f"comma-separated, of {', '.join(SAMPLES)}: held-out "
        "windows, or a text of L/2 tokens concatenated with itself up to L (Su's repeated samples)",
    )
    length.add_argument("--windows", type=int, default=4, help="windows per length")
    length.add_argument("--window", type=int, default=None, help=WINDOW_HELP)
    length.add_argument(
        "--leaky-k",
        default="half",
        help="leaky_rerope's k: half (Su's rule: the largest position "
        "at most max_seq_len / 2, k >= 16), train (the longest distance on the longest trained) "
        "or a number",
    )
    length.add_argument(
        "--logn",
        action="store_true",
        help="the log-n query scale max(1, log n / log max_seq_len) "
        "at inference only, for a model trained without it",
    )
    length.add_argument(
        "--allow-extrapolation",
        action="store_true",
        help="allow lengths past what a method covers (e.g. 'none' past max_seq_len)",
    )


def _score_last(text: str | None, lengths: list[int] | None) -> int | None:
    """--score-last: a count, 'all' (None: every prediction) or, absent, half the shortest length;
    checked against the shortest length once `lengths` are known."""
    if text is not None and text.strip() == "all":
        return None
    try:
        value = None if text is None else int(text)
    except ValueError:
        value = 0
    if value is not None and value < 1:
        raise ValueError(f"--score-last {text!r} is not allowed: a positive integer or 'all'")
    if lengths is None:
        return value
    if value is None:
        return max(1, min(lengths) // 2)
    if value > min(lengths):
        raise ValueError(
            f"--score-last {value} is not allowed: at most the shortest length "
            f"{min(lengths)} (or 'all')"
        )
    return value


def _leaky_k(text: str) -> float | str:
    if text in ("half", "train"):
        return text
    try:
        return float(text)
    except ValueError:
        raise ValueError(
            f"--leaky-k={text!r} is not allowed: half, train or a number >= 1"
        ) from None


def _read_flags(
    args: argparse.Namespace,
) -> tuple[list[int] | None, list[str] | None, list[str], float | str]:
    """--lengths, --scalings, --samples, --metric, the window counts, --leaky-k and --score-last,
    checked before anything is read: (lengths, methods, samples, leaky_k), None where not given."""
    from archlab.eval.length import check_choices

    lengths = int_list(args.lengths, "--lengths") if args.lengths is not None else None
    methods = [m.strip() for m in args.scalings.split(",") if m.strip()] if args.scalings else None
    for method in methods or []:
        if method not in inference_kinds():
            raise ValueError(
                f"--scalings {method!r} is not allowed: one "
                f"of {', '.join(inference_kinds())} (comma-separated)"
            )
    samples = [k.strip() for k in args.samples.split(",") if k.strip()]
    check_choices(samples, args.metric)
    check_positive(args, "windows", "window")
    leaky_k = _leaky_k(args.leaky_k)
    _score_last(args.score_last, lengths)
    return lengths, methods, samples, leaky_k


def run_length(args: argparse.Namespace) -> int:
    """Every flag, the model's config, the data and the output folder are checked before the
    model is loaded."""
    from archlab.eval.held_out import held_out_tokens
    from archlab.eval.length import evaluate_lengths
    from archlab.eval.rope_methods import applicable_methods, default_lengths, method_configs

    lengths, methods, samples, leaky_k = _read_flags(args)
    source = eval_source(args.checkpoint, args.data)
    config, notes = source.config, []
    default_methods = methods is None
    if default_methods:
        methods = applicable_methods(config)
    scaling = (args.window, args.allow_extrapolation, leaky_k, args.logn)
    given = lengths is not None
    lengths = lengths or default_lengths(config, methods, *scaling)
    # every (method, length) refused here, or none
    method_configs(config, methods, lengths, *scaling)
    score_last = _score_last(args.score_last, lengths)
    out = output_folder(
        args.out, "length", source, ("length.md", "length.csv", "length.png"), args.force
    )
    model, tokenizer = load_for_eval(source)
    tokens = held_out_tokens(source.data, tokenizer, need=(args.windows + 1) * (max(lengths) + 1))
    if not given:
        lengths, score_last = _fit_default_lengths(lengths, score_last, tokens, source.data, notes)
    if default_methods:
        methods = _distinct_methods(config, methods, lengths, scaling, notes)
    for note in notes:
        print(note)
    configs = method_configs(config, methods, lengths, *scaling)
    print(_cost_line(model, configs, args.windows, samples, lengths, score_last), flush=True)
    results = evaluate_lengths(
        model,
        tokens,
        lengths,
        methods,
        score_last,
        args.windows,
        args.window,
        args.allow_extrapolation,
        progress=not args.no_progress,
        leaky_k=leaky_k,
        logn=args.logn,
        samples=samples,
    )
    _write_results(args, source, out, tokens, lengths, score_last, samples, results)
    return 0


def _distinct_methods(
    config: ModelConfig,
    methods: list[str],
    lengths: list[int],
    scaling: tuple,
    notes: list[str],
) -> list[str]:
    """The default scalings: those the model takes, less those whose positions equal an earlier
    one's at every length asked (eval/same_positions.py compares the attention scores the position
    encodings give, not names); one note, first, says which were left out and why."""
    from archlab.eval.rope_methods import method_configs
    from archlab.eval.same_positions import duplicate_methods

    twins = duplicate_methods(method_configs(config, methods, lengths, *scaling), methods, lengths)
    kept = [m for m in methods if m not in twins]
    reasons = []
    if skipped := [m for m in inference_kinds() if m not in methods]:
        reasons.append(f"{', '.join(skipped)} do not apply to this model")
    for twin in dict.fromkeys(twins.values()):
        same = [m for m, t in twins.items() if t == twin]
        reasons.append(
            f"{', '.join(same)} give the same positions as {twin} at every length asked "
            f"(compared by their attention scores), so they are left out: --scalings to run them"
        )
    if reasons:
        notes.insert(0, f"scalings: {', '.join(kept)} ({'; '.join(reasons)})")
    return kept


def _cost_line(
    model: TransformerLM,
    configs: dict,
    n_windows: int,
    samples: list[str],
    lengths: list[int],
    score_last: int | None,
) -> str:
    """What the run will cost, before it starts: forwards, tokens, FLOPs and the time they take,
    from a window of the shortest and of the longest length timed here (eval/length_cost.py)."""
    from archlab.eval.length_cost import estimate_seconds, length_cost, time_forward

    cost = length_cost(configs, len(samples), n_windows)
    ends = sorted({min(lengths), max(lengths)})
    timings = {
        n: time_forward(model, n, score_last or n, repeats=2 if n == ends[0] else 1) for n in ends
    }
    total = estimate_seconds(cost, model.config, timings)
    methods = len({m for m, _ in configs})
    kinds = f" x {len(samples)} samples" if len(samples) > 1 else ""
    timed = " and ".join(f"a {n}-token window took {t:.2g} s" for n, t in timings.items())
    return (
        f"cost: {methods} scalings x {len(lengths)} lengths{kinds} x {n_windows} "
        f"window{'s' * (n_windows != 1)} = {cost.forwards:,} forwards, {cost.tokens:,} tokens, "
        f"{cost.flops:.2g} FLOPs; about {_duration(total)} here ({timed})"
    )


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _fit_default_lengths(
    lengths: list[int],
    score_last: int | None,
    tokens: np.ndarray,
    data: str | None,
    notes: list[str],
) -> tuple[list[int], int | None]:
    """The default lengths (and score_last) clipped to the held-out text when it is shorter, with a
    note on which lengths are evaluated: a derived default fits the text; a user's is refused."""
    if len(tokens) < max(lengths) + 1:
        fitting = [n for n in lengths if n < len(tokens)] or [len(tokens) - 1]
        notes.append(
            f"lengths: {', '.join(map(str, fitting))} (the default {', '.join(map(str, lengths))} "
            f"clipped to the {len(tokens)} held-out tokens of {data})"
        )
        lengths = fitting
        score_last = None if score_last is None else min(score_last, min(lengths))
    else:
        notes.append(
            f"lengths: {', '.join(map(str, lengths))} (the default: those of 256-4096 that every "
            "scaling covers for this model; --lengths to choose)"
        )
    return lengths, score_last


def _write_results(
    args: argparse.Namespace,
    source: EvalSource,
    out: Path,
    tokens: np.ndarray,
    lengths: list[int],
    score_last: int | None,
    samples: list[str],
    results: list[LengthResult],
) -> None:
    """length.md (printed too), length.csv and length.png in `out`."""
    from archlab.eval.length import CONFIDENCE, markdown_table, write_csv
    from archlab.eval.samples import describe_targets
    from archlab.plots import plot_length

    config = source.config
    out.mkdir(parents=True, exist_ok=True)
    scored = describe_targets(tokens, lengths, args.windows, score_last, samples) + (
        f" In brackets: the {CONFIDENCE:.0%} t interval over the {args.windows} windows (each "
        "window's mean is one observation)."
        if args.windows > 1
        else " One window: no interval (--windows 2 or more for one)."
    )
    table = markdown_table(results, args.metric)
    model_name = source.checkpoint or source.path
    markdown = (
        f"{model_name} (trained at {config.max_seq_len}) on {source.data}\n\n{table}\n\n{scored}\n"
    )
    (out / "length.md").write_text(markdown, encoding="utf-8")
    write_csv(results, out / "length.csv")
    title = f"{model_name} (trained at {config.max_seq_len}; " + (
        "every token scored)"
        if score_last is None
        else f"the same last {score_last} tokens scored at each length)"
    )
    label = (lambda r: f"{r.method} ({r.samples})") if len(samples) > 1 else (lambda r: r.method)
    value = (lambda r: r.loss) if args.metric == "loss" else (lambda r: r.accuracy)
    plot_length(
        [(label(r), r.length, value(r)) for r in results], out / "length.png", title, args.metric
    )
    print(markdown, end="")
    print(f"wrote {out / 'length.md'}, {out / 'length.csv'}, {out / 'length.png'}")

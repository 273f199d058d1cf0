"""`archlab eval length`: loss or next-token accuracy against context length per RoPE extension
method, on plain or repeated samples (archlab.eval.length), as a markdown table (printed and saved),
a CSV and a PNG; `archlab eval passkey`: passkey retrieval accuracy per length and depth
(archlab.eval.passkey), as a table and a heat-map PNG; `archlab eval continuation`: mid-token
continuation accuracy on held-out text cut at random bytes, with and without token healing
(archlab.eval.continuation), as a table and a CSV of every cut."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from archlab.eval.source import EvalSource, eval_source, output_folder
from archlab.eval.variants import METRICS, SAMPLES
from archlab.nn.positions.scaling import inference_kinds

if TYPE_CHECKING:
    from archlab.data.tokenizer import Tokenizer
    from archlab.nn.model import TransformerLM

# the evaluations, checkpoints and plots import torch: they are imported in the functions that run,
# so `--help` (the method, metric and sample names of eval/variants.py) answers without it;
# eval/source.py reads configs only
DATA_HELP = (
    "held-out data, as train --data takes it: a text file (scored as it is), stdlib, a folder, "
    "JSONL, "
    "passkey or hf:NAME (their validation documents), or a prepared data folder (its val split); "
    "default: "
    "the run's prepared data"
)
WINDOW_HELP = (
    "ReRoPE window W (default: the model's own, as an hwfa2 model has one, else max_seq_len / 2; "
    "leaky_rerope max_seq_len / 4)"
)
OUT_HELP = (
    "(default: a new folder eval-ACTION/MODEL-TIME; an --out that holds results needs --force)"
)
FORCE_HELP = "replace the results an earlier evaluation left in --out"


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "eval", help="evaluate a checkpoint (length extrapolation, passkey, mid-token continuation)"
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
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
    length.add_argument(
        "--out", default=None, help="folder for length.md, length.csv, length.png " + OUT_HELP
    )
    length.add_argument("--force", action="store_true", help=FORCE_HELP)
    length.add_argument("--no-progress", action="store_true", help="no progress bar")
    length.set_defaults(func=run_length)
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
    cont = actions.add_parser(
        "continuation", help="continuation accuracy after random byte cuts, with token healing"
    )
    cont.add_argument(
        "--checkpoint", required=True, help="a checkpoint or run folder, or a Hugging Face folder"
    )
    cont.add_argument("--data", default=None, help=DATA_HELP)
    cont.add_argument(
        "--cuts",
        type=int,
        default=200,
        help="random byte offsets the text is cut at (one seed: the "
        "same cuts for every checkpoint of one text)",
    )
    cont.add_argument(
        "--context", type=int, default=64, help="bytes of text before each cut: the prompt"
    )
    cont.add_argument(
        "--k",
        type=int,
        default=8,
        help="a cut is a hit when the first k generated bytes are the text's",
    )
    cont.add_argument(
        "--healing",
        default="0,1",
        help="comma-separated token-healing back-offs to score (0 = none)",
    )
    cont.add_argument(
        "--text-tokens",
        type=int,
        default=20_000,
        help="held-out tokens decoded into the text (any "
        "--data but a text file, which is cut as it is; the lab's vocab suite uses 20000)",
    )
    cont.add_argument(
        "--out", default=None, help="folder for continuation.md and continuation.csv " + OUT_HELP
    )
    cont.add_argument("--force", action="store_true", help=FORCE_HELP)
    cont.set_defaults(func=run_continuation)


def _int_list(text: str, flag: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(
            f"{flag} {text!r} is not allowed: comma-separated positive integers"
        ) from None
    if not values or min(values) < 1:
        raise ValueError(f"{flag} {text!r} is not allowed: comma-separated positive integers")
    return values


def _positive(args: argparse.Namespace, *names: str) -> None:
    for name in names:
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')}={value} is not allowed: an integer >= 1")


def load_for_eval(source: EvalSource) -> tuple[TransformerLM, Tokenizer]:
    """Model and tokenizer of an archlab checkpoint, or of a Hugging Face folder (its model built on
    the meta device, no random init, and its tokenizer)."""
    from archlab.checkpoint import load_model
    from archlab.interop import from_hf, load_hf_tokenizer

    if source.hf:
        return from_hf(source.path), load_hf_tokenizer(source.path)
    return load_model(source.checkpoint)


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
            f"--score-last {value} is not allowed: at most the shortest length {min(lengths)} (or "
            "'all')"
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


def run_length(args: argparse.Namespace) -> int:
    """Every flag, the model's config, the data and the output folder are checked before the model
    is loaded."""
    from archlab.eval.held_out import held_out_tokens
    from archlab.eval.length import check_choices, evaluate_lengths, markdown_table, write_csv
    from archlab.eval.rope_methods import applicable_methods, default_lengths, method_configs
    from archlab.eval.samples import describe_targets
    from archlab.plots import plot_length

    lengths = _int_list(args.lengths, "--lengths") if args.lengths is not None else None
    methods = [m.strip() for m in args.scalings.split(",") if m.strip()] if args.scalings else None
    for method in methods or []:
        if method not in inference_kinds():
            raise ValueError(
                f"--scalings {method!r} is not allowed: one of {', '.join(inference_kinds())} "
                "(comma-separated)"
            )
    samples = [k.strip() for k in args.samples.split(",") if k.strip()]
    check_choices(samples, args.metric)
    _positive(args, "windows", "window")
    leaky_k = _leaky_k(args.leaky_k)
    _score_last(args.score_last, lengths)
    source = eval_source(args.checkpoint, args.data)
    config, notes = source.config, []
    if methods is None:
        methods = applicable_methods(config)
        if skipped := [m for m in inference_kinds() if m not in methods]:
            notes.append(
                f"scalings: {', '.join(methods)} ({', '.join(skipped)} do not apply to this model)"
            )
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
    # a derived default fits the text; a user's is refused below
    if not given and len(tokens) < max(lengths) + 1:
        fitting = [n for n in lengths if n < len(tokens)] or [len(tokens) - 1]
        notes.append(
            f"lengths: {', '.join(map(str, fitting))} (the default {', '.join(map(str, lengths))} "
            "clipped "
            f"to the {len(tokens)} held-out tokens of {source.data})"
        )
        lengths = fitting
        score_last = None if score_last is None else min(score_last, min(lengths))
    elif not given:
        notes.append(
            f"lengths: {', '.join(map(str, lengths))} (the default: those of 256-4096 that every "
            "scaling "
            "covers for this model; --lengths to choose)"
        )
    for note in notes:
        print(note)
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
    out.mkdir(parents=True, exist_ok=True)
    scored = describe_targets(tokens, lengths, args.windows, score_last, samples)
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
    return 0


def _healings(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 0:
        raise ValueError(
            f"--healing {text!r} is not allowed: comma-separated integers >= 0 (tokens backed off; "
            "0 = no healing)"
        )
    return list(dict.fromkeys(values))


def run_continuation(args: argparse.Namespace) -> int:
    from archlab.eval.continuation import continuation_markdown, continuation_table
    from archlab.eval.held_out import held_out_text

    healings = _healings(args.healing)
    _positive(args, "cuts", "context", "k", "text_tokens")
    source = eval_source(args.checkpoint, args.data)
    out = output_folder(
        args.out, "continuation", source, ("continuation.md", "continuation.csv"), args.force
    )
    model, tokenizer = load_for_eval(source)
    text = held_out_text(source.data, tokenizer, args.text_tokens)
    table = continuation_table(
        model.eval(), tokenizer, text, healings, cuts=args.cuts, context=args.context, k=args.k
    )
    out.mkdir(parents=True, exist_ok=True)
    markdown = continuation_markdown(table, args.k)
    (out / "continuation.md").write_text(markdown + "\n", encoding="utf-8")
    with (out / "continuation.csv").open("w", encoding="utf-8") as f:
        f.write("healing,offset,hit\n")
        f.writelines(
            f"{n},{o},{int(h)}\n" for n, r in table.items() for o, h in zip(r.offsets, r.hits)
        )
    print(markdown)
    print(f"wrote {out / 'continuation.md'}, {out / 'continuation.csv'}")
    return 0


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

    lengths = _int_list(args.lengths, "--lengths") if args.lengths is not None else None
    depths = _depths(args.depths)
    _positive(args, "trials", "window")
    if args.scaling not in inference_kinds():
        raise ValueError(
            f"--scaling {args.scaling!r} is not allowed: one of {', '.join(inference_kinds())}"
        )
    if lengths is not None and min(lengths) < min_length():
        raise ValueError(
            f"--lengths {args.lengths} is not allowed: each at least {min_length()} characters "
            "(the "
            "needle and the question)"
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

"""`archlab eval length`: loss or next-token accuracy against context length per RoPE extension method, on
plain or repeated samples (archlab.eval.length), as a markdown table (printed and saved), a CSV and a PNG;
`archlab eval passkey`: passkey retrieval accuracy per length and depth (archlab.eval.passkey), as a table and a
heat-map PNG."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from archlab.eval.variants import METHODS, METRICS, SAMPLES

if TYPE_CHECKING:
    import numpy as np

    from archlab.data.tokenizer import Tokenizer
    from archlab.nn.model import TransformerLM

# the evaluations, checkpoints and plots import torch: they are imported in the functions that run, so `--help`
# (the method, metric and sample names of eval/variants.py) answers without it


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("eval", help="evaluate a checkpoint (length extrapolation)")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    length = actions.add_parser("length", help="loss or accuracy vs context length per RoPE scaling method")
    length.add_argument("--checkpoint", required=True, help="a checkpoint or run folder, or a Hugging Face folder")
    length.add_argument("--lengths", default="256,512,1024,2048,4096", help="comma-separated context lengths")
    length.add_argument("--scalings", default=",".join(METHODS), help=f"comma-separated, of {', '.join(METHODS)}")
    length.add_argument("--data", default=None, help="held-out text file, or a prepared data folder (its val "
                        "split); default: the run's prepared data")
    length.add_argument("--score-last", default=None, help="tokens scored per window, or 'all' (every prediction, "
                        "as Su's tables; default: half the shortest length)")
    length.add_argument("--metric", default="loss", help=f"what the table shows, one of {', '.join(METRICS)} "
                        "(next-token accuracy: argmax == target); the CSV holds both")
    length.add_argument("--samples", default="plain", help=f"comma-separated, of {', '.join(SAMPLES)}: held-out "
                        "windows, or a text of L/2 tokens concatenated with itself up to L (Su's repeated samples)")
    length.add_argument("--windows", type=int, default=4, help="windows per length")
    length.add_argument("--window", type=int, default=None, help="ReRoPE window W (default max_seq_len / 2; "
                        "leaky_rerope max_seq_len / 4)")
    length.add_argument("--leaky-k", default="half", help="leaky_rerope's k: half (Su's rule: the largest position "
                        "at most max_seq_len / 2, k >= 16), train (the longest distance on the longest trained) "
                        "or a number")
    length.add_argument("--logn", action="store_true", help="the log-n query scale max(1, log n / log max_seq_len) "
                        "at inference only, for a model trained without it")
    length.add_argument("--allow-extrapolation", action="store_true",
                        help="allow lengths past what a method covers (e.g. 'none' past max_seq_len)")
    length.add_argument("--out", default="eval-length", help="folder for length.md, length.csv, length.png")
    length.add_argument("--no-progress", action="store_true", help="no progress bar")
    length.set_defaults(func=run_length)
    passkey = actions.add_parser("passkey", help="passkey retrieval accuracy per length and needle depth")
    passkey.add_argument("--checkpoint", required=True, help="a checkpoint or run folder, or a Hugging Face folder")
    passkey.add_argument("--lengths", default="256,512,1024,2048", help="comma-separated prompt lengths (chars)")
    passkey.add_argument("--depths", default="0,0.25,0.5,0.75,1", help="comma-separated needle depths in [0, 1]")
    passkey.add_argument("--trials", type=int, default=10, help="prompts per cell")
    passkey.add_argument("--scaling", default="none", help=f"RoPE method, one of {', '.join(METHODS)}")
    passkey.add_argument("--window", type=int, default=None, help="ReRoPE window W (default max_seq_len / 2; "
                         "leaky_rerope max_seq_len / 4)")
    passkey.add_argument("--allow-extrapolation", action="store_true", help="allow lengths past the context")
    passkey.add_argument("--out", default="eval-passkey", help="folder for passkey.md and passkey.png")
    passkey.add_argument("--no-progress", action="store_true", help="no progress bar")
    passkey.set_defaults(func=run_passkey)


def _int_list(text: str, flag: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(f"{flag} {text!r} is not allowed: comma-separated positive integers") from None
    if not values or min(values) < 1:
        raise ValueError(f"{flag} {text!r} is not allowed: comma-separated positive integers")
    return values


def load_for_eval(path: str) -> tuple[TransformerLM, Tokenizer, Path | None]:
    """Model, tokenizer and checkpoint folder of an archlab checkpoint or run; a Hugging Face folder gives
    its model (built on the meta device, no random init) and tokenizer, and no checkpoint."""
    from archlab.checkpoint import load_model, resolve_checkpoint
    from archlab.interop import from_hf, is_hf_folder, load_hf_tokenizer

    folder = Path(path)
    if is_hf_folder(folder):
        if not (folder / "tokenizer.json").is_file():
            raise FileNotFoundError(f"--checkpoint {path}: this Hugging Face folder has no tokenizer.json")
        return from_hf(folder), load_hf_tokenizer(folder), None
    checkpoint = resolve_checkpoint(folder)
    model, tokenizer = load_model(checkpoint)
    return model, tokenizer, checkpoint


def held_out_tokens(checkpoint: Path | None, data: str | None, tokenizer) -> np.ndarray:  # noqa: ANN001
    """Tokens to score: a text file encoded with the model's tokenizer, or a prepared folder's val split."""
    import numpy as np

    from archlab.data.tokens import TokenData

    if data is not None and Path(data).is_file():
        return np.asarray(tokenizer.encode(Path(data).read_text(encoding="utf-8", errors="replace")), dtype=np.int64)
    if data is None and checkpoint is None:
        raise ValueError("--data is needed with a Hugging Face folder, which has no prepared data of its own: give "
                         "a held-out text file or a prepared data folder")
    if data is None:
        run_dir = checkpoint.parents[1]
        config = json.loads((checkpoint / "config.json").read_text(encoding="utf-8"))
        folder = config.get("train", {}).get("data", {}).get("dir") or run_dir / "data"
    else:
        folder = data
    if not (Path(folder) / "meta.json").is_file():
        raise FileNotFoundError(f"--data: {folder} is neither a text file nor a prepared data folder (meta.json)")
    return np.asarray(TokenData(folder).splits["val"], dtype=np.int64)


def _score_last(text: str | None, lengths: list[int]) -> int | None:
    """--score-last: a count, 'all' (None: every prediction) or, absent, half the shortest length."""
    if text is None:
        return max(1, min(lengths) // 2)
    if text.strip() == "all":
        return None
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"--score-last {text!r} is not allowed: a positive integer or 'all'") from None


def _leaky_k(text: str) -> float | str:
    if text in ("half", "train"):
        return text
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"--leaky-k={text!r} is not allowed: half, train or a number >= 1") from None


def run_length(args: argparse.Namespace) -> int:
    from archlab.eval.length import check_choices, evaluate_lengths, markdown_table, write_csv
    from archlab.plots import plot_length

    lengths = _int_list(args.lengths, "--lengths")
    methods = [m.strip() for m in args.scalings.split(",") if m.strip()]
    samples = [k.strip() for k in args.samples.split(",") if k.strip()]
    check_choices(samples, args.metric)
    score_last = _score_last(args.score_last, lengths)
    model, tokenizer, checkpoint = load_for_eval(args.checkpoint)
    tokens = held_out_tokens(checkpoint, args.data, tokenizer)
    results = evaluate_lengths(model, tokens, lengths, methods, score_last, args.windows, args.window,
                               args.allow_extrapolation, progress=not args.no_progress,
                               leaky_k=_leaky_k(args.leaky_k), logn=args.logn, samples=samples)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    table = markdown_table(results, args.metric)
    (out / "length.md").write_text(table + "\n", encoding="utf-8")
    write_csv(results, out / "length.csv")
    scored = "every token" if score_last is None else f"last {score_last} tokens"
    title = f"{checkpoint or args.checkpoint} (trained at {model.config.max_seq_len}; {scored} scored)"
    label = (lambda r: f"{r.method} ({r.samples})") if len(samples) > 1 else (lambda r: r.method)
    value = (lambda r: r.loss) if args.metric == "loss" else (lambda r: r.accuracy)
    plot_length([(label(r), r.length, value(r)) for r in results], out / "length.png", title, args.metric)
    print(table)
    print(f"wrote {out / 'length.md'}, {out / 'length.csv'}, {out / 'length.png'}")
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
    from archlab.eval.passkey import evaluate_passkey, passkey_table
    from archlab.plots import plot_passkey

    lengths, depths = _int_list(args.lengths, "--lengths"), _depths(args.depths)
    model, tokenizer, _ = load_for_eval(args.checkpoint)
    results = evaluate_passkey(model, tokenizer, lengths, depths, args.trials, args.scaling, args.window,
                               args.allow_extrapolation, progress=not args.no_progress)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    table = passkey_table(results)
    (out / "passkey.md").write_text(table + "\n", encoding="utf-8")
    title = f"passkey, {args.scaling} (trained at {model.config.max_seq_len})"
    plot_passkey([(r.length, r.depth, r.accuracy) for r in results], out / "passkey.png", title)
    print(table)
    print(f"wrote {out / 'passkey.md'}, {out / 'passkey.png'}")
    return 0

"""`archlab eval length`: loss or next-token accuracy against context length per RoPE extension method, on
plain or repeated samples (archlab.eval.length), as a markdown table (printed and saved), a CSV and a PNG;
`archlab eval passkey`: passkey retrieval accuracy per length and depth (archlab.eval.passkey), as a table and a
heat-map PNG; `archlab eval continuation`: mid-token continuation accuracy on held-out text cut at random bytes,
with and without token healing (archlab.eval.continuation), as a table and a CSV of every cut."""

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
    parser = subparsers.add_parser("eval", help="evaluate a checkpoint (length extrapolation, passkey, mid-token "
                                   "continuation)")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    length = actions.add_parser("length", help="loss or accuracy vs context length per RoPE scaling method")
    length.add_argument("--checkpoint", required=True, help="a checkpoint or run folder, or a Hugging Face folder")
    length.add_argument("--lengths", default="256,512,1024,2048,4096", help="comma-separated context lengths")
    length.add_argument("--scalings", default=None, help=f"comma-separated, of {', '.join(METHODS)}; default: every "
                        "one the model takes (none alone without RoPE; no dynamic or ReRoPE with a linear attn_kernel)")
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
    cont = actions.add_parser("continuation", help="continuation accuracy after random byte cuts, with token healing")
    cont.add_argument("--checkpoint", required=True, help="a checkpoint or run folder, or a Hugging Face folder")
    cont.add_argument("--data", default=None, help="held-out text file, or a prepared data folder (the start of its "
                      "val split, decoded); default: the run's prepared data")
    cont.add_argument("--cuts", type=int, default=200, help="random byte offsets the text is cut at (one seed: the "
                      "same cuts for every checkpoint of one text)")
    cont.add_argument("--context", type=int, default=64, help="bytes of text before each cut: the prompt")
    cont.add_argument("--k", type=int, default=8, help="a cut is a hit when the first k generated bytes are the text's")
    cont.add_argument("--healing", default="0,1", help="comma-separated token-healing back-offs to score (0 = none)")
    cont.add_argument("--text-tokens", type=int, default=20_000, help="val tokens decoded into the held-out text "
                      "(prepared data only; the lab's vocab suite uses 20000)")
    cont.add_argument("--out", default="eval-continuation", help="folder for continuation.md and continuation.csv")
    cont.set_defaults(func=run_continuation)


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
    from archlab.eval.length import applicable_methods, check_choices, evaluate_lengths, markdown_table, write_csv
    from archlab.plots import plot_length

    lengths = _int_list(args.lengths, "--lengths")
    methods = [m.strip() for m in args.scalings.split(",") if m.strip()] if args.scalings else None
    samples = [k.strip() for k in args.samples.split(",") if k.strip()]
    check_choices(samples, args.metric)
    score_last = _score_last(args.score_last, lengths)
    model, tokenizer, checkpoint = load_for_eval(args.checkpoint)
    if methods is None:
        methods = applicable_methods(model.config)
        if skipped := [m for m in METHODS if m not in methods]:
            print(f"scalings: {', '.join(methods)} ({', '.join(skipped)} do not apply to this model)")
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


def held_out_text(checkpoint: Path | None, data: str | None, tokenizer, tokens: int) -> str:  # noqa: ANN001
    """Text to cut: a text file as it is, or the first `tokens` tokens of a prepared val split, decoded (a byte cut
    mid-character decodes to U+FFFD, which is dropped)."""
    if data is not None and Path(data).is_file():
        return Path(data).read_text(encoding="utf-8", errors="replace")
    ids = held_out_tokens(checkpoint, data, tokenizer)[:tokens]
    return tokenizer.decode(ids.tolist()).replace("\ufffd", "")


def _healings(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        values = []
    if not values or min(values) < 0:
        raise ValueError(f"--healing {text!r} is not allowed: comma-separated integers >= 0 (tokens backed off; "
                         "0 = no healing)")
    return list(dict.fromkeys(values))


def run_continuation(args: argparse.Namespace) -> int:
    from archlab.eval.continuation import continuation_markdown, continuation_table

    healings = _healings(args.healing)
    for name in ("cuts", "context", "k", "text_tokens"):
        if getattr(args, name) < 1:
            raise ValueError(f"--{name.replace('_', '-')}={getattr(args, name)} is not allowed: an integer >= 1")
    model, tokenizer, checkpoint = load_for_eval(args.checkpoint)
    text = held_out_text(checkpoint, args.data, tokenizer, args.text_tokens)
    table = continuation_table(model.eval(), tokenizer, text, healings, cuts=args.cuts, context=args.context, k=args.k)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    markdown = continuation_markdown(table, args.k)
    (out / "continuation.md").write_text(markdown + "\n", encoding="utf-8")
    with (out / "continuation.csv").open("w", encoding="utf-8") as f:
        f.write("healing,offset,hit\n")
        f.writelines(f"{n},{o},{int(h)}\n" for n, r in table.items() for o, h in zip(r.offsets, r.hits))
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

"""`archlab generate`: sample text from a checkpoint, streamed to the terminal (infer/generate.py).

Prompts come from --prompt (repeatable), --prompt-file (one prompt per line; '-' = stdin), or stdin
lines when it is piped; --interactive reads one prompt per line until EOF or /quit. --report-memory
prints, on stderr, the KV-cache bytes per token and for the whole context for MHA / GQA / MQA
at this model's width, the context length at which the cache outweighs the weights, and the
measured peak memory.

The library (torch) is imported in the functions that run, so `archlab generate --help`
answers without it.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from archlab.infer.engine import Decoder
    from archlab.infer.generate import Generation
    from archlab.infer.sampling import SamplingConfig
    from archlab.infer.stream import TokenizerLike
    from archlab.nn.config import ModelConfig

QUIT = "/quit"
# --past-context: infer/sampling.py's PAST_CONTEXT, in the words of a flag (repeated: that module
# imports torch, and `--help` answers without it; tests/infer/test_window.py checks the keys agree)
PAST_CONTEXT = {
    "stop": "fail before any compute",
    "extrapolate": "run on at positions never trained on (not with learned positions)",
    "slide": "predict each token past it from the last context-limit tokens, as nanoGPT crops",
}
# without --max-new-tokens: this many, or fewer where the context ends sooner
DEFAULT_NEW_TOKENS = 128


def fit_default(
    sampling: SamplingConfig, config: ModelConfig, prompt_len: int, given: bool
) -> SamplingConfig:
    """The default max_new_tokens clipped to the context left after the prompt (with a note
    on stderr); a value the user gave is kept, so check_context refuses it in one line if it
    does not fit."""
    limit = config.context_limit
    room = None if limit is None or sampling.past_context != "stop" else limit - prompt_len
    if given or room is None or room >= sampling.max_new_tokens or room < 1:
        return sampling
    sys.stderr.write(
        f"archlab generate: --max-new-tokens {room} (the default {DEFAULT_NEW_TOKENS} clipped to "
        f"the model's {limit}-token context after a {prompt_len}-token prompt)\n"
    )
    return dataclasses.replace(sampling, max_new_tokens=room)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "generate", help="generate text from a checkpoint (streams to the terminal)"
    )
    p.add_argument(
        "--checkpoint",
        required=True,
        help="archlab checkpoint or run folder, or a Hugging Face folder",
    )
    _add_prompts(p)
    _add_sampling(p)
    _add_context(p)
    p.add_argument(
        "--report-memory", action="store_true", help="KV-cache bytes (MHA/GQA/MQA) and peak memory"
    )
    p.add_argument(
        "--compile",
        action="store_true",
        help="torch.compile the decode step where it measures faster than eager on this machine "
        "(a one-off compile of seconds)",
    )
    p.add_argument(
        "--device", default="auto", help="auto (cuda if available), cpu, cuda, cuda:1, ..."
    )
    p.set_defaults(func=run_generate)


def _add_prompts(p: argparse.ArgumentParser) -> None:
    """Where the prompts come from and how they are batched and shown."""
    p.add_argument("--prompt", action="append", default=[], help="a prompt (repeat for a batch)")
    p.add_argument("--prompt-file", help="one prompt per line; '-' reads stdin")
    p.add_argument(
        "--interactive", action="store_true", help="a REPL: one prompt per line, /quit or EOF ends"
    )
    p.add_argument(
        "--batch-size", type=int, default=8, help="prompts generated together (left-padded)"
    )
    p.add_argument(
        "--token-healing",
        type=int,
        nargs="?",
        const=1,
        default=0,
        metavar="N",
        help="back the prompt off by N tokens (1 if no N) and let the first new tokens re-spell "
        "them, so a prompt ending mid-token continues as in training (kexue.fm/archives/9762)",
    )
    p.add_argument(
        "--special-tokens",
        action="store_true",
        help="show special tokens (<|im_start|>, ...) in the text; by default they are left out, "
        "and generation stops at the EOS and end-of-turn tokens",
    )


def _add_sampling(p: argparse.ArgumentParser) -> None:
    """How each new token is drawn and when a sequence stops."""
    p.add_argument(
        "--max-new-tokens",
        type=int,
        default=None,
        help=f"tokens per prompt (default {DEFAULT_NEW_TOKENS}, clipped to fit "
        "the model's context)",
    )
    p.add_argument("--temperature", type=float, default=1.0, help="0 = greedy")
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--top-p", type=float, default=None)
    p.add_argument("--seed", type=int, default=None, help="same seed, same text")
    p.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")


def _add_context(p: argparse.ArgumentParser) -> None:
    """What happens past the model's context, and the log-n scale for lengths past training."""
    past = p.add_mutually_exclusive_group()
    past.add_argument(
        "--past-context",
        choices=list(PAST_CONTEXT),
        default="stop",
        help="when prompt + new tokens pass the model's context: "
        + "; ".join(f"{k}: {v}" for k, v in PAST_CONTEXT.items())
        + " (default stop)",
    )
    past.add_argument(
        "--allow-extrapolation",
        dest="past_context",
        action="store_const",
        const="extrapolate",
        help="the same as --past-context extrapolate",
    )
    p.add_argument(
        "--logn",
        action="store_true",
        help="the log-n query scale max(1, log n / log max_seq_len) at "
        "inference only, for a model trained without it (Su, kexue.fm/archives/9708)",
    )


def read_prompts(args: argparse.Namespace) -> list[str]:
    """--prompt values, then --prompt-file lines, else piped stdin lines; empty
    lines are skipped."""
    prompts = list(args.prompt)
    if args.prompt_file:
        if args.prompt_file != "-" and not Path(args.prompt_file).is_file():
            raise FileNotFoundError(
                f"--prompt-file {args.prompt_file}: no such file (one prompt per line; "
                "'-' reads stdin)"
            )
        prompts += _prompt_file(args.prompt_file)
    elif not prompts and not sys.stdin.isatty():
        prompts = _lines(sys.stdin)
    if not prompts:
        raise ValueError(
            "no prompt: give --prompt, --prompt-file, pipe prompts on stdin, or use --interactive"
        )
    return prompts


def _prompt_file(name: str) -> list[str]:
    """The prompts of --prompt-file NAME ('-': stdin), one per line; one that is not UTF-8 text (a
    binary file given by mistake) is refused naming it and, for a file, the line and the byte."""
    if name == "-":
        try:
            return _lines(sys.stdin)
        except UnicodeDecodeError as err:
            raise ValueError(
                f"--prompt-file - (stdin) is not UTF-8 text (byte {err.object[err.start]:#04x}); "
                "pipe text, one prompt per line"
            ) from None
    raw = Path(name).read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        column = err.start - (raw.rfind(b"\n", 0, err.start) + 1) + 1
        raise ValueError(
            f"--prompt-file {name} is not UTF-8 text: line {line} has byte "
            f"{raw[err.start]:#04x} at column {column}; give a text file, one prompt per line"
        ) from None
    return _lines(io.StringIO(text, newline=None))  # the lines open() would give: \n, \r\n or \r


def _lines(source: Iterable[str]) -> list[str]:
    return [line.rstrip("\r\n") for line in source if line.strip()]


def run_generate(args: argparse.Namespace) -> int:
    import torch

    from archlab.infer.engine import Decoder
    from archlab.infer.generate import with_inference_logn
    from archlab.infer.memory import memory_report
    from archlab.infer.sampling import SamplingConfig
    from archlab.infer.speed import check_compile_decode
    from archlab.train.hardware import resolve_device

    given = args.max_new_tokens is not None
    sampling = SamplingConfig(
        max_new_tokens=args.max_new_tokens if given else DEFAULT_NEW_TOKENS,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        seed=args.seed,
        stop=tuple(args.stop),
        past_context=args.past_context,
    )
    if args.batch_size < 1:
        raise ValueError(f"--batch-size={args.batch_size} is not allowed: a positive integer")
    if args.token_healing < 0:
        raise ValueError(
            f"--token-healing={args.token_healing} is not allowed: an integer >= 0 (tokens "
            "to back off)"
        )
    prompts = [] if args.interactive else read_prompts(args)  # read before loading: fail fast
    device = resolve_device(args.device)
    if args.compile:
        check_compile_decode(device)
    from archlab.interop.model_folder import open_model

    model, tokenizer = open_model(args.checkpoint)
    if args.logn:
        model = with_inference_logn(model)
    model.to(device).eval()
    if device.type == "cuda":
        # the report's peak is generation's, not loading's
        torch.cuda.reset_peak_memory_stats(device)
    # one decoder for every prompt: the decode layout once, the compiled step and its measurement
    # once; the command owns the model, so the row-major weights need not be kept for restoring
    # (restore=False)
    with Decoder(model, args.compile, restore=False) as decoder:
        results = _run(args, decoder, tokenizer, prompts, sampling, given)
    if args.report_memory and results:
        sys.stderr.write(
            memory_report(model, max(results, key=lambda g: g.cache_bytes), device) + "\n"
        )
    return 0


def _run(
    args: argparse.Namespace,
    decoder: Decoder,
    tokenizer: TokenizerLike,
    prompts: list[str],
    sampling: SamplingConfig,
    given: bool,
) -> list[Generation]:
    from archlab.infer.generate import check_context

    if args.interactive:
        if args.compile:
            sys.stderr.write(
                "archlab generate: the decode step compiles (torch.compile) during "
                "the first prompt\n"
            )
        return _interactive(
            decoder, tokenizer, sampling, given, args.token_healing, args.special_tokens
        )
    longest = max(len(tokenizer.encode(prompt)) for prompt in prompts)
    sampling = fit_default(sampling, decoder.model.config, longest, given)
    for prompt in prompts:  # every prompt fits, or nothing is printed at all
        check_context(
            decoder.model.config,
            len(tokenizer.encode(prompt)),
            sampling.max_new_tokens,
            sampling.past_context,
        )
    # the first batch waits for torch.compile and the measurement: say so, then say what won
    if args.compile:
        sys.stderr.write(
            "archlab generate: compiling the decode step (torch.compile, once) and timing "
            "it against eager...\n"
        )
    results = []
    for i in range(0, len(prompts), args.batch_size):
        results.append(
            _run_batch(
                decoder,
                tokenizer,
                prompts[i : i + args.batch_size],
                sampling,
                args.token_healing,
                args.special_tokens,
            )
        )
        if args.compile and i == 0:
            sys.stderr.write(
                f"archlab generate: decoding {decoder.mode} (measured faster here); the first "
                f"batch decoded in {results[0].decode_seconds:.1f} s, compilation included\n"
            )
    return results


def _stream(row: int, piece: str) -> None:
    """The streaming callback: write each confirmed piece of text as soon as it is known."""
    sys.stdout.write(piece)
    sys.stdout.flush()


def _run_batch(
    decoder: Decoder,
    tokenizer: TokenizerLike,
    prompts: list[str],
    sampling: SamplingConfig,
    token_healing: int = 0,
    special_tokens: bool = False,
) -> Generation:
    from archlab.infer.generate import text_generation

    if len(prompts) == 1:  # one prompt: echo it and stream the continuation
        sys.stdout.write(prompts[0])
        result = text_generation(
            decoder,
            tokenizer,
            prompts,
            sampling,
            on_text=_stream,
            token_healing=token_healing,
            special_tokens=special_tokens,
        )
        sys.stdout.write("\n")
        return result
    result = text_generation(
        decoder,
        tokenizer,
        prompts,
        sampling,
        token_healing=token_healing,
        special_tokens=special_tokens,
    )
    for prompt, text in zip(prompts, result.texts):
        sys.stdout.write(f"{prompt}{text}\n\n")
    return result


def _interactive(
    decoder: Decoder,
    tokenizer: TokenizerLike,
    sampling: SamplingConfig,
    given: bool,
    token_healing: int = 0,
    special_tokens: bool = False,
) -> list[Generation]:
    from archlab.infer.generate import check_context

    results = []
    tty = sys.stdin.isatty()
    while True:
        if tty:
            sys.stderr.write("> ")
            sys.stderr.flush()
        line = sys.stdin.readline()
        if not line or line.strip() == QUIT:
            return results
        if line.strip():
            prompt = line.rstrip("\r\n")
            fitted = fit_default(
                sampling, decoder.model.config, len(tokenizer.encode(prompt)), given
            )
            try:  # a prompt too long for the context is reported, and the session goes on
                check_context(
                    decoder.model.config,
                    len(tokenizer.encode(prompt)),
                    fitted.max_new_tokens,
                    fitted.past_context,
                )
            except ValueError as err:
                sys.stderr.write(f"error: {err}\n")
                continue
            results.append(
                _run_batch(decoder, tokenizer, [prompt], fitted, token_healing, special_tokens)
            )

"""Passkey retrieval accuracy per context length and needle depth (`archlab eval passkey`).

Each cell holds `trials` prompts of one length (data/passkey.py: filler, the needle at the given
depth, the question); the model continues each greedily and is right when its next KEY_DIGITS tokens
spell the key. A RoPE scaling method of archlab.eval.rope_methods may be applied at each length,
as in `eval length`.
"""

from __future__ import annotations

import logging
import random
import sys
from dataclasses import dataclass

from archlab.checkpoint import build_model, module_training_state
from archlab.data.passkey import KEY_DIGITS, min_length, passkey_prompt, random_key
from archlab.eval.rope_methods import method_configs
from archlab.infer.generate import generate
from archlab.infer.sampling import SamplingConfig
from archlab.infer.stream import TokenizerLike
from archlab.nn.config import ModelConfig
from archlab.nn.model import TransformerLM

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PasskeyResult:
    length: int
    depth: float
    accuracy: float  # share of trials whose continuation is the key


# without --lengths, those of these the scaling covers (characters)
DEFAULT_LENGTHS = (256, 512, 1024, 2048)


def default_passkey_lengths(
    config: ModelConfig, method: str, window: int | None = None, allow_extrapolation: bool = False
) -> list[int]:
    """The prompt lengths evaluated when none are given: DEFAULT_LENGTHS that `method` covers for
    `config` (without `allow_extrapolation` plain RoPE stops at max_seq_len), else max_seq_len
    itself; a model whose context holds no passkey prompt is refused in one line."""
    # the user's settings
    method_configs(config, [method], [config.max_seq_len], window, allow_extrapolation)

    def covered(length: int) -> bool:
        try:
            method_configs(config, [method], [length], window, allow_extrapolation)
        except ValueError:
            return False
        return True

    fitting = [n for n in DEFAULT_LENGTHS if covered(n)] or [config.max_seq_len]
    if max(fitting) < min_length():
        raise ValueError(
            f"this model's context of {config.max_seq_len} tokens holds no passkey prompt (at "
            f"least {min_length()} characters): pass --lengths with --allow-extrapolation"
        )
    return [n for n in fitting if n >= min_length()]


def passkey_accuracy(
    model: TransformerLM,
    tokenizer: TokenizerLike,
    length: int,
    depth: float,
    trials: int,
    seed: int = 0,
) -> float:
    """Share of `trials` prompts of `length` characters, needle at `depth`, that the
    model answers right."""
    rng = random.Random(f"{seed}-{length}-{depth}")
    keys = [random_key(rng) for _ in range(trials)]
    prompts = [tokenizer.encode(passkey_prompt(length, depth, key)) for key in keys]
    sampling = SamplingConfig(
        max_new_tokens=KEY_DIGITS, temperature=0.0, past_context="extrapolate"
    )
    out = generate(model, prompts, sampling)
    answers = [tokenizer.decode(tokens) for tokens in out.tokens]
    return sum(answer.startswith(key) for answer, key in zip(answers, keys)) / trials


def evaluate_passkey(
    model: TransformerLM,
    tokenizer: TokenizerLike,
    lengths: list[int],
    depths: list[float],
    trials: int = 10,
    method: str = "none",
    window: int | None = None,
    allow_extrapolation: bool = False,
    progress: bool = True,
) -> list[PasskeyResult]:
    """Accuracy per (length, depth) of `model`'s weights under RoPE
    method `method` (archlab.eval.rope_methods)."""
    from tqdm import tqdm

    if trials < 1:
        raise ValueError(f"trials={trials} is not allowed: a positive integer")
    # checks first
    configs = method_configs(model.config, [method], lengths, window, allow_extrapolation)
    state, trained = model.state_dict(), module_training_state(model)
    results = []
    cells = [(n, d) for n in lengths for d in depths]
    scaled = {}
    # a log file gets one plain line per cell, not bar redraws
    lines = progress and not sys.stderr.isatty()
    for length, depth in tqdm(cells, desc="eval passkey", disable=not progress or lines):
        if length not in scaled:
            scaled[length] = build_model(
                configs[method, length], state, training_state=trained
            ).eval()
        results.append(
            PasskeyResult(
                length, depth, passkey_accuracy(scaled[length], tokenizer, length, depth, trials)
            )
        )
        if lines:
            logger.info(
                "eval passkey %d/%d: length %d, depth %g, accuracy %.2f",
                len(results),
                len(cells),
                length,
                depth,
                results[-1].accuracy,
            )
    return results


def passkey_table(results: list[PasskeyResult]) -> str:
    """Rows = lengths, columns = depths, cells = accuracy."""
    depths = sorted({r.depth for r in results})
    cells = {(r.length, r.depth): f"{r.accuracy:.2f}" for r in results}
    lines = [
        "| length | " + " | ".join(f"depth {d:g}" for d in depths) + " |",
        "|---" * (len(depths) + 1) + "|",
    ]
    for length in sorted({r.length for r in results}):
        lines.append(f"| {length} | " + " | ".join(cells[length, d] for d in depths) + " |")
    return "\n".join(lines)

"""The data a run trains on, ready before any line about the run is logged: the prepared token
folder, its tokenizer, and the prompt and length of the samples shown at each evaluation.

`train()` opens it before the memory estimate and the thread choice, so a corpus that cannot be used
(empty, too short for one window, a tokenizer larger than the vocabulary) is refused first, in one
line. Derived values fit the user's settings: the sample length defaults to `DEFAULT_SAMPLE_TOKENS`,
clipped to the context left after the sample prompt with one info line (nanoGPT's CPU recipe trains
at a context of 64, the default sample length); a length the user set is checked as given and
refused in one line if it does not fit.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from archlab.data.prepare import prepare_data
from archlab.data.tokenizer import Tokenizer
from archlab.data.tokens import TokenData
from archlab.nn.config import ModelConfig
from archlab.train import distributed as dist_utils
from archlab.train.config import TrainConfig

logger = logging.getLogger(__name__)

SAMPLE_PROMPT_CHARS = 4  # default sample prompt: this many characters of the validation text
# logging.sample_tokens None: this many new tokens, fewer where the context ends sooner
DEFAULT_SAMPLE_TOKENS = 64


@dataclass
class RunData:
    """What `open_run_data` returns: the token folder and its reader, the tokenizer, and
    the samples' settings."""

    folder: Path
    tokens: TokenData
    tokenizer: Tokenizer
    sample_prompt: str
    sample_tokens: int  # resolved: the user's value, or the default clipped to the context


def data_dir(train: TrainConfig) -> Path:
    """Where a run's tokens live: a prepared folder given as data.source as it is, else
    data.dir or RUN_DIR/data."""
    if (Path(train.data.source) / "meta.json").is_file():
        return Path(train.data.source)
    return Path(train.data.dir) if train.data.dir else Path(train.out) / "data"


def open_run_data(
    train: TrainConfig, model: ModelConfig, ctx: dist_utils.DistContext, resume: bool
) -> RunData:
    """Prepare (rank 0; a resumed run's folder is reused, never replaced), open and check
    the run's data."""
    d = train.data
    folder = data_dir(train)
    if ctx.is_main and folder != Path(d.source):
        prepare_data(
            d.source,
            folder,
            d.tokenizer,
            d.vocab_size,
            d.val_fraction,
            min_tokens=d.block_size + 1,
            reuse_only=resume,
            bpe_dropout=d.bpe_dropout,
        )
    dist_utils.barrier(ctx)  # the other ranks read what rank 0 wrote
    tokens = TokenData(folder, ctx.rank, ctx.world_size)
    if tokens.vocab_size > model.vocab_size:
        raise ValueError(
            f"model.vocab_size={model.vocab_size} is not allowed: the tokenizer of {folder} "
            f"has {tokens.vocab_size} ids"
        )
    tokenizer = tokens.tokenizer()
    prompt, n_new = sample_settings(train, model, tokens, tokenizer, ctx.is_main)
    return RunData(folder, tokens, tokenizer, prompt, n_new)


def corpus_prompt(tokens: TokenData, tokenizer: Tokenizer) -> str:
    """The first characters of the validation text: a prompt in the corpus's own language."""
    head = tokens.splits["val"][: SAMPLE_PROMPT_CHARS * 8].tolist()
    # a byte cut mid-character decodes to U+FFFD
    text = tokenizer.decode(head).replace("\ufffd", "")
    return text[:SAMPLE_PROMPT_CHARS] or " "


def sample_settings(
    train: TrainConfig,
    model: ModelConfig,
    tokens: TokenData,
    tokenizer: Tokenizer,
    log: bool = True,
) -> tuple[str, int]:
    """The samples' prompt and new-token count. A derived value is fitted to the context (one info
    line when the default length is clipped); a value the user set is refused in one line when it
    does not fit."""
    lg = train.logging
    prompt = lg.sample_prompt if lg.sample_prompt is not None else corpus_prompt(tokens, tokenizer)
    limit = model.context_limit
    if not lg.samples or limit is None:  # no samples, or no context limit (ReRoPE): nothing to fit
        return prompt, lg.sample_tokens or DEFAULT_SAMPLE_TOKENS
    prompt_len = len(tokenizer.encode(prompt))
    # a context shorter than the derived prompt: one character
    if prompt_len >= limit and lg.sample_prompt is None:
        prompt = prompt[:1]
        prompt_len = len(tokenizer.encode(prompt))
    if prompt_len >= limit:
        raise ValueError(
            f"logging.sample_prompt={prompt!r} is not allowed: its {prompt_len} tokens leave no "
            f"room for a sample in the model's {limit}-token context"
        )
    room = limit - prompt_len
    if lg.sample_tokens is not None:  # the user's: kept as given, refused if it does not fit
        if lg.sample_tokens > room:
            raise ValueError(
                f"logging.sample_tokens={lg.sample_tokens} is not allowed: at most {room} (the "
                f"model's {limit}-token context after the {prompt_len}-token sample prompt)"
            )
        return prompt, lg.sample_tokens
    if room < DEFAULT_SAMPLE_TOKENS and log:
        logger.info(
            "logging.sample_tokens: %d (the default %d clipped to the model's %d-token context "
            "after the %d-token sample prompt; --logging.sample_tokens N to set it)",
            room,
            DEFAULT_SAMPLE_TOKENS,
            limit,
            prompt_len,
        )
    return prompt, min(room, DEFAULT_SAMPLE_TOKENS)

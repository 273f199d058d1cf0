"""What the `archlab eval` actions share: the help of their common flags, the checks of integer
flags, and the model and tokenizer of an evaluation source."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from archlab.eval.source import EvalSource

if TYPE_CHECKING:
    from archlab.data.tokenizer import Tokenizer
    from archlab.nn.model import TransformerLM

DATA_HELP = (
    "held-out data, as train --data takes it: a text file (scored as it is), stdlib, a folder, "
    "JSONL, passkey or hf:NAME (their validation documents), or a prepared data folder (its val "
    "split); default: the run's prepared data"
)
WINDOW_HELP = (
    "ReRoPE window W (default: the model's own, as an hwfa2 model has one, else max_seq_len / 2; "
    "leaky_rerope max_seq_len / 4)"
)
OUT_HELP = (
    "(default: a new folder eval-ACTION/MODEL-TIME; an --out that holds results needs --force)"
)
FORCE_HELP = "replace the results an earlier evaluation left in --out"


def int_list(text: str, flag: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ValueError(
            f"{flag} {text!r} is not allowed: comma-separated positive integers"
        ) from None
    if not values or min(values) < 1:
        raise ValueError(f"{flag} {text!r} is not allowed: comma-separated positive integers")
    return values


def check_positive(args: argparse.Namespace, *names: str) -> None:
    for name in names:
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ValueError(f"--{name.replace('_', '-')}={value} is not allowed: an integer >= 1")


def load_for_eval(source: EvalSource) -> tuple[TransformerLM, Tokenizer]:
    """Model and tokenizer of an archlab checkpoint, or of a Hugging Face folder (its model built on
    the meta device, no random init, and its tokenizer): interop.model_folder."""
    return source.model.load()

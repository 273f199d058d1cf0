"""The lab's fixed evaluation set, and what is scored on it from a run's final checkpoint.

- **Windows** (`eval_starts`): EVAL_TOKENS target tokens in windows of the run's block size, evenly
  strided over the validation split (`TokenData.strided_windows`), or the whole split tiled by
  non-overlapping windows when it holds fewer. No generator: every arm at every seed that shares the
  data is scored on the same text, so the evaluation sample adds no noise to a paired comparison,
  and a finished run folder can be re-scored at any time.
- **Scores** (`score_windows`): the mean cross entropy of the targets (the lab's `val_loss`) and
  the mean |log Z| of the head's logits, log Z = logsumexp over the vocabulary (`log_z_drift`:
  what z-loss pins to 0, PaLM arXiv 2204.02311 §5; Wortsman et al. arXiv 2309.14322 §3.2), from
  one forward pass.
- **Attention logits** (`max_attention_logit`): the largest |q . k| * scale over the visible
  (causal, in-window) query-key pairs of every layer, after QK-norm and RoPE, before any softcap
  or position bias (the attention-logit growth of Dehghani et al. arXiv 2302.05442 and Wortsman
  et al. §3.1).
- **Bits per byte on one byte span** (`byte_span`, `span_ids`, `bits_per_byte`): the first
  SPAN_BYTES bytes of the validation text, documents joined as the byte tokenizer's stream joins
  them (each followed by "\\n\\n"). A tokenizer with an EOS id writes that separator as its EOS,
  which then stands for the two bytes. Each tokenizer encodes the same bytes, after one separator
  as context; the nats of every target token are summed and divided by ln 2 and the span's byte
  count. The span's end never splits a character or a "\\n\\n". The text comes from decoding the
  prepared split, so it is the same bytes for every tokenizer whose decoding inverts its encoding
  (the byte tokenizer and archlab's byte-level BPE), provided the split is by documents (`meta.json`
  `split_rule: documents`; a `tail` split depends on the tokenizer).

Cost: each pass is one forward over at most EVAL_TOKENS tokens (SPAN_BYTES bytes for bits per byte:
fewer tokens for BPE). A `small` run trains 300 x 16 x 128 = 614k tokens forward and backward
(about 3 forwards each), so a 65,536-token pass is about 3.6% of its compute by FLOPs; timed on one
thread of the shared 2-core machine (the pass alternated with training steps of the `small` model),
1.9-4.8% of the run's training time. `val_loss` and `log_z_drift` share one pass; `max_attn_logit`
and `bits_per_byte` are one more each.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from archlab.data.tokenizer import DOC_SEPARATOR, Tokenizer
from archlab.data.tokens import TokenData
from archlab.nn.attention.attention import Attention
from archlab.nn.attention.gau import GatedAttentionUnit
from archlab.nn.model import TransformerLM

# target tokens of the fixed evaluation set (or the whole validation split when smaller)
EVAL_TOKENS = 65_536
SPAN_BYTES = 65_536  # bytes of validation text every tokenizer's bits per byte is scored on
EVAL_BATCH = 16  # windows per forward pass
SEPARATOR = DOC_SEPARATOR.encode("utf-8")


def eval_starts(data: TokenData, block_size: int, tokens: int = EVAL_TOKENS) -> np.ndarray:
    """Window starts of the fixed evaluation set: ceil(tokens / block_size) windows evenly strided
    over the validation split, or as many non-overlapping windows as it holds when that is fewer."""
    fit = (data.num_tokens("val") - 1) // block_size
    if fit < 1:
        raise ValueError(
            f"{data.data_dir}: the validation split ({data.num_tokens('val')} tokens) is shorter "
            f"than one window of {block_size + 1}"
        )
    return data.strided_windows("val", min(math.ceil(tokens / block_size), fit), block_size)


@dataclass(frozen=True)
class Scores:
    """What one pass over the evaluation windows measured (per target token)."""

    loss: float  # mean cross entropy, nats
    abs_log_z: float  # mean |log Z| of the head's logits
    targets: int  # target tokens scored


def _batches(
    data: TokenData, starts: np.ndarray, block_size: int
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [
        data.windows_at("val", starts[i : i + EVAL_BATCH], block_size)
        for i in range(0, len(starts), EVAL_BATCH)
    ]


def _target_scores(logits: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-target cross entropy and log Z, float64, from logits (B, T, V) and targets (B, T)."""
    logits = logits.double()
    log_z = torch.logsumexp(logits, dim=-1)  # (B, T)
    return log_z - logits.gather(-1, y[..., None]).squeeze(-1), log_z  # -log p(y) = log Z - logit_y


@torch.no_grad()
def score_windows(
    model: TransformerLM, data: TokenData, starts: np.ndarray, block_size: int
) -> Scores:
    """Mean cross entropy and mean |log Z| over the windows at `starts` (one forward
    per EVAL_BATCH windows)."""
    model.eval()
    ce_sum = abs_z_sum = 0.0
    n = 0
    for x, y in _batches(data, starts, block_size):
        ce, log_z = _target_scores(model(x), y)
        ce_sum, abs_z_sum, n = (
            ce_sum + float(ce.sum()),
            abs_z_sum + float(log_z.abs().sum()),
            n + y.numel(),
        )
    return Scores(ce_sum / n, abs_z_sum / n, n)


def _layer_max_logit(
    module: Attention | GatedAttentionUnit, q: torch.Tensor, k: torch.Tensor, inp: object
) -> float:
    """max |q . k| * scale over the pairs a layer lets a query see, from the projected q (B, H, T,
    Dh) and k (B, K, T, Dh) its `core` receives: the layer's own scores (`AttentionCore.scores`,
    the eager kernel's path, with the query scaling and late key rotation `core` applies; a ReRoPE
    plan's own scores)."""
    scores = module.scores(q, k, inp)  # (B, H, T, S)
    t = scores.shape[-1]
    # True = seen
    visible = inp.mask if inp.mask is not None else torch.ones(t, t, dtype=torch.bool).tril()
    return float(scores.abs().masked_fill(~visible, 0.0).amax())


@torch.no_grad()
def max_attention_logit(
    model: TransformerLM, data: TokenData, starts: np.ndarray, block_size: int
) -> float:
    """The largest |q . k| * scale of any layer, head and visible pair over the windows at `starts`.
    Read where every block hands attention its projected q and k (`Attention.core`: a parallel block
    calls it directly)."""
    model.eval()
    found = [0.0]
    # a GAU: Attention.core
    layers = [m for m in model.modules() if isinstance(m, (Attention, GatedAttentionUnit))]

    def spy(module: Attention | GatedAttentionUnit) -> Callable[..., torch.Tensor]:
        core = module.core

        def read(
            q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, inp: object, cache: object
        ) -> torch.Tensor:
            found[0] = max(found[0], _layer_max_logit(module, q, k, inp))
            return core(q, k, v, inp, cache)

        return read

    for m in layers:
        m.core = spy(m)  # an instance attribute shadows the method until deleted
    try:
        for x, _ in _batches(data, starts, block_size):
            model(x)
    finally:
        for m in layers:
            del m.core
    return found[0]


# ------------------------------------------------------------------------------------ bits per byte
def _documents(data: TokenData, tokenizer: Tokenizer, n_bytes: int) -> list[bytes]:
    """The first validation documents' UTF-8 text, each with its separator, until there are n_bytes
    of it. A tokenizer without an EOS id holds the separators in its stream, which is decoded
    as one piece."""
    val = np.asarray(data.splits["val"])
    # every token stands for at least one byte: n_bytes tokens are enough
    if tokenizer.eos_id is None:
        return [tokenizer.decode(val[:n_bytes].tolist()).encode("utf-8")]
    ends = np.flatnonzero(val == tokenizer.eos_id)
    docs, total, begin = [], 0, 0
    for end in [*ends.tolist(), len(val)]:
        if total >= n_bytes or begin >= len(val):
            break
        text = tokenizer.decode(val[begin:end].tolist()).encode("utf-8") + (
            SEPARATOR if end < len(val) else b""
        )
        docs.append(text)
        total, begin = total + len(text), end + 1
    return docs


def byte_span(data: TokenData, tokenizer: Tokenizer, n_bytes: int = SPAN_BYTES) -> list[bytes]:
    """The span as documents: whole ones, each ending in the separator, then a part of the next (no
    separator). Their concatenation is the first <= n_bytes bytes of the validation text, cut back
    so that it splits no UTF-8 character and no "\\n\\n"."""
    docs = _documents(data, tokenizer, n_bytes + len(SEPARATOR) + 4)  # room to see past the cut
    text = b"".join(docs)
    end = min(n_bytes, len(text))
    while 0 < end < len(text) and (
        (text[end] & 0xC0) == 0x80 or text[end - 1 : end + 1] == b"\n\n"
    ):
        end -= 1  # a continuation byte, or the middle of a newline run, would start the rest
    out, used = [], 0
    for doc in docs:
        if used >= end:
            break
        out.append(doc[: end - used])
        used += len(out[-1])
    return out


def span_ids(tokenizer: Tokenizer, docs: list[bytes]) -> np.ndarray:
    """The span's token ids after one separator of context: a whole document is its ids and the
    separator (EOS, or the separator's own ids), the partial last one its ids alone. Every id after
    the first separator is a target."""
    sep = [tokenizer.eos_id] if tokenizer.eos_id is not None else tokenizer.encode(DOC_SEPARATOR)
    ids = list(sep)
    for doc in docs:
        whole = tokenizer.eos_id is not None and doc.endswith(SEPARATOR)
        text = (doc[: -len(SEPARATOR)] if whole else doc).decode("utf-8")
        ids += tokenizer.encode(text) + (sep if whole else [])
    return np.asarray(ids, dtype=np.int64)


@torch.no_grad()
def span_nats(model: TransformerLM, ids: np.ndarray, block_size: int) -> float:
    """Summed cross entropy of ids[1:] given what precedes them, in consecutive windows of
    block_size targets (each window's first target sees one token of context)."""
    model.eval()
    x_all, y_all = torch.from_numpy(ids[:-1]), torch.from_numpy(ids[1:])
    full = len(y_all) // block_size * block_size
    pieces = [(x_all[:full].view(-1, block_size), y_all[:full].view(-1, block_size))]
    if full < len(y_all):
        pieces.append((x_all[full:][None], y_all[full:][None]))
    nats = 0.0
    for xs, ys in pieces:
        for i in range(0, len(xs), EVAL_BATCH):
            nats += float(
                _target_scores(model(xs[i : i + EVAL_BATCH]), ys[i : i + EVAL_BATCH])[0].sum()
            )
    return nats


def bits_per_byte(
    model: TransformerLM, data: TokenData, block_size: int, n_bytes: int = SPAN_BYTES
) -> float:
    """Cross entropy of the byte span in bits per byte: summed target nats / ln 2 /
    the span's bytes."""
    tokenizer = data.tokenizer()
    docs = byte_span(data, tokenizer, n_bytes)
    return (
        span_nats(model, span_ids(tokenizer, docs), block_size) / math.log(2) / sum(map(len, docs))
    )

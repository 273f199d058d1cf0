"""The fixed evaluation set and what is scored on it, each against an explicit computation:
strided windows, loss and |log Z|, the largest attention logit (read from the eager attention
path), and bits per byte on one byte span that the byte tokenizer and a BPE tokenizer both score,
byte for byte."""

from __future__ import annotations

import math
import shutil
import sysconfig
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from archlab import ModelConfig, TransformerLM
from archlab.data.prepare import prepare_data
from archlab.data.tokenizer import bytes_to_unicode
from archlab.data.tokens import TokenData
from archlab.lab.measures import eval_set
from archlab.nn.attention import attention
from archlab.nn.attention.gau import GatedAttentionUnit
from archlab.nn.attention.kernels import KernelCall, repeat_kv
from archlab.nn.config.choices import ATTENTION_KERNELS

BLOCK = 16
FILES = (
    "json/decoder.py",
    "json/encoder.py",
    "json/scanner.py",
    "json/__init__.py",
    "textwrap.py",
    "string.py",
    "colorsys.py",
    "bisect.py",
    "keyword.py",
    "heapq.py",
    "glob.py",
    "fnmatch.py",
)


@pytest.fixture(scope="module")
def corpora(tmp_path_factory: pytest.TempPathFactory) -> dict[str, TokenData]:
    """One folder of documents (so the split is by documents), prepared with bytes and with a BPE
    of 320 ids."""
    root = tmp_path_factory.mktemp("evalset")
    stdlib, docs = Path(sysconfig.get_paths()["stdlib"]), root / "docs"
    docs.mkdir()
    for i, name in enumerate(FILES):
        shutil.copy(stdlib / name, docs / f"{i:02d}.py")
    data = {
        kind: TokenData(
            prepare_data(str(docs), root / kind, kind, vocab_size=320, val_fraction=0.25)
        )
        for kind in ("byte", "bpe")
    }
    assert all(
        d.meta["split_rule"] == "documents" and d.meta["documents"]["val"] == 3
        for d in data.values()
    )
    return data


def _model(vocab: int, **switches: object) -> TransformerLM:
    model = TransformerLM(
        ModelConfig(
            **{
                "d_model": 32,
                "n_heads": 4,
                "n_layers": 2,
                "vocab_size": vocab,
                "max_seq_len": 64,
                **switches,
            }
        )
    )
    model.init_weights(seed=0)
    return model.eval()


def test_eval_windows_are_evenly_strided_and_fixed(corpora: dict[str, TokenData]) -> None:
    data = corpora["byte"]
    n_val = data.num_tokens("val")
    starts = eval_set.eval_starts(data, BLOCK, tokens=640)
    # first and last window
    assert len(starts) == 40 and starts[0] == 0 and starts[-1] == n_val - BLOCK - 1
    gaps = np.diff(starts)
    assert gaps.max() - gaps.min() <= 1 and gaps.min() >= BLOCK  # evenly spread, not overlapping
    # 65,536 tokens is more than the split: all of it, tiled
    whole = eval_set.eval_starts(data, BLOCK)
    assert len(whole) == (n_val - 1) // BLOCK and np.diff(whole).min() >= BLOCK
    assert (eval_set.eval_starts(data, BLOCK, tokens=640) == starts).all()


def test_scores_equal_cross_entropy_and_log_z_by_hand(corpora: dict[str, TokenData]) -> None:
    data, model = corpora["byte"], _model(256, final_softcap=5.0)
    starts = eval_set.eval_starts(data, BLOCK, tokens=40 * BLOCK)
    val = np.asarray(data.splits["val"]).astype(np.int64)
    windows = torch.from_numpy(np.stack([val[s : s + BLOCK + 1] for s in starts]))
    with torch.no_grad():
        logits = model(windows[:, :-1]).double()  # (40, BLOCK, V), softcapped: what the loss sees
    ce = F.cross_entropy(logits.flatten(0, 1), windows[:, 1:].flatten(), reduction="mean")
    log_z = torch.logsumexp(logits, dim=-1)
    got = eval_set.score_windows(model, data, starts, BLOCK)
    assert got.loss == pytest.approx(float(ce), rel=1e-12) and got.targets == 40 * BLOCK
    assert got.abs_log_z == pytest.approx(float(log_z.abs().mean()), rel=1e-12)


@pytest.mark.parametrize(
    "switches",
    [
        dict(),
        dict(qk_norm="rmsnorm", n_kv_heads=2, sliding_window=5),
        dict(attn_logn=True, key_norm=True),
        dict(block="parallel"),
        dict(block="gau", n_heads=1),
    ],
    ids=["plain", "qknorm-gqa-window", "logn", "parallel", "gau"],
)
def test_max_attention_logit_equals_the_eager_paths_scores(
    corpora: dict[str, TokenData], monkeypatch: pytest.MonkeyPatch, switches: dict
) -> None:
    """The reference: the model's own eager attention, wrapped to read max |q k^T| * scale
    over visible pairs."""
    data, model = corpora["byte"], _model(256, **switches)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(3.0)  # larger logits, far from any tolerance
    starts = eval_set.eval_starts(data, BLOCK, tokens=8 * BLOCK)
    seen = []
    eager = ATTENTION_KERNELS["eager"]

    def spy(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, call: KernelCall) -> torch.Tensor:
        # (B, H, T, S)
        scores = (q @ repeat_kv(k, q.shape[1] // k.shape[1]).transpose(-2, -1)) * call.scale
        t = q.shape[2]
        visible = call.mask if call.mask is not None else torch.ones(t, t, dtype=torch.bool).tril()
        seen.append(float(scores.abs().masked_fill(~visible, 0).amax()))
        return eager(q, k, v, call)

    for m in model.modules():
        if isinstance(m, (attention.Attention, GatedAttentionUnit)):
            # every layer's attention through the eager reference
            monkeypatch.setattr(m, "kernel", spy)
    with torch.no_grad():
        for x, _ in eval_set._batches(data, starts, BLOCK):
            model(x)
    reference = max(seen)
    # every layer of every batch
    assert len(seen) == 2 * len(list(eval_set._batches(data, starts, BLOCK)))
    assert eval_set.max_attention_logit(model, data, starts, BLOCK) == pytest.approx(
        reference, rel=1e-6
    )
    assert all("core" not in vars(m) for m in model.modules())  # the spies are gone


def _target_bytes(data: TokenData, ids: np.ndarray) -> int:
    """Bytes the target ids stand for, counted from the byte-level alphabet: a token's string has
    one character per byte; EOS stands for the two bytes of the separator it replaces."""
    tok = data.tokenizer()
    if tok.kind == "byte":
        return len(ids) - 2  # after the two separator bytes of context
    alphabet = set(bytes_to_unicode().values())
    total = 0
    for i in ids[1:].tolist():
        token = tok.inner.id_to_token(i)
        total += 2 if i == tok.eos_id else len(token)
        assert i == tok.eos_id or set(token) <= alphabet
    return total


@pytest.mark.parametrize("past", [None, 0, 1, 2, 700, 10**7], ids=lambda p: f"first-doc+{p}")
def test_every_tokenizer_scores_the_same_bytes(
    corpora: dict[str, TokenData], past: int | None
) -> None:
    """Spans inside the first document (3000 bytes), ending at its separator's either side or in it,
    in the second document, and the whole split."""
    bpe = corpora["bpe"]
    first = bpe.tokenizer().decode(
        np.asarray(bpe.splits["val"])[
            : int(np.argmax(np.asarray(bpe.splits["val"]) == bpe.tokenizer().eos_id))
        ].tolist()
    )
    n_bytes = 3000 if past is None else len(first.encode("utf-8")) + past
    spans = {kind: eval_set.byte_span(d, d.tokenizer(), n_bytes) for kind, d in corpora.items()}
    text = b"".join(spans["byte"])
    assert b"".join(spans["bpe"]) == text  # the very same bytes
    val_bytes = np.asarray(corpora["byte"].splits["val"]).astype(np.uint8).tobytes()
    assert val_bytes.startswith(text) and len(text) <= n_bytes
    if n_bytes < len(val_bytes):  # cut back to a character boundary, never between two newlines
        assert len(text) > n_bytes - 8 and (val_bytes[len(text)] & 0xC0) != 0x80
        assert val_bytes[len(text) - 1 : len(text) + 1] != b"\n\n"
    else:
        assert text == val_bytes
    assert len(spans["bpe"]) == (1 if past is None or past <= 2 else 2 if past < 10**7 else 3)
    # whole: with its separator
    assert spans["bpe"][0].endswith(b"\n\n") == (past is not None and past >= 2)
    for kind, d in corpora.items():
        ids = eval_set.span_ids(d.tokenizer(), spans[kind])
        assert _target_bytes(d, ids) == len(text)  # the targets stand for exactly the span's bytes


def _nats_by_hand(model: TransformerLM, ids: torch.Tensor) -> float:
    """Summed float64 cross entropy of ids[1:] in consecutive windows of BLOCK targets, the
    last one shorter."""
    nats = 0.0
    with torch.no_grad():
        for i in range(0, len(ids) - 1, BLOCK):
            y = ids[i + 1 : i + BLOCK + 1]
            x = ids[i : i + len(y)]
            nats += float(F.cross_entropy(model(x[None])[0].double(), y, reduction="sum"))
    return nats


def test_bits_per_byte_of_bytes_is_the_span_loss_over_ln2(corpora: dict[str, TokenData]) -> None:
    data, model = corpora["byte"], _model(256)
    span = b"".join(eval_set.byte_span(data, data.tokenizer(), 1000))
    # one separator of context, then the bytes
    nats = _nats_by_hand(model, torch.tensor(list(b"\n\n" + span)))
    bpb = eval_set.bits_per_byte(model, data, BLOCK, n_bytes=1000)
    assert bpb == pytest.approx(nats / len(span) / math.log(2), rel=1e-10)


def test_bits_per_byte_of_bpe_divides_its_nats_by_the_same_bytes(
    corpora: dict[str, TokenData],
) -> None:
    data = corpora["bpe"]
    model = _model(data.vocab_size)
    ids = torch.from_numpy(
        eval_set.span_ids(data.tokenizer(), eval_set.byte_span(data, data.tokenizer(), 2000))
    )
    assert int(ids[0]) == data.tokenizer().eos_id  # the separator of context
    # the bytes' span
    span = b"".join(eval_set.byte_span(corpora["byte"], corpora["byte"].tokenizer(), 2000))
    bpb = eval_set.bits_per_byte(model, data, BLOCK, n_bytes=2000)
    assert bpb == pytest.approx(_nats_by_hand(model, ids) / len(span) / math.log(2), rel=1e-10)

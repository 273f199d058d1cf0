"""Tokenizers: one small `Tokenizer` class over a `tokenizers.Tokenizer`, and its builders.

Kinds (`build_tokenizer(kind, vocab_size, texts)`):
- `byte`: 256 ids, id == UTF-8 byte value, no training and no EOS id (`eos_id` is None):
  documents are separated by the text `DOC_SEPARATOR` ("\\n\\n"). It is saved as a real
  `tokenizer.json` (byte-level BPE with no merges) so every kind loads the same way, but
  encode/decode take a byte fast path. Decoding invalid UTF-8 gives U+FFFD replacement
  characters, as `bytes.decode(errors="replace")`.
- `bpe`: byte-level BPE (GPT-2 style) trained with `tokenizers` on the given texts, with `EOS_TOKEN`
  as a special token that ends every document.
- a path to a `tokenizer.json` file, or to a folder holding one (an HF model folder): loaded as is;
  its EOS comes from `tokenizer_config.json` beside it if present, else from a list of common names.

Special tokens, one policy whichever way a model was loaded (a Hugging Face folder, or the archlab
checkpoint `convert --from-hf` made of it): generation stops at any of `stop_ids` -- the EOS, every
special token whose text is a known end of document or of a chat turn (`END_TOKENS`: `<|im_end|>`,
`<|eot_id|>`, `<end_of_turn>`, ...), and the ids a loader adds (`extra_stop_ids`: a folder's
generation_config.json, or those a checkpoint recorded) -- and `decode(ids,
skip_special_tokens=True)` leaves special tokens out of generated text unless asked for them.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import sys
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

logger = logging.getLogger(__name__)

EOS_TOKEN = "<|endoftext|>"  # GPT-2's document separator, the special token of our trained BPE
DOC_SEPARATOR = "\n\n"  # joins documents for tokenizers without an EOS id (the byte kind)
# Names tried, in order, to find the EOS of a loaded tokenizer.json that has no
# tokenizer_config.json.
EOS_CANDIDATES = ("<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<|eos|>")
# Special tokens that end a document or a chat turn in common tokenizers (GPT-2 / SmolLM, Llama 3,
# ChatML, Gemma, Phi-3, T5 / Llama 2, Mistral): generation stops at each that a tokenizer marks
# special.
END_TOKENS = (
    *EOS_CANDIDATES,
    "<|im_end|>",
    "<|eot_id|>",
    "<|end_of_turn|>",
    "<end_of_turn>",
    "<|end|>",
    "<|eom_id|>",
)
BYTE_VOCAB_SIZE = 256
# the 256-byte alphabet plus EOS; fewer leaves no room for merges
MIN_BPE_VOCAB = BYTE_VOCAB_SIZE + 1
BYTE_FALLBACK = re.compile(r"<0x([0-9A-Fa-f]{2})>")  # SentencePiece's byte-fallback tokens
METASPACE = "\u2581"  # SentencePiece's word-boundary character, a space in the text


@lru_cache(maxsize=1)
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character map, which byte-level `tokenizers` models
    spell tokens in.

    Printable Latin-1 bytes map to themselves; the other 68 bytes map to U+0100 onwards,
    in byte order.
    """
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    extra = (b for b in range(256) if b not in printable)
    mapping = {b: chr(b) for b in printable}
    mapping.update((b, chr(256 + i)) for i, b in enumerate(extra))
    return dict(sorted(mapping.items()))


def _byte_model() -> HFTokenizer:
    """A `tokenizers` model whose ids are exactly the UTF-8 bytes: byte-level BPE with no merges."""
    vocab = {char: byte for byte, char in bytes_to_unicode().items()}
    inner = HFTokenizer(models.BPE(vocab=vocab, merges=[]))
    # No regex split: with no merges it cannot change the ids, and it costs time.
    inner.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    inner.decoder = decoders.ByteLevel()
    return inner


def _is_byte_model(spec: dict) -> bool:
    """Whether a parsed tokenizer.json is the byte kind (checked by structure, not by hash, so a
    file written by another `tokenizers` version is still recognised and gets the fast path)."""
    model = spec.get("model") or {}
    pre = spec.get("pre_tokenizer") or {}
    return (
        model.get("type") == "BPE"
        and not model.get("merges")
        and not spec.get("added_tokens")
        and pre.get("type") == "ByteLevel"
        and model.get("vocab") == {char: byte for byte, char in bytes_to_unicode().items()}
    )


class Tokenizer:
    """Text <-> token ids, plus what data preparation needs: EOS, vocab size and a description."""

    def __init__(self, inner: HFTokenizer, eos_id: int | None = None) -> None:
        self.inner = inner
        self.eos_id = eos_id
        self._json = inner.to_str()
        spec = json.loads(self._json)
        self.kind = "byte" if _is_byte_model(spec) else str(spec["model"]["type"]).lower()
        # max id + 1, not get_vocab_size(): HF vocabularies may have holes below their added tokens.
        self.vocab_size = max(inner.get_vocab(with_added_tokens=True).values()) + 1
        added = [t for t in spec.get("added_tokens") or [] if t.get("special")]
        # what decode(skip_special_tokens=True) drops
        self.special_ids = frozenset(int(t["id"]) for t in added)
        self._end_ids = frozenset(int(t["id"]) for t in added if t.get("content") in END_TOKENS)
        # set by loaders (generation_config.json, a checkpoint)
        self.extra_stop_ids: frozenset[int] = frozenset()

    @property
    def stop_ids(self) -> frozenset[int]:
        """The ids generation stops at: the EOS, the special end-of-document / end-of-turn
        tokens, the loaders'."""
        return (
            self._end_ids
            | self.extra_stop_ids
            | ({self.eos_id} if self.eos_id is not None else set())
        )

    def encode(self, text: str) -> list[int]:
        if self.kind == "byte":
            return list(text.encode("utf-8"))
        return self.inner.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: list[str]) -> list[list[int]]:
        if self.kind == "byte":
            return [list(text.encode("utf-8")) for text in texts]
        # tokenizers encodes a batch on all cores (Rust threads), which is what makes BPE prep fast.
        return [enc.ids for enc in self.inner.encode_batch(texts, add_special_tokens=False)]

    def encode_documents(self, texts: list[str]) -> np.ndarray:
        """The token stream of `texts`, each followed by the document separator, as one int64 array.

        Separator: `eos_id` when the tokenizer has one, else the ids of `DOC_SEPARATOR`.
        """
        if self.kind == "byte":  # numpy over the joined bytes: ~100x faster than lists of ints
            joined = "".join(text + DOC_SEPARATOR for text in texts).encode("utf-8")
            return np.frombuffer(joined, dtype=np.uint8).astype(np.int64)
        separator = [self.eos_id] if self.eos_id is not None else self.encode(DOC_SEPARATOR)
        ids = [np.asarray(doc + separator, dtype=np.int64) for doc in self.encode_batch(texts)]
        return np.concatenate(ids) if ids else np.zeros(0, dtype=np.int64)

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        """Text of `ids`; `skip_special_tokens` leaves special tokens out (what
        generated text shows)."""
        ids = [int(i) for i in ids]
        bad = next((i for i in ids if not 0 <= i < self.vocab_size), None)
        if bad is not None:
            raise ValueError(
                f"token id {bad} is out of range for a "
                f"{self.kind} tokenizer (0..{self.vocab_size - 1})"
            )
        if self.kind == "byte":
            return bytes(ids).decode("utf-8", errors="replace")
        return self.inner.decode(ids, skip_special_tokens=skip_special_tokens)

    def with_dropout(self, p: float) -> Tokenizer:
        """This BPE with BPE-dropout p (Provilkov et al., arXiv 1910.13267): each merge is skipped
        with probability p while encoding, so one text gets many segmentations that all decode
        back to it.

        Set on the serialised model, after any training: `tokenizers`' trainer rebuilds the BPE
        model and drops a dropout given before (tokenizers issue #201), and `ignore_merges` would
        bypass dropout for whole-word vocabulary hits, so it is turned off. The draws come from the
        library's own unseeded RNG.
        """
        if not 0.0 <= p < 1.0:
            raise ValueError(f"bpe_dropout={p!r} is not allowed: a probability in [0, 1)")
        spec = json.loads(self._json)
        if self.kind != "bpe" or not spec["model"].get("merges"):
            raise ValueError(
                f"bpe_dropout={p!r} needs a BPE tokenizer with merges (this one is {self.kind!r})"
            )
        spec["model"]["dropout"] = p if p > 0 else None
        spec["model"]["ignore_merges"] = False
        return Tokenizer(HFTokenizer.from_str(json.dumps(spec)), eos_id=self.eos_id)

    def token_bytes(self) -> list[bytes | None]:
        """Each id's raw bytes (None for special tokens), what token healing's byte trie is keyed
        by: a ByteLevel vocabulary's characters mapped back through `bytes_to_unicode`,
        SentencePiece's byte-fallback `<0xNN>` and its word-boundary mark as a space, anything else
        as its UTF-8."""
        if self.kind == "byte":
            return [bytes([i]) for i in range(BYTE_VOCAB_SIZE)]
        spec = json.loads(self._json)
        special = {t["id"] for t in spec.get("added_tokens") or [] if t.get("special")}
        byte_level = "ByteLevel" in json.dumps(spec.get("decoder"))
        inverse = {char: byte for byte, char in bytes_to_unicode().items()}
        out: list[bytes | None] = []
        for i in range(self.vocab_size):
            token = self.inner.id_to_token(i)
            if token is None or i in special:
                out.append(None)
            elif byte_level and all(ch in inverse for ch in token):
                out.append(bytes(inverse[ch] for ch in token))
            elif match := BYTE_FALLBACK.fullmatch(token):
                out.append(bytes([int(match[1], 16)]))
            else:
                out.append(token.replace(METASPACE, " ").encode("utf-8"))
        return out

    def save(self, directory: str | Path) -> Path:
        """Write `tokenizer.json` (and `tokenizer_config.json` naming the EOS, if
        any) into `directory`."""
        path = Path(directory) / "tokenizer.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self._json, encoding="utf-8")
        if self.eos_id is not None:  # HF's place for the EOS, read back by `load`
            token = self.inner.id_to_token(self.eos_id)
            (path.parent / "tokenizer_config.json").write_text(
                json.dumps({"eos_token": token}), encoding="utf-8"
            )
        return path

    @classmethod
    def load(cls, path: str | Path) -> Tokenizer:
        """Load a `tokenizer.json` file, or the one inside a folder (e.g. an HF model folder)."""
        path = Path(path)
        file = path / "tokenizer.json" if path.is_dir() else path
        if not file.is_file():
            raise FileNotFoundError(
                f"tokenizer file {file} does not exist (expected a tokenizer.json or a "
                "folder holding one)"
            )
        try:
            inner = HFTokenizer.from_file(str(file))
        except Exception as err:  # tokenizers raises a bare Exception on malformed json
            raise ValueError(f"tokenizer file {file} is not a valid tokenizer.json: {err}") from err
        return cls(inner, eos_id=_find_eos(inner, file.parent / "tokenizer_config.json"))

    def describe(self) -> dict[str, str | int | None]:
        """What meta.json records: enough to tell two tokenizers apart and size
        the model's vocab."""
        digest = hashlib.sha256(self._json.encode("utf-8")).hexdigest()[:16]
        return {
            "kind": self.kind,
            "vocab_size": self.vocab_size,
            "eos_id": self.eos_id,
            "hash": digest,
        }


def _find_eos(inner: HFTokenizer, config_file: Path) -> int | None:
    """EOS id of a loaded tokenizer: `eos_token` of tokenizer_config.json, else the
    first known name."""
    if config_file.is_file():
        token = json.loads(config_file.read_text(encoding="utf-8")).get("eos_token")
        if isinstance(token, dict):  # older HF configs store an AddedToken dict
            token = token.get("content")
        if isinstance(token, str) and inner.token_to_id(token) is not None:
            return inner.token_to_id(token)
    return next(
        (inner.token_to_id(t) for t in EOS_CANDIDATES if inner.token_to_id(t) is not None), None
    )


def train_bpe(texts: Iterable[str], vocab_size: int, length: int | None = None) -> Tokenizer:
    """Train a byte-level BPE of at most `vocab_size` ids (fewer on a small corpus), EOS = id 0."""
    if not MIN_BPE_VOCAB <= vocab_size <= 2**32:
        raise ValueError(
            f"bpe vocab_size {vocab_size} is out of range (allowed: {MIN_BPE_VOCAB}..{2**32})"
        )
    inner = HFTokenizer(models.BPE())
    inner.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    inner.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS_TOKEN],
        # every byte encodable, whatever the corpus
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=sys.stderr.isatty(),
    )
    inner.train_from_iterator(texts, trainer=trainer, length=length)
    tokenizer = Tokenizer(inner, eos_id=inner.token_to_id(EOS_TOKEN))
    if tokenizer.vocab_size < vocab_size:
        logger.info(
            "bpe: corpus supports %d of the %d requested ids", tokenizer.vocab_size, vocab_size
        )
    return tokenizer


def build_tokenizer(kind: str, vocab_size: int, texts: Iterable[str] | None) -> Tokenizer:
    """`byte`, `bpe` (trained on `texts`) or a path to a tokenizer.json / a folder holding one."""
    if kind == "byte":
        return Tokenizer(_byte_model())
    if kind == "bpe":
        if texts is None:
            raise ValueError("tokenizer 'bpe' needs texts to train on (got texts=None)")
        return train_bpe(texts, vocab_size)
    path = Path(kind)
    if path.exists() or path.suffix == ".json" or "/" in kind:
        return Tokenizer.load(path)
    raise ValueError(f"tokenizer {kind!r} is not 'byte', 'bpe' or a path to a tokenizer.json")

"""Corpora: where training text comes from, as an ordered stream of documents.

- a text file, or a folder read recursively in sorted relative-path order (hidden entries,
  `__pycache__` and binary files -- a NUL byte in the first 8 KiB, git's rule -- are skipped); one
  file is one document;
- JSONL (`*.jsonl`, alone or inside a folder): one document per line, from the field `text_field`;
- `stdlib`: the running Python's standard library `.py` files (no site-packages, no
  test folders), offline;
- `hf:NAME` or `hf:NAME:CONFIG`: the `train` split of a Hugging Face hub dataset (needs `datasets`);
- `passkey`: synthetic passkey-retrieval documents of 256 characters (data/passkey.py).
Non-UTF-8 bytes decode to U+FFFD and are counted. `data.py` turns a corpus into token memmaps.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import logging
import os
import sysconfig
from collections.abc import Collection, Iterator
from pathlib import Path

from archlab.data.passkey import PASSKEY, PasskeyCorpus

logger = logging.getLogger(__name__)

STDLIB = "stdlib"
HF_PREFIX = "hf:"
BINARY_SNIFF = 8192  # bytes searched for NUL to call a file binary (git's heuristic)
SKIPPED_DIRS = {"__pycache__", "site-packages", "dist-packages"}
# skipped: some hold deliberately broken encodings
STDLIB_TEST_DIRS = {"test", "tests", "idle_test"}

Document = tuple[str, int]  # (text, bytes of source it came from, for the progress bar)


class FileCorpus:
    """Local text and JSONL files in a fixed order; counts the bytes it had to replace."""

    def __init__(self, spec: str, root: Path, files: list[Path], text_field: str = "text") -> None:
        self.spec, self.root, self.files, self.text_field = spec, root, files, text_field
        self.total_bytes = sum(f.stat().st_size for f in files)
        self.replaced = 0  # invalid UTF-8 sequences turned into U+FFFD by the last documents() pass

    def fingerprint(self) -> str:
        """Hash of the relative paths and contents: changes exactly when the prepared data would."""
        digest = hashlib.sha256(f"files\0{self.text_field}\0".encode())
        for file in self.files:
            digest.update(f"{file.relative_to(self.root).as_posix()}\0".encode())
            digest.update(hashlib.sha256(file.read_bytes()).digest())
        return digest.hexdigest()

    def documents(self) -> Iterator[Document]:
        self.replaced = 0
        for file in self.files:
            if file.suffix == ".jsonl":
                yield from self._jsonl_documents(file)
            else:
                raw = file.read_bytes()
                yield self._decode(raw), len(raw)

    def _decode(self, raw: bytes) -> str:
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            text = raw.decode("utf-8", errors="replace")
            # U+FFFD already present in the source is valid UTF-8 (EF BF BD) and is not a
            # replacement.
            self.replaced += text.count("\ufffd") - raw.count(b"\xef\xbf\xbd")
            return text

    def _jsonl_documents(self, file: Path) -> Iterator[Document]:
        with file.open("rb") as lines:
            for lineno, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(self._decode(line))
                except json.JSONDecodeError as err:
                    raise ValueError(f"{file}:{lineno} is not valid JSON ({err.msg})") from err
                text = record.get(self.text_field) if isinstance(record, dict) else None
                if not isinstance(text, str):
                    keys = sorted(record) if isinstance(record, dict) else type(record).__name__
                    raise ValueError(
                        f"{file}:{lineno} has no string field {self.text_field!r} (found: {keys}); "
                        "choose the field with --text-field"
                    )
                yield _drop_surrogates(text), len(line)


class HubCorpus:
    """The `train` split of a Hugging Face hub dataset; `datasets` is imported only here."""

    def __init__(self, spec: str, text_field: str = "text") -> None:
        try:
            import datasets
        except ImportError as err:
            raise ValueError(
                f"--data {spec} needs the optional package 'datasets' (pip install datasets)"
            ) from err
        name, _, config = spec.removeprefix(HF_PREFIX).partition(":")
        self.spec, self.text_field, self.total_bytes, self.replaced = spec, text_field, None, 0
        self.dataset = datasets.load_dataset(name, config or None, split="train")
        if text_field not in self.dataset.column_names:
            raise ValueError(
                f"--data {spec} has no field {text_field!r} (columns: {self.dataset.column_names})"
            )

    def fingerprint(self) -> str:
        fingerprint = getattr(self.dataset, "_fingerprint", "")  # datasets' own content hash
        return hashlib.sha256(
            f"hf\0{self.spec}\0{self.text_field}\0{fingerprint}".encode()
        ).hexdigest()

    def documents(self) -> Iterator[Document]:
        for rows in self.dataset.iter(batch_size=1000):
            for text in rows[self.text_field]:
                yield _drop_surrogates(text or ""), len(text or "")


def _drop_surrogates(text: str) -> str:
    """JSON can hold lone surrogates (\\ud800), which no UTF-8 tokenizer accepts: replace them."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", errors="replace").decode("utf-8")


def _is_binary(file: Path) -> bool:
    with file.open("rb") as handle:
        return b"\0" in handle.read(BINARY_SNIFF)


def list_files(folder: Path, suffix: str = "", skip_dirs: Collection[str] = ()) -> list[Path]:
    """Files under `folder` in sorted relative-path order, skipping hidden, cache
    and binary files."""
    files, binary = [], 0
    for parent, dirs, names in os.walk(folder):
        # Prune in place so os.walk never descends into site-packages and friends.
        dirs[:] = [
            d
            for d in dirs
            if not d.startswith(".") and d not in SKIPPED_DIRS and d not in skip_dirs
        ]
        for name in names:
            path = Path(parent) / name
            if name.startswith(".") or not name.endswith(suffix) or not path.is_file():
                continue
            if _is_binary(path):
                binary += 1
                continue
            files.append(path)
    if binary:
        logger.info(
            "skipped %d binary files under %s (NUL byte in the first %d bytes)",
            binary,
            folder,
            BINARY_SNIFF,
        )
    return sorted(files, key=lambda p: p.relative_to(folder).as_posix())


def stdlib_files(include_tests: bool = False) -> tuple[Path, list[Path]]:
    """The running Python's standard library `.py` files (root, sorted files): a corpus
    on any machine."""
    root = Path(sysconfig.get_paths()["stdlib"])
    return root, list_files(root, ".py", () if include_tests else STDLIB_TEST_DIRS)


def check_source(data: str) -> None:
    """Refuse, in one line and before anything is read or logged, a corpus that cannot be: a path
    that does not exist, an empty file, a folder with no non-empty text file, or `hf:NAME` without
    the `datasets` package (the name itself is the hub's to answer). Cheap: a folder is walked only
    up to its first usable file."""
    if data in (PASSKEY, STDLIB):
        return
    if data.startswith(HF_PREFIX):
        if importlib.util.find_spec("datasets") is None:
            raise ValueError(
                f"--data {data} needs the optional package 'datasets' (pip install datasets)"
            )
        return
    path = Path(data).expanduser()
    if not path.exists():
        raise FileNotFoundError(
            f"corpus path {data} does not exist (expected a text/JSONL file, a folder, a "
            f"prepared data folder, '{STDLIB}', '{PASSKEY}' or 'hf:NAME')"
        )
    if (path / "meta.json").is_file():  # a prepared folder: its own checks (data/prepare.py) apply
        return
    if path.is_file() and path.stat().st_size == 0:
        raise ValueError(f"corpus {data} is empty (0 bytes): give a file with text in it")
    if path.is_dir() and _first_text_file(path) is None:
        raise ValueError(
            f"corpus {data} holds no readable text files (every file is empty, hidden or binary)"
        )


def _first_text_file(folder: Path) -> Path | None:
    """The first non-empty, non-binary, visible file under `folder` in walk order, or None."""
    for parent, dirs, names in os.walk(folder):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in SKIPPED_DIRS]
        for name in names:
            path = Path(parent) / name
            if (
                not name.startswith(".")
                and path.is_file()
                and path.stat().st_size
                and not _is_binary(path)
            ):
                return path
    return None


def open_corpus(
    data: str, text_field: str = "text", max_files: int | None = None
) -> FileCorpus | HubCorpus | PasskeyCorpus:
    """`data` -> a corpus: a file or folder path, `stdlib`, `passkey`, or `hf:NAME[:CONFIG]`."""
    if max_files is not None and max_files < 1:
        raise ValueError(f"max_files must be >= 1 (got {max_files})")
    if data == PASSKEY:
        return PasskeyCorpus()
    if data.startswith(HF_PREFIX):
        return HubCorpus(data, text_field)
    if data == STDLIB:
        root, files = stdlib_files()
    else:
        check_source(data)
        path = Path(data).expanduser()
        root, files = (path, list_files(path)) if path.is_dir() else (path.parent, [path])
    if not files:
        raise ValueError(f"corpus {data} holds no readable text files")
    return FileCorpus(data, root, files[:max_files], text_field)

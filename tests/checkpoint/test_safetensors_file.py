"""A safetensors file written deterministically (checkpoint/safetensors_file.py): the same
tensors and metadata give the same bytes whatever the metadata's insertion order or the process
(safetensors' own header order is a Rust HashMap's), the tensor data is safetensors' own, and a
header that grows when re-encoded moves the data intact."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from archlab.checkpoint.safetensors_file import save_file_sorted
from tests.conftest import SRC

# 720 orders: a HashMap's order repeats by chance 1 in 720
META = {f"key{i}": f"value {i}" for i in range(6)}


def state() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return {
        "embed.weight": torch.randn(5, 3, generator=gen),
        "norm.weight": torch.randn(3, generator=gen).half(),
        "head.bias": torch.arange(4, dtype=torch.int64),
    }


def header(data: bytes) -> tuple[int, bytes]:
    n = int.from_bytes(data[:8], "little")
    return n, data[8 : 8 + n]


def save_in_subprocess(path: Path, hash_seed: str, order: list[str]) -> bytes:
    code = (
        "import sys, torch, json\nfrom "
        "archlab.checkpoint.safetensors_file import save_file_sorted\n"
        "from tests.checkpoint.test_safetensors_file import META, state\n"
        f"save_file_sorted(state(), sys.argv[1], {{k: META[k] for k in {order!r}}})\n"
    )
    env = {
        **os.environ,
        "PYTHONHASHSEED": hash_seed,
        "PYTHONPATH": os.pathsep.join(
            [str(SRC), str(SRC.parent), os.environ.get("PYTHONPATH", "")]
        ),
    }
    out = subprocess.run(
        [sys.executable, "-c", code, str(path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return path.read_bytes()


def test_same_state_gives_the_same_bytes_in_any_order_and_process(tmp_path: Path) -> None:
    orders = [list(META), list(reversed(META)), ["key3", "key0", "key5", "key1", "key4", "key2"]]
    files = []
    for i, order in enumerate(orders * 2):  # in this process: a new HashMap seed per save
        save_file_sorted(state(), tmp_path / f"here{i}.safetensors", {k: META[k] for k in order})
        files.append((tmp_path / f"here{i}.safetensors").read_bytes())
    files += [
        save_in_subprocess(tmp_path / f"proc{seed}.safetensors", seed, orders[int(seed) % 3])
        for seed in "12"
    ]
    assert all(f == files[0] for f in files)
    n, text = header(files[0])
    assert list(json.loads(text)["__metadata__"]) == sorted(META)  # sorted, not merely stable
    # the control: safetensors alone writes several orders of the same header (why
    # this module exists)
    plain = set()
    for i in range(6):
        save_file(state(), tmp_path / "plain.safetensors", metadata=META)
        plain.add((tmp_path / "plain.safetensors").read_bytes())
    assert len(plain) > 1
    # only the header changed: same length, same tensor data, same tensors and metadata read back
    sample = next(iter(plain))
    assert header(sample)[0] == n and sample[8 + n :] == files[0][8 + n :]
    loaded = load_file(tmp_path / "here0.safetensors")
    assert loaded.keys() == state().keys() and all(
        torch.equal(loaded[k], v) for k, v in state().items()
    )
    with safe_open(tmp_path / "here0.safetensors", framework="pt") as f:
        assert f.metadata() == META


def test_a_header_that_grows_when_re_encoded_moves_the_data_intact(tmp_path: Path) -> None:
    """safetensors writes non-ASCII text raw; the canonical header escapes it (\\u00e9), longer than
    the space the header had: the data moves behind a header padded to a multiple of 8, and the file
    reads back the same."""
    meta = {"note": "é" * 40, "format": "pt"}
    first, second = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    save_file(state(), first, metadata=meta)
    raw_n, _ = header(first.read_bytes())
    save_file_sorted(state(), first, meta)
    save_file_sorted(state(), second, dict(reversed(meta.items())))
    data = first.read_bytes()
    n, text = header(data)
    assert data == second.read_bytes() and n > raw_n and n % 8 == 0 and text.isascii()
    assert not list(tmp_path.glob(".*"))  # the temp file is gone
    loaded = load_file(first)
    assert all(torch.equal(loaded[k], v) for k, v in state().items())
    with safe_open(first, framework="pt") as f:
        assert f.metadata() == meta

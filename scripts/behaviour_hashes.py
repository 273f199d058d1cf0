"""Fingerprints of what archlab computes, to prove a refactoring changed nothing, bit for bit.

Every preset at size tiny, plus configs of the kernel- and block-specific switches (FAVOR+,
Transformer-VQ, GAU, cosine attention, HWFA2 with two full layers, RoPE scalings), the optimizers
the lab's pages train with (AdamW with decayed embeddings, Lion, Tiger with and without its RMS
rate, lazy rows, AdamW tables), BPE data, two threads and the lab's evaluation measures, trains a
few steps on CPU with a fixed seed (one thread unless the case says two); for each the script prints
sha256 prefixes of

- the training losses of every step (metrics.jsonl, as float64 bytes),
- the final checkpoint's tensors: the weights (model.safetensors) and the optimizer state
  (optimizer.pt), by name,
- greedy decoding through the KV cache from the checkpoint (8 new tokens for 2 prompts) and the
  eval-mode logits of one fixed batch of 100 tokens (past the training length 64, the windows
  and ReRoPE's window),
- for a case that prepares its own data (BPE): the prepared
  folder (`data=`, archlab.data.prepare.prepared_hash),
- for a case the lab's measures score (MEASURED): every value and per-item outcome `measure_run`
  gives the run, as `archlab ablate` collects it (`measures=`; the timings aside, which are
  clocks, not computations).

BPE-dropout draws from the `tokenizers` library's own unseeded RNG, so its train tokens differ
at every preparation and a run on them cannot be fingerprinted bitwise: its case (`bpe-dropout`)
prepares the folder only, and its `data=` covers what is deterministic: meta.json's request,
tokenizer.json, val.bin (the plain encoding) and the train split's text decoded back (dropout
changes the segmentation, never the text).

PyTorch, oneDNN and MKL pick kernels per instruction set, so the last bits differ between CPU
classes (the vendor and the instruction set the kernels use, `archlab.train.hardware.cpu_class`:
'GenuineIntel AVX512', 'AuthenticAMD AVX2', ...). A table file holds one table per class, each under
a `# cpu: CLASS` line; `--check` compares with the table of this machine's class only: exit 1 when a
recorded line differs, 2 where the file has no table of this class or no line for a case run (a case
added since: record it with `--record FILE --only CASE` at the base commit on this machine), 0 when
every case run has its recorded line.

The configs are given as flat dotted keys of today's CLI (`model.favor_features`), which
must keep working.

    # print the table
    python scripts/behaviour_hashes.py
    # add (or replace) this CPU class's table in FILE
    python scripts/behaviour_hashes.py --record FILE
    # compare with FILE's table of this CPU class
    python scripts/behaviour_hashes.py --check FILE
    # keep the run folders (and the prepared corpus)
    python scripts/behaviour_hashes.py --keep DIR --only vq
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import struct
import sys
import tempfile
from pathlib import Path

import torch
from safetensors.torch import load_file

from archlab.checkpoint import latest_checkpoint, load_model
from archlab.data.prepare import prepare_data, prepared_hash
from archlab.data.tokens import TokenData
from archlab.infer.generate import generate
from archlab.infer.sampling import SamplingConfig
from archlab.lab import MEASURES, measure_run
from archlab.nn.presets import PRESETS
from archlab.train.config import resolve_config
from archlab.train.hardware import cpu_class
from archlab.train.launch import train

STEPS = 3
COMMON = {
    "size": "tiny",
    "seed": "7",
    "steps": str(STEPS),
    "data.batch_size": "4",
    "data.block_size": "64",
    "precision.threads": "1",
    "optimizer.lr": "3e-3",
    "schedule.warmup_steps": "1",
    "logging.progress": "false",
    "logging.tensorboard": "false",
    "logging.samples": "0",
    "logging.eval_every": "0",
    "logging.log_every": "1",
    "checkpoint.save_every": "0",
}
# name -> dotted keys over COMMON: every preset, then the switches that live outside the presets
CASES: dict[str, dict[str, str]] = {preset: {"preset": preset} for preset in PRESETS}
CASES.update(
    {
        "favor": {"preset": "llama", "model.attn_kernel": "favor", "model.favor_features": "24"},
        "favor-hyperbolic-redraw": {
            "preset": "llama",
            "model.attn_kernel": "favor",
            "model.favor_feature": "hyperbolic",
            "model.favor_orthogonal": "false",
            "model.favor_redraw": "2",
        },
        "vq": {
            "preset": "llama",
            "model.attn_kernel": "vq",
            "model.vq_codes": "16",
            "model.vq_block": "16",
        },
        "vq-soft-alibi": {
            "preset": "llama",
            "model.attn_kernel": "vq",
            "model.vq_codes": "16",
            "model.vq_block": "16",
            "model.vq_assign": "soft",
            "model.vq_tau": "0.5",
            "model.vq_ema": "0.9",
            "model.vq_commit": "0.01",
            "model.vq_cache_grad": "true",
            "model.position": "alibi",
        },
        "gau": {"preset": "llama", "model.block": "gau", "model.n_heads": "1"},
        "gau-relu2": {
            "preset": "llama",
            "model.block": "gau",
            "model.n_heads": "1",
            "model.gau_attention": "relu2",
        },
        "cosine-dynamic": {
            "preset": "llama",
            "model.cosine_attention": "true",
            "model.cosine_scale": "dynamic",
        },
        "hwfa2-two-full": {"preset": "hwfa2", "model.full_layers": "2", "model.n_layers": "3"},
        "yarn": {
            "preset": "llama",
            "model.rope_scaling.kind": "yarn",
            "model.rope_scaling.factor": "2",
            "model.rope_scaling.original_max_seq_len": "64",
        },
        "ntk-mixed": {
            "preset": "llama",
            "model.rope_scaling.kind": "ntk_mixed",
            "model.rope_scaling.factor": "4",
        },
        "inv-leaky-rerope": {
            "preset": "llama",
            "model.rope_scaling.kind": "inv_leaky_rerope",
            "model.rope_scaling.window": "32",
            "model.rope_scaling.factor": "2",
        },
        "dynamic-ntk": {
            "preset": "llama",
            "model.rope_scaling.kind": "dynamic",
            "model.rope_scaling.factor": "2",
            "model.rope_scaling.original_max_seq_len": "16",
        },
        "tied-proj-logn": {
            "preset": "llama",
            "model.tie_embeddings": "true",
            "model.tied_head": "proj",
            "model.attn_logn": "true",
            "model.key_norm": "true",
        },
    }
)
# the optimizers of the optimizer and sign-optimizer-embeddings pages, at their settings (decayed
# embeddings, GPT-2's init, Lion / Tiger at 10x AdamW's decay, Tiger's absolute step), and Tiger's
# default RMS rate
SIGN = {
    "preset": "llama",
    "model.init": "gpt2",
    "optimizer.decay_embeddings": "true",
    "optimizer.lr": "1e-3",
    "optimizer.weight_decay": "2.5",
}
CASES.update(
    {
        "adamw-decay-embeddings": {
            "preset": "llama",
            "model.init": "gpt2",
            "optimizer.decay_embeddings": "true",
            "optimizer.weight_decay": "0.33",
        },
        "lion": {**SIGN, "optimizer.name": "lion"},
        "tiger": {**SIGN, "optimizer.name": "tiger", "optimizer.tiger_rms_lr": "false"},
        "tiger-rms-lr": {**SIGN, "optimizer.name": "tiger"},
        "tiger-lazy": {
            **SIGN,
            "optimizer.name": "tiger",
            "optimizer.tiger_rms_lr": "false",
            "optimizer.lazy_embeddings": "true",
        },
        "tiger-adamw-emb": {
            **SIGN,
            "optimizer.name": "tiger",
            "optimizer.tiger_rms_lr": "false",
            "optimizer.embedding_optimizer": "adamw",
            "optimizer.embedding_weight_decay": "0.25",
        },
        # the lab's `small` shape (d_model 128, 16 x 128 tokens), where two threads split the work
        # (at tiny's shape the ops run on one thread below their grain size), and the same at one
        # thread beside it
        "small-2-threads": {
            "preset": "llama",
            "model.d_model": "128",
            "model.max_seq_len": "128",
            "data.batch_size": "16",
            "data.block_size": "128",
            "precision.threads": "2",
        },
        "small-1-thread": {
            "preset": "llama",
            "model.d_model": "128",
            "model.max_seq_len": "128",
            "data.batch_size": "16",
            "data.block_size": "128",
        },
        "bpe": {"preset": "llama", "data.tokenizer": "bpe", "data.vocab_size": "320"},
        "bpe-dropout": {
            "data.tokenizer": "bpe",
            "data.vocab_size": "320",
            "data.bpe_dropout": "0.1",
        },
        "lab-measures": {"preset": "llama", "checkpoint.keep_initial": "true"},
        "lab-measures-bpe": {
            "preset": "llama",
            "data.tokenizer": "bpe",
            "data.vocab_size": "320",
            "checkpoint.keep_initial": "true",
        },
    }
)
DROPOUT_ONLY = {"bpe-dropout"}  # cases whose data only is fingerprinted (module doc)
# the lab's measures a case's run is scored on (lab/measure.py MEASURES), every one that computes
# (no timing), and the windows of the loss-at-length and accuracy measures
MEASURED = {"lab-measures", "lab-measures-bpe"}
MEASURE_WINDOWS = 2


def corpus(root: Path) -> Path:
    """A prepared byte-level corpus, the same on every machine (words drawn by
    a seeded generator)."""
    words = (
        "def class return import self if else for while in not and or None True print lambda yield"
    ).split()
    gen = torch.Generator().manual_seed(0)
    lines = [
        " ".join(words[i] for i in torch.randint(0, len(words), (8,), generator=gen).tolist())
        for _ in range(2000)
    ]
    (root / "corpus.txt").write_text("\n".join(lines), encoding="utf-8")
    return prepare_data(str(root / "corpus.txt"), root / "data")


def digest(parts: list[bytes]) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()[:16]


def tensor_bytes(name: str, t: torch.Tensor) -> bytes:
    shape = tuple(t.shape)
    t = t.detach().cpu().contiguous().reshape(-1)
    head = f"{name}|{t.dtype}|{shape}|".encode()
    return head + (t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")


def walk(prefix: str, obj: object) -> list[bytes]:
    """Every tensor and plain value of a nested state (dicts sorted by key), with its path."""
    if isinstance(obj, torch.Tensor):
        return [tensor_bytes(prefix, obj)]
    if isinstance(obj, dict):
        return [b for k in sorted(obj, key=str) for b in walk(f"{prefix}.{k}", obj[k])]
    if isinstance(obj, (list, tuple)):
        return [b for i, v in enumerate(obj) for b in walk(f"{prefix}[{i}]", v)]
    return [f"{prefix}={obj!r}".encode()]


def dropout_data(folder: Path) -> str:
    """What a BPE-dropout folder holds deterministically (module doc): its request, tokenizer,
    val.bin and the train split's text."""
    meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    tokens = TokenData(folder)
    text = tokens.tokenizer().decode(tokens.splits["train"].tolist()).encode("utf-8")
    return digest(
        [
            json.dumps(meta["request"], sort_keys=True).encode(),
            (folder / "tokenizer.json").read_bytes(),
            (folder / "val.bin").read_bytes(),
            text,
        ]
    )


def measured(run: Path) -> str:
    """The lab's measures of a finished run (MEASURED), values and per-item
    outcomes, as collected."""
    # clocks aside
    names = [m for m, spec in MEASURES.items() if not spec.timing and m != "norm_time_share"]
    values = measure_run(run, names, MEASURE_WINDOWS)
    assert all(
        values[m] is not None
        for m in (
            "val_loss",
            "bits_per_byte",
            "continuation_acc",
            "embed_drift_rare",
            "acc_8x_plain_rerope",
        )
    ), values
    return digest(walk("m", values))


def fingerprint(name: str, keys: dict[str, str], root: Path) -> dict[str, str]:
    run = root / name
    source = root / "data"
    # a folder of its own, prepared from the corpus as the lab prepares one
    if own_data := "data.tokenizer" in keys:
        source = prepare_data(
            str(root / "corpus.txt"),
            root / f"{name}.data",
            keys["data.tokenizer"],
            int(keys["data.vocab_size"]),
            bpe_dropout=float(keys.get("data.bpe_dropout", 0)),
        )
    if name in DROPOUT_ONLY:
        return {"data": dropout_data(source)}
    train_config, model_config = resolve_config(
        [{**COMMON, **keys, "data.source": str(source), "out": str(run)}]
    )
    train(train_config, model_config)
    rows = [
        json.loads(line)
        for line in (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    losses = [r["loss"] for r in rows if r.get("kind", "train") == "train" and "loss" in r]
    assert len(losses) == STEPS, f"{name}: {len(losses)} losses in metrics.jsonl, want {STEPS}"
    ckpt = latest_checkpoint(run)
    weights = load_file(ckpt / "model.safetensors")
    optimizer = torch.load(ckpt / "optimizer.pt", map_location="cpu", weights_only=False)
    model, _ = load_model(ckpt)
    threads = torch.get_num_threads()
    torch.set_num_threads(train_config.precision.threads or 1)  # decode with the run's threads
    try:
        out = generate(
            model, [[5, 6, 7, 8], [9, 10]], SamplingConfig(max_new_tokens=8, temperature=0.0)
        )
        gen = torch.Generator().manual_seed(1)
        # past every window
        ids = torch.randint(0, model_config.vocab_size, (2, 100), generator=gen)
        with torch.no_grad():
            logits = model.eval()(ids)
    finally:
        torch.set_num_threads(threads)
    found = {
        "losses": digest([struct.pack("<d", float(x)) for x in losses]),
        "weights": digest(walk("w", weights)),
        "optimizer": digest(walk("o", optimizer)),
        "decode": digest([json.dumps(out.tokens).encode(), tensor_bytes("logits", logits)]),
    }
    if own_data:
        found["data"] = prepared_hash(source)[:16]
    if name in MEASURED:
        found["measures"] = measured(run)
    return found


CLASS_LINE = "# cpu: "


def read_tables(text: str) -> dict[str, dict[str, str]]:
    """A table file's tables: CPU class -> case name -> its line. Lines before any `# cpu:` line
    belong to no class and are never compared."""
    tables: dict[str, dict[str, str]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith(CLASS_LINE):
            current = tables.setdefault(line[len(CLASS_LINE) :].strip(), {})
        elif line.strip() and not line.startswith("#") and current is not None:
            current[line.split()[0]] = line
    return tables


def record_table(text: str, cls: str, lines: list[str]) -> str:
    """`text` (a table file) with class `cls`'s table replaced by `lines`, or added at the end;
    every other line (other classes' tables, comments) kept."""
    kept, skipping = [], False
    for line in text.splitlines():
        if line.startswith(CLASS_LINE):
            skipping = line[len(CLASS_LINE) :].strip() == cls
        elif line.startswith("#"):
            skipping = False  # a comment opens the next section
        if not skipping:
            kept.append(line)
    return "".join(f"{line}\n" for line in [*kept, f"{CLASS_LINE}{cls}", *lines])


def compare(
    lines: list[str], tables: dict[str, dict[str, str]], cls: str, source: str
) -> tuple[int, str]:
    """(exit code, message): 0 when every line equals the recorded table of class `cls`, 1 when a
    recorded line differs, 2 when `source` has no table of that class or no line for a case run
    (nothing to compare it with)."""
    if cls not in tables:
        have = ", ".join(tables) or "none"
        return 2, (
            f"{source} has no table for this CPU class ({cls}; it has: {have}): bitwise "
            "fingerprints compare within one class only; record one at the base commit "
            f"with --record {source}"
        )
    want = tables[cls]
    names = [line.split()[0] for line in lines]
    changed = [n for n, line in zip(names, lines) if n in want and want[n] != line]
    unrecorded = [n for n in names if n not in want]
    missing = (
        (
            f"; no line recorded on {cls} for: {', '.join(unrecorded)} (record them at the base "
            f"commit with --record {source} --only {' '.join(unrecorded)})"
        )
        if unrecorded
        else ""
    )
    if changed:
        return 1, f"CHANGED on {cls}: {', '.join(changed)}{missing}"
    if unrecorded:
        return 2, f"unchanged on {cls}: {len(names) - len(unrecorded)} cases{missing}"
    return 0, f"unchanged on {cls}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--check",
        type=Path,
        help="a table file: exit 1 if a line of this CPU class's table differs",
    )
    parser.add_argument(
        "--record", type=Path, help="add or replace this CPU class's table in this file"
    )
    parser.add_argument(
        "--keep", type=Path, help="write the runs here and keep them (default: a temp folder)"
    )
    parser.add_argument("--only", nargs="*", help="these cases only")
    args = parser.parse_args(argv)
    if args.check is not None and not args.check.is_file():
        parser.error(f"--check {args.check}: no such file (make one with --record)")
    logging.disable(logging.WARNING)
    torch.set_num_threads(1)
    names = args.only or list(CASES)
    with tempfile.TemporaryDirectory() as tmp:
        root = args.keep or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        corpus(root)
        lines = []
        for name in names:
            f = fingerprint(name, CASES[name], root)
            lines.append(f"{name:24s} " + " ".join(f"{k}={v}" for k, v in f.items()))
            print(lines[-1], flush=True)
    cls = cpu_class()
    if args.record is not None:
        old = args.record.read_text(encoding="utf-8") if args.record.is_file() else ""
        # --only: the rest kept
        merged = {**read_tables(old).get(cls, {}), **{line.split()[0]: line for line in lines}}
        args.record.write_text(record_table(old, cls, list(merged.values())), encoding="utf-8")
        print(f"recorded the table of {cls} in {args.record}")
    if args.check is None:
        return 0
    code, message = compare(
        lines, read_tables(args.check.read_text(encoding="utf-8")), cls, str(args.check)
    )
    print(message)
    return code


if __name__ == "__main__":
    sys.exit(main())

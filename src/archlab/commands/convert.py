"""`archlab convert`: Hugging Face model folders <-> archlab checkpoints.

    archlab convert --from-hf DIR --out RUN [--dtype bf16]   # RUN/checkpoints/step_0000000
    archlab convert --to-hf CKPT --out DIR [--family llama]  # for transformers' from_pretrained

The HF folder's tokenizer.json (and its chat template) travels both ways (archlab checkpoints always
carry a tokenizer). Export picks the first family that carries every switch of the model, or
`--family`; a model no family expresses is refused with the switches named (see docs/interop.md).

Nothing is overwritten silently: `--from-hf` into a run folder that already holds checkpoints, or
`--to-hf` into a non-empty folder, is refused unless `--force`. With `--force`, `--from-hf` adds the
model as the run's next step (the earlier checkpoints stay) and says so; `--to-hf` replaces the
folder's config and weight files.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from archlab.interop.families import FAMILIES
from archlab.train.lock import LOCK_FILE, RunLock
from archlab.train.resume import checkpoint_step

if TYPE_CHECKING:
    import torch

# checkpoints, weights and from_hf / save_hf import torch: they are imported in the functions that
# convert, so `--help` (the family tables, plain data) answers without it

# --dtype -> the torch dtype's name
DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "convert",
        help="Hugging Face folder <-> archlab checkpoint",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--from-hf", metavar="DIR", help="a Hugging Face folder (config.json + safetensors)"
    )
    source.add_argument("--to-hf", metavar="CKPT", help="an archlab checkpoint or run folder")
    p.add_argument(
        "--out", required=True, help="run folder (--from-hf) or Hugging Face folder (--to-hf)"
    )
    p.add_argument(
        "--dtype",
        default=None,
        help=f"--from-hf: cast weights to {', '.join(DTYPES)} (default: as stored)",
    )
    p.add_argument(
        "--family", default=None, help=f"--to-hf: the model_type to write ({', '.join(FAMILIES)})"
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="write into a folder that is not empty: --from-hf adds a "
        "new step to the run, --to-hf replaces the folder's config and weights",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import torch

    from archlab.checkpoint import load_model, read_checkpoint_config, resolve_checkpoint
    from archlab.interop import save_hf

    if args.dtype is not None and args.dtype not in DTYPES:
        raise ValueError(f"--dtype={args.dtype!r} is not allowed: one of {', '.join(DTYPES)}")
    if args.from_hf:
        source, out = Path(args.from_hf), Path(args.out)
        check_hf_source(source)
        lock = RunLock(out).acquire()  # one writer per run folder (train/lock.py)
        try:
            step = next_step(out, args.force)
            dtype = getattr(torch, DTYPES[args.dtype]) if args.dtype else None
            path = from_hf_folder(source, out, dtype, step)
        except BaseException:
            if lock.created_folder:  # a refused or failed conversion leaves no folder behind
                shutil.rmtree(out, ignore_errors=True)
            raise
        finally:
            lock.release()
        kept = (
            f" (a new step: the run's earlier checkpoints stay, up to step {step - 1})"
            if step
            else ""
        )
        print(f"wrote {path}{kept}")
    else:
        out = Path(args.out)
        stale = check_hf_target(out, args.force)
        model, tokenizer = load_model(args.to_hf)
        chat_template = (
            read_checkpoint_config(resolve_checkpoint(args.to_hf))
            .get("tokenizer", {})
            .get("chat_template")
        )
        # --force: weights of an earlier export would be read beside the new ones
        for file in stale:
            file.unlink()
        save_hf(model, out, tokenizer, family=args.family)
        if chat_template:
            write_chat_template(out, chat_template)
        print(
            f"wrote {out}" + (f" (replaced {len(stale)} earlier weight file(s))" if stale else "")
        )
    return 0


def check_hf_source(folder: Path) -> None:
    """A Hugging Face folder with its tokenizer, not an archlab run (each refusal names what
    to do instead)."""
    from archlab.interop.hf_config import read_hf_config
    from archlab.interop.model_folder import ARCHLAB, model_kind

    if not folder.is_dir():
        raise FileNotFoundError(
            f"--from-hf {folder}: no such folder (a Hugging Face model folder: config.json, "
            "safetensors weights, tokenizer.json)"
        )
    if model_kind(folder) == ARCHLAB:
        raise ValueError(
            f"--from-hf {folder} is an archlab checkpoint, not a Hugging Face folder: "
            "`convert --to-hf` exports it, and train / generate / eval read it as it is"
        )
    if not (folder / "tokenizer.json").is_file():
        raise FileNotFoundError(
            f"{folder / 'tokenizer.json'} is missing: the converted checkpoint needs the model's "
            "tokenizer (an archlab checkpoint always carries one)"
        )
    # a config no family reads is refused here, before the run folder is touched
    read_hf_config(folder)


def next_step(out: Path, force: bool) -> int:
    """The step the converted model gets in run `out`: 0 in a new run, the next one with --force."""
    from archlab.checkpoint import CHECKPOINTS, latest_checkpoint

    latest = latest_checkpoint(out)
    others = (
        sorted(p.name for p in out.iterdir() if p.name not in (LOCK_FILE, CHECKPOINTS))
        if out.is_dir()
        else []
    )
    if (latest is not None or others) and not force:
        what = (
            f"checkpoints up to {latest.name}"
            if latest is not None
            else f"other files ({', '.join(others[:3])})"
        )
        raise ValueError(
            f"--out {out} already holds {what}: choose another --out, or pass --force to add this "
            "model as a new step"
        )
    return 0 if latest is None else checkpoint_step(latest) + 1


def check_hf_target(out: Path, force: bool) -> list[Path]:
    """Refuse a non-empty --to-hf folder without --force; with it, the weight files an export
    would leave stale."""
    entries = sorted(out.iterdir()) if out.is_dir() else []
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {out} is a file: give a folder for the Hugging Face model")
    if entries and not force:
        names = ", ".join(p.name for p in entries[:3]) + (", ..." if len(entries) > 3 else "")
        raise ValueError(
            f"--out {out} is not empty ({names}): choose another folder, or pass --force to "
            "replace its config and weights"
        )
    return [p for p in entries if p.name.endswith((".safetensors", ".safetensors.index.json"))]


def write_chat_template(folder: Path, template: str) -> None:
    """The chat template into tokenizer_config.json, where transformers' tokenizers look for it."""
    file = folder / "tokenizer_config.json"
    config = json.loads(file.read_text(encoding="utf-8")) if file.is_file() else {}
    config["chat_template"] = template
    file.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def read_chat_template(folder: Path) -> str | None:
    """An HF folder's chat template: chat_template.jinja (transformers >= 4.43 writes
    it) or tokenizer_config.json."""
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    file = folder / "tokenizer_config.json"
    template = (
        json.loads(file.read_text(encoding="utf-8")).get("chat_template")
        if file.is_file()
        else None
    )
    return template if isinstance(template, str) else None


def from_hf_folder(folder: Path, out: Path, dtype: torch.dtype | None, step: int = 0) -> Path:
    """An HF folder as checkpoint `step` of run `out`: weights, config, tokenizer (and chat
    template); no optimizer state."""
    from archlab.checkpoint import save_checkpoint
    from archlab.interop.model_folder import open_model

    model, tokenizer = open_model(folder, "--from-hf", dtype)
    config = {"model": model.config.to_dict(), "source": {"hf_folder": str(folder)}}
    # the folder's EOS and stop ids (tokenizer_config.json, generation_config.json): tokenizer.json
    # alone lacks them
    config["tokenizer"] = {"eos_id": tokenizer.eos_id, "stop_ids": sorted(tokenizer.stop_ids)}
    chat_template = read_chat_template(folder)
    if chat_template:
        config["tokenizer"]["chat_template"] = chat_template
    aliases = {"lm_head.weight": "embed_tokens.weight"} if model.config.tie_embeddings else {}
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer_file = tokenizer.save(tmp)
        return save_checkpoint(
            out, step, model.state_dict(), {}, {"step": step}, config, tokenizer_file, aliases
        )

"""`archlab convert`: Hugging Face model folders <-> archlab checkpoints.

    archlab convert --from-hf DIR --out RUN [--dtype bf16]      # RUN/checkpoints/step_0000000, loads anywhere
    archlab convert --to-hf CKPT --out DIR [--family llama]     # a folder transformers' from_pretrained reads

The HF folder's tokenizer.json travels both ways (archlab checkpoints always carry one). Export picks the
first family that carries every switch of the model, or `--family`; a model no family expresses is refused
with the switches named (see docs/interop.md).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch

from archlab.checkpoint import load_model, save_checkpoint
from archlab.interop import from_hf, load_hf_tokenizer, save_hf
from archlab.interop.families import FAMILIES

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("convert", help="Hugging Face folder <-> archlab checkpoint", description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--from-hf", metavar="DIR", help="a Hugging Face folder (config.json + safetensors)")
    source.add_argument("--to-hf", metavar="CKPT", help="an archlab checkpoint or run folder")
    p.add_argument("--out", required=True, help="run folder (--from-hf) or Hugging Face folder (--to-hf)")
    p.add_argument("--dtype", default=None, help=f"--from-hf: cast weights to {', '.join(DTYPES)} (default: as stored)")
    p.add_argument("--family", default=None, help=f"--to-hf: the model_type to write ({', '.join(FAMILIES)})")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.dtype is not None and args.dtype not in DTYPES:
        raise ValueError(f"--dtype={args.dtype!r} is not allowed: one of {', '.join(DTYPES)}")
    if args.from_hf:
        print(f"wrote {from_hf_folder(Path(args.from_hf), Path(args.out), DTYPES.get(args.dtype))}")
    else:
        model, tokenizer = load_model(args.to_hf)
        print(f"wrote {save_hf(model, args.out, tokenizer, family=args.family)}")
    return 0


def from_hf_folder(folder: Path, out: Path, dtype: torch.dtype | None) -> Path:
    """An HF folder as step 0 of run `out`: weights, config and tokenizer; no optimizer state."""
    if not (folder / "tokenizer.json").is_file():
        raise FileNotFoundError(f"{folder / 'tokenizer.json'} is missing: an archlab checkpoint carries its tokenizer")
    tokenizer = load_hf_tokenizer(folder)
    model = from_hf(folder, dtype=dtype)
    config = {"model": model.config.to_dict(), "source": {"hf_folder": str(folder)}}
    aliases = {"lm_head.weight": "embed_tokens.weight"} if model.config.tie_embeddings else {}
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer_file = tokenizer.save(tmp)
        return save_checkpoint(out, 0, model.state_dict(), {}, {"step": 0}, config, tokenizer_file, aliases)

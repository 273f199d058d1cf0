"""`archlab inspect --preset llama --size small [--n_layers 4 ...]`: parameters by part, FLOPs per
token and KV-cache bytes of a configuration, without building the model. `--config FILE` reads a
run's YAML config (the file `archlab train --config` takes: its preset, size and model.* keys,
vocab_size from its tokenizer, as train resolves them); `--checkpoint PATH` reads the config of an
archlab checkpoint (or run folder) or of a Hugging Face folder instead (no weights are read).

Model fields follow as `--FIELD value` or, as `archlab train` spells them, `--model.FIELD value`;
both go through the grammar of archlab/overrides.py, so the same flags give the same ModelConfig
in both commands.

Nothing here imports torch (nn/config/ validates against torch-free name lists, choices.py;
costs.py is arithmetic; `--checkpoint` reads config.json through run_folder.py or
interop/hf_config.py, never the weights), so it answers in a fraction of a second.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

from archlab.costs import DTYPE_BYTES, Report, report
from archlab.nn.config import ModelConfig
from archlab.nn.presets import PRESETS, SIZES, build_preset
from archlab.overrides import load_yaml, parse_flags, typed_overrides
from archlab.train.config import resolve_config

# softmax attention's (FLOPs per token, what the cache holds), as archlab.costs computes them; a
# linear kernel's formulas come with its option group (nn/config/kernels.py)
SOFTMAX_FORMULAS = (
    "4*H*Dh*sum(keys per layer): QK^T + probs@V",
    "windowed layers keep their window",
)
# block="gau"
GAU_FORMULAS = ("2*(s+e)*sum(keys per layer): QK^T over s, A@V over e", "layers*(s+e)*bytes")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "inspect",
        help="parameter count, FLOPs per token and KV-cache bytes of a config",
        description="Any ModelConfig field can follow as --field value or --model.field value "
        "(e.g. --n_kv_heads 1).",
    )
    p.add_argument(
        "--preset",
        default=None,
        help=f"architecture: {', '.join(PRESETS)} (default llama, or the --config file's)",
    )
    p.add_argument(
        "--size",
        default=None,
        help=f"size: {', '.join(SIZES)} (default tiny, or the --config file's)",
    )
    p.add_argument(
        "--config",
        default=None,
        help="a run's YAML config, e.g. configs/tiny-llama.yaml: the model "
        "`archlab train --config` would build from it (flags override it)",
    )
    p.add_argument(
        "--checkpoint",
        default=None,
        help="read the config of an archlab checkpoint / run folder or a Hugging "
        "Face folder instead",
    )
    p.add_argument(
        "--context",
        type=int,
        default=None,
        help="context length for FLOPs and KV bytes (default max_seq_len)",
    )
    p.add_argument("--dtype", default="bf16", help=f"KV-cache dtype: {', '.join(DTYPE_BYTES)}")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(func=run, accepts_overrides=True)


def run(args: argparse.Namespace) -> int:
    flags = {
        key.removeprefix("model."): value for key, value in parse_flags(args.overrides).items()
    }
    if args.checkpoint is not None and (args.config or args.preset or args.size):
        raise ValueError(
            "--checkpoint reads the model from the checkpoint: not with --config, "
            "--preset or --size"
        )
    if args.config is not None:
        named = {
            name: getattr(args, name)
            for name in ("preset", "size")
            if getattr(args, name) is not None
        }
        train, config = resolve_config(
            [load_yaml(args.config), named, {f"model.{k}": v for k, v in flags.items()}]
        )
        args.preset, args.size = f"{Path(args.config).name}: {train.preset}", train.size
    elif args.checkpoint is not None:
        config = checkpoint_config(args.checkpoint).replace(**typed_overrides(ModelConfig, flags))
        args.preset, args.size = Path(args.checkpoint).name, "checkpoint"
    else:
        args.preset, args.size = args.preset or "llama", args.size or "tiny"
        config = build_preset(args.preset, args.size, **typed_overrides(ModelConfig, flags))
    if args.context is not None and args.context < 1:
        raise ValueError(f"--context={args.context} is not allowed: a positive number of tokens")
    r = report(config, args.context, args.dtype)
    if args.json:
        print(
            json.dumps(
                {
                    "config": config.to_dict(),
                    "params": r.params,
                    "flops_per_token": r.flops,
                    "kv_cache_bytes": r.kv,
                    "context": r.context,
                    "dtype": r.dtype,
                },
                indent=2,
            )
        )
    else:
        _print_tables(args.preset, args.size, r)
    return 0


def checkpoint_config(path: str) -> ModelConfig:
    """The ModelConfig of a Hugging Face folder or of an archlab checkpoint / run folder (its
    config.json alone: interop.model_folder)."""
    from archlab.interop.model_folder import find_model

    return find_model(path).config()


def _human(n: float, unit: str = "") -> str:
    for suffix in ("", "K", "M", "G", "T", "P"):
        if abs(n) < 1000:
            return f"{n:.4g}{suffix}{unit}"
        n /= 1000
    return f"{n:.4g}E{unit}"


def _print_tables(preset: str, size: str, r: Report) -> None:
    c = r.config
    console = Console()
    title = (
        f"{preset} / {size}: d_model={c.d_model} n_layers={c.n_layers} heads={c.n_heads} "
        f"kv_heads={c.n_kv_heads} head_dim={c.head_dim} d_ff={c.d_ff} vocab={c.vocab_size}"
    )
    params = Table(title=title, title_justify="left")
    params.add_column("part")
    params.add_column("parameters", justify="right")
    params.add_column("share", justify="right")
    for part, n in r.params.items():
        params.add_row(part, f"{n:,}", f"{100 * n / r.params['total']:.1f}%")
    console.print(params)
    cost = Table(title=f"cost per token at context {r.context}", title_justify="left")
    (
        cost.add_column("quantity"),
        cost.add_column("value", justify="right"),
        cost.add_column("formula"),
    )
    kernel = r.config.linear_kernel
    softmax = kernel is None
    attention, cache = SOFTMAX_FORMULAS if softmax else (kernel.flops_formula, kernel.state_formula)
    per_token = "2*layers*kv_heads*head_dim*bytes" if softmax else "0: a fixed-size state instead"
    if r.config.block == "gau":  # one head: keys s = head_dim wide, values e = d_ff wide
        attention, per_token = GAU_FORMULAS
    cost.add_row("FLOPs forward", _human(r.flops["forward"]), "2*N_matmul + attention")
    cost.add_row(
        "  of which matmuls",
        _human(r.flops["matmul"]),
        f"2*N_matmul, N_matmul={r.flops['matmul'] // 2:,}",
    )
    cost.add_row("  of which attention", _human(r.flops["attention"]), attention)
    cost.add_row("FLOPs training", _human(r.flops["training"]), "3 * forward")
    cost.add_row(f"KV cache / token ({r.dtype})", _human(r.kv["per_token"], "B"), per_token)
    cost.add_row(f"KV cache / {r.context} tokens", _human(r.kv["context"], "B"), cache)
    console.print(cost)

"""Training memory: an estimate from the config, logged before a run starts, and the check that
refuses a run that cannot fit before anything is allocated (train/preflight.py calls both).

    weights      4 bytes x parameters                     (fp32 master weights, also under bf16)
    gradients    4 bytes x trainable parameters
    optimizer    4 bytes x states x trainable parameters  (AdamW 2 states, Lion and Tiger 1)
    activations  bytes per value x micro-batch tokens
                 x (n_layers x (8 d_model + 4 d_ff + 2 kv_width) + 2 d_model)

The activation term counts the tensors a pre-norm block keeps for its backward pass (the norm
outputs, q/k/v, the attention output, the feed-forward's gate, up and product, the residual stream),
about what Korthikanti et al. (arXiv 2205.05198, section 4.1) count per layer without the score
matrix, which SDPA does not keep. It is an estimate, checked against measured peaks in
benchmarks/bench_finetune_memory.py (docs/training.md); the check refuses only runs whose estimate
exceeds what the device has available.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from archlab.nn.config import ModelConfig
from archlab.nn.model import TransformerLM
from archlab.train.config import TrainConfig
from archlab.train.distributed import DistContext
from archlab.train.trainable import lora_parameter_count, trainable_names

OPTIMIZER_STATES = {"adamw": 2, "lion": 1, "tiger": 1}  # fp32 state tensors per trainable parameter
GB = 1e9


def training_bytes(
    config: ModelConfig,
    parameters: int,
    trainable: int,
    micro_batch: int,
    block: int,
    optimizer: str,
    dtype: str,
) -> dict[str, int]:
    """The estimate above, by part, plus `total`."""
    value_bytes = 2 if dtype == "bf16" else 4
    kv_width = 2 * config.n_kv_heads * config.head_dim
    per_token = (
        config.n_layers * (8 * config.d_model + 4 * config.d_ff + kv_width) + 2 * config.d_model
    )
    parts = {
        "weights": 4 * parameters,
        "gradients": 4 * trainable,
        "optimizer": 4 * OPTIMIZER_STATES.get(optimizer, 2) * trainable,
        "activations": value_bytes * micro_batch * block * per_token,
    }
    return parts | {"total": sum(parts.values())}


def available_bytes(device: torch.device) -> int | None:
    """Memory a run could still allocate: free CUDA memory, or the kernel's MemAvailable
    (None if unknown)."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    meminfo = Path("/proc/meminfo")
    if device.type != "cpu" or not meminfo.is_file():
        return None
    for line in meminfo.read_text(encoding="utf-8").splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return None


def describe(parts: dict[str, int]) -> str:
    return (
        f"about {parts['total'] / GB:.2f} GB (weights {parts['weights'] / GB:.2f}, "
        f"gradients {parts['gradients'] / GB:.2f}, optimizer state "
        f"{parts['optimizer'] / GB:.2f}, activations {parts['activations'] / GB:.2f})"
    )


def check_fits(parts: dict[str, int], device: torch.device, available: int | None = None) -> None:
    """One line, before anything is allocated, when the estimate exceeds what `device` has
    available. ARCHLAB_SKIP_MEMORY_CHECK=1 skips it (an estimate can be wrong; swap or unified
    memory may still fit)."""
    available = available_bytes(device) if available is None else available
    if (
        available is None
        or parts["total"] <= available
        or os.environ.get("ARCHLAB_SKIP_MEMORY_CHECK") == "1"
    ):
        return
    raise ValueError(
        f"this run needs {describe(parts)} but {device} has {available / GB:.2f} GB available: "
        "use a smaller model or micro-batch (data.batch_size, optimizer.grad_accum), "
        "--precision.dtype bf16, or --trainable to train part of it (ARCHLAB_SKIP_MEMORY_CHECK=1 "
        "to try anyway)"
    )


def memory_estimate(
    train_config: TrainConfig, model_config: ModelConfig, ctx: DistContext
) -> dict[str, int]:
    """The estimate above for one process of this run, by part (`training_bytes`): from the configs
    alone (the parameters counted on the meta device), so it is known before any data or model."""
    with torch.device("meta"):  # names and sizes only: nothing is allocated
        meta = TransformerLM(model_config)
    sizes = {name: p.numel() for name, p in meta.named_parameters()}
    trainable = (
        lora_parameter_count(meta, train_config.lora_rank, train_config.lora_targets)
        if train_config.lora_rank
        else sum(sizes[n] for n in trainable_names(meta, train_config.trainable))
    )
    d, o = train_config.data, train_config.optimizer
    shards = ctx.world_size if train_config.distributed == "fsdp" else 1
    # adapters add weights
    parameters = sum(sizes.values()) + (trainable if train_config.lora_rank else 0)
    return training_bytes(
        model_config,
        parameters // shards,
        trainable // shards,
        max(1, d.batch_size // (ctx.world_size * o.grad_accum)),
        d.block_size,
        o.name,
        train_config.precision.dtype,
    )

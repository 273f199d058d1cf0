"""Scale-out through PyTorch's own tools: torchrun sets the environment, this file wraps the model.

The model is single-device code; `parallelize` wraps it from outside in a fixed order (torchtitan's
`parallelize_llama`): torch.compile first, then FSDP2 (`fully_shard` on every block, then the root)
or DDP. Process groups use NCCL on GPUs and gloo on CPUs. Checkpoints always hold full, unsharded
state dicts keyed by parameter name (`torch.distributed.checkpoint.state_dict`), so a run saved
under FSDP on 8 GPUs resumes on one CPU and vice versa.

Multi-node: launch the same command on every node with torchrun's rendezvous flags, e.g.
`torchrun --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint HOST:29500 -m archlab
train ...` (docs/training.md).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, fully_shard
from torch.nn.parallel import DistributedDataParallel

from archlab.train.hardware import resolve_device

logger = logging.getLogger(__name__)

FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)  # gathered on rank 0, on the CPU


@dataclass(frozen=True)
class DistContext:
    """Where this process sits: its rank among `world_size` processes and the device
    it computes on."""

    mode: str  # none | ddp | fsdp
    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        """Only rank 0 logs and writes files."""
        return self.rank == 0


def planned_context(mode: str, device: str = "auto") -> DistContext:
    """The context `setup` will give this process (rank, world size, device), without joining the
    process group: what the settings checks need before a source model is loaded."""
    rank, local_rank = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1")) if mode != "none" else 1
    dev = resolve_device(device, local_rank, "precision.device")
    return DistContext(mode, rank, world, local_rank, dev)


def setup(mode: str, device: str = "auto") -> DistContext:
    """Join the process group torchrun described in the environment (or stay a single process)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if mode == "none":
        if world > 1:
            raise ValueError(
                f"launched with {world} processes but distributed='none'; pass --distributed "
                "ddp or fsdp"
            )
        return DistContext("none", 0, 1, 0, resolve_device(device, flag="precision.device"))
    if "RANK" not in os.environ:
        raise ValueError(
            f"--distributed {mode} needs torchrun (RANK/WORLD_SIZE are not set): "
            f"torchrun --nproc-per-node N -m archlab train ... --distributed {mode}; "
            "or pass --distributed none for one process"
        )
    rank, local_rank = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    dev = resolve_device(device, local_rank, "precision.device")
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if dev.type == "cuda" else "gloo")
    return DistContext(mode, rank, world, local_rank, dev)


def teardown(ctx: DistContext) -> None:
    if ctx.mode != "none" and dist.is_initialized():
        dist.destroy_process_group()


def parallelize(model: nn.Module, ctx: DistContext, compile: bool = False) -> nn.Module:
    """The module to call in the training loop: compiled, then sharded (FSDP2) or replicated (DDP).

    FSDP shards `model` in place (its parameters become DTensors, names unchanged) and returns it;
    DDP returns a wrapper whose `.module` is `model`.
    """
    if ctx.mode == "fsdp":
        mesh = init_device_mesh(ctx.device.type, (ctx.world_size,))
        for layer in model.layers:
            if compile:
                layer.compile()  # per block, so FSDP's hooks stay outside the compiled graphs
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)  # the root: embeddings, final norm and head
        return model
    if compile:
        model.compile()  # in place: parameter names (and checkpoints) stay unchanged
    if ctx.mode == "ddp":
        return DistributedDataParallel(
            model, device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None
        )
    return model


@contextmanager
def gradient_sync(model: nn.Module, enabled: bool) -> Iterator[None]:
    """Skip the gradient all-reduce on accumulation micro-steps; only the last one synchronises."""
    if enabled:
        yield
    elif isinstance(model, DistributedDataParallel):
        with model.no_sync():
            yield
    elif isinstance(model, FSDPModule):
        model.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            model.set_requires_gradient_sync(True)
    else:  # a single process has nothing to synchronise
        yield


def all_reduce_sum(tensor: torch.Tensor, ctx: DistContext) -> torch.Tensor:
    """Sum of `tensor` over the ranks (in place); the identity for one process."""
    if ctx.world_size > 1:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def all_gather_objects(obj: object, ctx: DistContext) -> list[object]:
    """`obj` of every rank, in rank order (picklable objects such as RNG states)."""
    if ctx.world_size == 1:
        return [obj]
    out: list[object] = [None] * ctx.world_size
    dist.all_gather_object(out, obj)
    return out


def barrier(ctx: DistContext) -> None:
    if ctx.world_size > 1:
        dist.barrier()


def full_state_dicts(model: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict, dict]:
    """Unsharded model and optimizer state dicts on the CPU, keyed by parameter name.

    Every rank must call this (FSDP gathers the shards); only rank 0 receives the tensors.
    """
    return get_model_state_dict(model, options=FULL), get_optimizer_state_dict(
        model, optimizer, options=FULL
    )


def load_full_state(
    model: nn.Module, optimizer: torch.optim.Optimizer, model_state: dict, optim_state: dict
) -> None:
    """Load full state dicts (as `full_state_dicts` returns them) into a plain or sharded model."""
    options = StateDictOptions(full_state_dict=True)
    set_model_state_dict(model, model_state, options=options)
    set_optimizer_state_dict(model, optimizer, optim_state, options=options)
    # the round trip turns tuple hyperparameters (AdamW's betas) into lists; put back the saved
    # types
    for group, saved in zip(optimizer.param_groups, optim_state.get("param_groups", [])):
        for key, value in saved.items():
            if isinstance(value, tuple) and isinstance(group.get(key), list):
                group[key] = tuple(group[key])

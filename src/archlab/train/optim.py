"""Optimizers and their parameter groups: AdamW, Lion and Tiger, with weight decay on matrices only.

Weight decay pulls weights towards zero; it helps the linear maps of attention and the MLP, but on
norm gains, biases and (usually) embedding rows it only fights the model (GPT-3, LLaMA and PaLM all
decay with 0.1 and skip those). `param_groups` splits a model's parameters by what they are,
counting a tied embedding / head matrix once, and `build_optimizer(model, cfg)` turns the groups
into the one of the `OPTIMIZERS` (train/variants.py) that the `optimizer` section names.

- AdamW: `torch.optim.AdamW` (Loshchilov & Hutter, arXiv 1711.05101), fused on CPU and
  CUDA, foreach elsewhere.
- Lion: sign of an interpolated momentum (Chen et al., arXiv 2302.06675, Algorithm 2). Because every
  coordinate moves by exactly lr, use a 3-10x smaller lr and a 3-10x larger weight decay than AdamW.
- Tiger: Lion with beta1 == beta2, so a single momentum both decides the sign and is stored (Su
  Jianlin, https://kexue.fm/archives/9512), as specified there: beta 0.965, lr scaled by each
  parameter's RMS (rows for embedding tables; half the rate and no decay for gains and biases), the
  NaN guard (train/sign_optim.py).
- Embedding remedies for the sign optimizers (kexue.fm/archives/9736): `lazy_embeddings` (rows with
  an exactly zero gradient are left alone) and `embedding_optimizer="adamw"` (tables stepped by
  AdamW in the same optimizer).

Parameters fall in four groups by what they are (`GROUP_KINDS`): matrices of linear maps (decayed),
tables (embeddings, learned positions, relative-position bias; decayed only with
`decay_embeddings`), norm gains and biases (never decayed). Each group carries its `kind`, which
Tiger's per-parameter rate reads.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import nn
from torch.distributed.tensor import DTensor

from archlab.nn.norms import RMSNorm
from archlab.train.sections import OptimizerConfig
from archlab.train.sign_optim import GROUP_KINDS, Lion, Tiger, _use_foreach
from archlab.train.variants import DEFAULT_BETAS, NAN_SHRINK, OPTIMIZERS

FUSED_ADAMW_DEVICES = ("cpu", "cuda")  # where torch.optim.AdamW(fused=True) has kernels
# default betas, the embedding remedies' names and ratio, Tiger's NaN shrink: train/variants.py
# (torch-free, read by train/sections.py too)


@dataclass(frozen=True)
class ParamGroupNames:
    """Which parameter names go to which group; each Parameter appears once
    (tied weights deduplicated)."""

    decay: list[str]
    no_decay: list[str]


def _classify(module: nn.Module, name: str, param: nn.Parameter, decay_embeddings: bool) -> bool:
    """True when weight decay applies: weight matrices of linear maps (and embeddings if asked).

    Any other matrix is a lookup table (token embedding, learned positions, relative-position bias)
    and counts as an embedding; vectors (norm gains, biases) are never decayed.
    """
    if isinstance(module, nn.Linear) and name == "weight":
        return True
    return param.dim() >= 2 and decay_embeddings


def split_param_names(model: nn.Module, decay_embeddings: bool = False) -> ParamGroupNames:
    """Name the trainable parameters that get weight decay and those that don't.

    A tied head shares its Parameter with the token embedding: the first owner in module order (the
    embedding, registered first) decides its group, and it is listed once under that name.
    """
    decay: list[str] = []
    no_decay: list[str] = []
    seen: set[int] = set()
    for mod_name, module in model.named_modules():
        for p_name, param in module.named_parameters(recurse=False):
            if not param.requires_grad or id(param) in seen:
                continue
            seen.add(id(param))
            full = f"{mod_name}.{p_name}" if mod_name else p_name
            (decay if _classify(module, p_name, param, decay_embeddings) else no_decay).append(full)
    return ParamGroupNames(decay=decay, no_decay=no_decay)


def param_kind(module: nn.Module, name: str, param: nn.Parameter) -> str:
    """One of `GROUP_KINDS`: matrices (linear weights), tables (any other matrix),
    gains (norm weights stored as the gain itself) or biases (every other vector,
    zero-centred gains included)."""
    if isinstance(module, nn.Linear) and name == "weight":
        return "matrices"
    if param.dim() >= 2:
        return "tables"
    if isinstance(module, RMSNorm) and name == "weight" and not module.unit_offset:
        return "gains"
    return "biases"


def param_groups(
    model: nn.Module,
    weight_decay: float,
    decay_embeddings: bool = False,
    embedding_weight_decay: float | None = None,
) -> list[dict]:
    """Up to four optimizer groups `{"params", "weight_decay", "kind"}` in `GROUP_KINDS` order
    (matrices first); an empty group is dropped. A tied head's matrix is counted once, as the
    embedding table. The tables are decayed only with `decay_embeddings`, by
    `embedding_weight_decay` when given, else by `weight_decay`."""
    if embedding_weight_decay is not None and not decay_embeddings:
        raise ValueError(
            f"optimizer.embedding_weight_decay={embedding_weight_decay!r} is not allowed: only "
            "with optimizer.decay_embeddings true (the tables are not decayed)"
        )
    by_kind: dict[str, list[nn.Parameter]] = {kind: [] for kind in GROUP_KINDS}
    seen: set[int] = set()
    for _, module in model.named_modules():
        for p_name, param in module.named_parameters(recurse=False):
            if param.requires_grad and id(param) not in seen:
                seen.add(id(param))
                by_kind[param_kind(module, p_name, param)].append(param)
    table_decay = weight_decay if embedding_weight_decay is None else embedding_weight_decay
    decays = {"matrices": weight_decay, "tables": table_decay if decay_embeddings else 0.0}
    return [
        {"params": params, "weight_decay": decays.get(kind, 0.0), "kind": kind}
        for kind, params in by_kind.items()
        if params
    ]


def adamw(
    groups: list[dict], lr: float, betas: tuple[float, ...], eps: float, **_: object
) -> torch.optim.Optimizer:
    params = [p for g in groups for p in g["params"]]
    plain = _use_foreach(params)
    fused = plain and params[0].device.type in FUSED_ADAMW_DEVICES
    # fused: one pass over each tensor (p, grad, m, v) instead of ~7 elementwise kernels; on CPU
    # torch's foreach AdamW is a per-tensor loop of those kernels, measured 3-10x slower
    # (docs/performance.md)
    return torch.optim.AdamW(
        groups,
        lr=lr,
        betas=betas,
        eps=eps,
        fused=fused or None,
        foreach=(plain and not fused) or None,
    )


def lion(
    groups: list[dict], lr: float, betas: tuple[float, ...], eps: float, **options: object
) -> torch.optim.Optimizer:
    if len(betas) != 2:
        raise ValueError(f"optimizer.betas: lion takes two betas (beta1, beta2), got {list(betas)}")
    return Lion(groups, lr=lr, betas=(betas[0], betas[1]))


def tiger(
    groups: list[dict],
    lr: float,
    betas: tuple[float, ...],
    eps: float,
    *,
    rms_lr: bool = True,
    nan_shrink: float = NAN_SHRINK,
    **_: object,
) -> torch.optim.Optimizer:
    if len(betas) != 1:
        raise ValueError(f"optimizer.betas: tiger takes one beta, got {list(betas)}")
    return Tiger(groups, lr=lr, beta=betas[0], rms_lr=rms_lr, nan_shrink=nan_shrink)


def _embedding_groups(groups: list[dict], cfg: OptimizerConfig) -> list[dict]:
    """Mark the tables group for the embedding remedies (which `OptimizerConfig` allows with the
    sign optimizers only): lazy rows, or AdamW at `embedding_lr_ratio` x the lr."""
    for group in groups:
        if group["kind"] == "tables":
            group["lazy"] = cfg.lazy_embeddings
            if cfg.embedding_optimizer == "adamw":
                group.update(
                    rule="adamw",
                    lr_ratio=cfg.embedding_lr_ratio,
                    adam_betas=DEFAULT_BETAS["adamw"],
                    eps=cfg.eps,
                )
    return groups


def _check_rms_rate(model: nn.Module, groups: list[dict]) -> None:
    """Refuse a matrix that is exactly zero under Tiger's rate lr x RMS(theta): it would
    never move (LoRA's B starts at 0). Sharded tensors are left unchecked: reading them would
    gather every shard."""
    matrices = {id(p) for g in groups if g["kind"] == "matrices" for p in g["params"]}
    for param_name, p in model.named_parameters():
        if (
            id(p) in matrices
            and type(p.data) is torch.Tensor
            and not p.is_meta
            and not bool(p.detach().any())
        ):
            raise ValueError(
                f"optimizer.tiger_rms_lr=True is not allowed here: {param_name} is all zeros, and "
                "Tiger's per-parameter rate lr x RMS(theta) = 0 would never move it (LoRA's B "
                "starts at 0); set optimizer.tiger_rms_lr false (rms_lr=False)"
            )


def build_optimizer(model: nn.Module, cfg: OptimizerConfig) -> torch.optim.Optimizer:
    """The optimizer `cfg` names over `param_groups(model, ...)`, its betas the section's (resolved
    to `DEFAULT_BETAS[name]` when unset). The embedding remedies act on the tables group and
    `embedding_weight_decay` sets its decay; `tiger_rms_lr` / `tiger_nan_shrink` are Tiger's. Each
    group's lr is the schedule's lr times its `lr_ratio` (1 except a mixed optimizer's tables).
    The section checked its own values; what needs the model (a matrix Tiger's rate cannot move)
    is refused here."""
    groups = _embedding_groups(
        param_groups(model, cfg.weight_decay, cfg.decay_embeddings, cfg.embedding_weight_decay),
        cfg,
    )
    if cfg.name == "tiger" and cfg.tiger_rms_lr:
        _check_rms_rate(model, groups)
    optimizer = OPTIMIZERS[cfg.name].build_function()(
        groups,
        cfg.lr,
        tuple(cfg.betas),
        cfg.eps,
        rms_lr=cfg.tiger_rms_lr,
        nan_shrink=cfg.tiger_nan_shrink,
    )
    set_lr(optimizer, cfg.lr)
    return optimizer


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Give every group the schedule's lr times its `lr_ratio` (the trainer calls
    this each step)."""
    for group in optimizer.param_groups:
        group["lr"] = lr * group.get("lr_ratio", 1.0)


def clip_gradients(parameters: Iterable[torch.Tensor], max_norm: float) -> float:
    """Scale all gradients together so their global L2 norm is at most `max_norm`; return
    the norm before.

    max_norm 0 turns clipping off but still measures the norm (for the logs). Under FSDP the norm is
    reduced over the shards, so every rank gets the same number.
    """
    norm = torch.nn.utils.clip_grad_norm_(list(parameters), max_norm if max_norm > 0 else math.inf)
    return float(norm.full_tensor() if isinstance(norm, DTensor) else norm)

"""Which parameters a run trains: `--trainable PATTERN[,PATTERN...]` over parameter names.

    archlab train --init-from DIR --trainable 'layers.2[89].*,norm.*'  # last 2 layers, final norm
    archlab train --init-from FOLDER --trainable '*.attn.*'                  # attention only

Every parameter whose name (as `model.named_parameters()` gives it: `layers.0.attn.qkv_proj.weight`,
...) matches one pattern (`fnmatch`) trains; the rest are frozen (`requires_grad=False`): they get
no gradient and no optimizer state, which is where a partial fine-tune saves memory (train/memory.py
estimates it). A tied head is the embedding matrix, named `embed_tokens.weight`. A pattern that
matches nothing is refused with example names.

LoRA (`--lora_rank r`, Hu et al., arXiv 2106.09685): each targeted linear map computes `W x + (alpha
/ r) B A x` with W frozen, A (r x in) drawn from the run's seed and B (out x r) zero at step 0. A
checkpoint's model.safetensors holds the merged `W + (alpha / r) B A` under the plain names
(`merged_state`: loads anywhere without peft); its state.pt holds the unmerged A and B
(`adapter_state`) and its manifest the sha256 of the frozen base (`base_digest`), so `--resume`
rebuilds the base from the run's source, checks it is bitwise the one trained on, and puts the
adapters back (`unmerged_state`): the resumed run continues exactly.
"""

from __future__ import annotations

import hashlib
from fnmatch import fnmatchcase

import torch
from torch import nn


def trainable_names(model: nn.Module, patterns: tuple[str, ...]) -> list[str]:
    """Names of the parameters that train under `patterns` (all of them when there are none)."""
    names = [name for name, _ in model.named_parameters()]
    if not patterns:
        return names
    for pattern in patterns:
        if not any(fnmatchcase(name, pattern) for name in names):
            examples = ", ".join(names[:2] + names[-2:])
            raise ValueError(
                f"trainable={','.join(patterns)!r} is not allowed: {pattern!r} matches no "
                f"parameter (names look like {examples})"
            )
    return [name for name in names if any(fnmatchcase(name, p) for p in patterns)]


def freeze_all_but(model: nn.Module, patterns: tuple[str, ...]) -> int:
    """Freeze every parameter not matched by `patterns`; returns how many parameter
    values still train."""
    keep = set(trainable_names(model, patterns))
    count = 0
    for name, param in model.named_parameters():
        param.requires_grad_(name in keep)
        count += param.numel() if name in keep else 0
    return count


def select_trainable(
    model: nn.Module,
    patterns: tuple[str, ...],
    lora_rank: int,
    lora_alpha: float,
    lora_targets: tuple[str, ...],
) -> str | None:
    """Apply `--trainable` or `--lora_rank` to `model` (before wrapping); the line to log, None
    if all train."""
    if not patterns and not lora_rank:
        return None
    total = sum(p.numel() for p in model.parameters())
    if lora_rank:
        count = add_lora(model, lora_rank, lora_alpha, lora_targets)
        frozen = f"the model's {total:,} are frozen"
        return f"training {count:,} LoRA parameters (rank {lora_rank}); {frozen}"
    count = freeze_all_but(model, patterns)
    return f"training {count:,} of {total:,} parameters (trainable={','.join(patterns)})"


LORA_KEYS = (".lora_A.", ".lora_B.", ".lora_dropout.", ".lora_embedding_")


def add_lora(model: nn.Module, rank: int, alpha: float, targets: tuple[str, ...]) -> int:
    """LoRA adapters (Hu et al., arXiv 2106.09685) on the linear layers named by `targets`
    (module-name suffixes, e.g. qkv_proj), through peft's `inject_adapter_in_model`; every other
    parameter is frozen. Returns the number of adapter parameters. B starts at zero, so the model
    computes exactly what it did before."""
    from peft import LoraConfig, inject_adapter_in_model  # only a LoRA run needs peft

    config = getattr(model, "config", None)
    if (
        config is not None
        and config.block == "parallel"
        and getattr(config, "parallel_fused", False)
    ):
        raise ValueError(
            "lora_rank with the fused parallel block is not allowed: its fused GEMM reads the "
            "weights directly and would skip the adapters; add --model.parallel_fused false"
        )
    present = {
        name.rsplit(".", 1)[-1] for name, m in model.named_modules() if isinstance(m, nn.Linear)
    }
    wanted = [t for t in targets if t in present]
    if not wanted:
        raise ValueError(
            f"lora_targets={','.join(targets)!r} is not allowed: no linear layer has these names "
            f"(this model has {', '.join(sorted(present))})"
        )
    inject_adapter_in_model(
        LoraConfig(r=rank, lora_alpha=alpha, target_modules=wanted, lora_dropout=0.0), model
    )
    count = 0
    for name, param in model.named_parameters():
        param.requires_grad_(".lora_" in name)
        count += param.numel() if ".lora_" in name else 0
    return count


def lora_parameter_count(model: nn.Module, rank: int, targets: tuple[str, ...]) -> int:
    """Adapter parameters `add_lora` would add: rank x (in + out) per targeted linear layer."""
    return sum(
        rank * (m.in_features + m.out_features)
        for name, m in model.named_modules()
        if isinstance(m, nn.Linear) and name.rsplit(".", 1)[-1] in targets
    )


def merged_state(state: dict, rank: int, alpha: float) -> dict:
    """A LoRA model's state dict as the plain model's: W + (alpha / rank) B A under the layer's own
    name, so the checkpoint loads anywhere (generate, eval, convert) without peft."""
    out = {}
    scale = alpha / rank
    for key, tensor in state.items():
        if any(k in key for k in LORA_KEYS):
            continue
        if ".base_layer." in key:
            prefix, leaf = key.split(".base_layer.")
            if leaf == "weight":
                a, b = (
                    state[f"{prefix}.lora_A.default.weight"],
                    state[f"{prefix}.lora_B.default.weight"],
                )
                tensor = tensor + scale * (b.float() @ a.float()).to(tensor.dtype)
            key = f"{prefix}.{leaf}"
        out[key] = tensor
    return out


def base_digest(model: nn.Module) -> str:
    """sha256 of a model's state dict (each tensor's name, dtype, shape and bytes, in name order):
    the identity of the frozen base a LoRA run trains on, computed once at setup and recorded in
    every checkpoint's manifest."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        flat = tensor.detach().to("cpu").contiguous().reshape(-1)
        digest.update(f"{name}|{flat.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(flat.view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def adapter_state(state: dict) -> dict:
    """The adapter tensors (lora_A, lora_B) of a LoRA model's state dict, unmerged,
    under peft's names."""
    return {key: tensor for key, tensor in state.items() if any(k in key for k in LORA_KEYS)}


def unmerged_state(model: nn.Module, adapters: dict) -> dict:
    """The state dict of the LoRA model `model` with its base as it is and the adapters from
    `adapters` (what a checkpoint's `adapter_state` saved); `check_weights_fit` then names any
    adapter that is missing or misshaped."""
    base = {
        key: tensor
        for key, tensor in model.state_dict().items()
        if not any(k in key for k in LORA_KEYS)
    }
    return {**base, **adapters}


def check_merged(state: dict, merged: dict, rank: int, alpha: float, where: object) -> None:
    """Refuse a LoRA checkpoint whose merged weights are not base + (alpha / rank) B A of the base
    and the adapters a resume puts back (the computation `merged_state` did when it was saved), to a
    few units in the last place of the weights' dtype: another CPU may round the product B A
    differently, a wrong base is far off."""
    again = merged_state(state, rank, alpha)
    differ = sorted(
        k
        for k in again.keys() | merged.keys()
        if k not in again or k not in merged or not _close(again[k], merged[k])
    )
    if differ:
        raise ValueError(
            f"--resume: checkpoint {where}: its merged weights differ from base + (alpha/r) B A "
            f"of the rebuilt base and its adapters at {', '.join(differ[:3])}: not the base it "
            "was trained on"
        )


def _close(a: torch.Tensor, b: torch.Tensor, ulps: float = 4.0) -> bool:
    """a and b agree within `ulps` units of b's dtype at the scale of b's largest entry."""
    if a.shape != b.shape:
        return False
    if not b.is_floating_point():
        return torch.equal(a, b)
    eps = torch.finfo(b.dtype).eps * ulps
    scale = float(b.abs().max()) if b.numel() else 0.0
    return torch.allclose(a.float(), b.float(), rtol=eps, atol=eps * scale)

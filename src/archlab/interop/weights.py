"""Tensors between a Hugging Face state dict and ours, driven by a family's `weights` table.

`plan` resolves the table against a built model: for each of our parameters, the concrete HF keys
and the rule that joins them (see `family.py` for the rule kinds). `load_state` checks the whole
folder against the plan from the safetensors headers (missing, unexpected, wrong shape, not a float)
before reading any tensor, then reads one parameter at a time, so peak memory stays near one copy of
the weights. `export_state` is the inverse, for `save_hf`.
"""

from __future__ import annotations

import re

import torch

from archlab.interop.family import Family, InteropError, Rule
from archlab.interop.folder import HFFolder
from archlab.nn.config import ModelConfig
from archlab.nn.model import TransformerLM

LAYER = re.compile(r"^layers\.(\d+)\.")


def plan(model: TransformerLM, family: Family) -> dict[str, tuple[Rule, tuple[str, ...]]]:
    """Our parameter name -> (rule, its HF keys), for every parameter the model owns (a
    tied head once)."""
    out = {}
    for name in _own_parameters(model):
        layer = LAYER.match(name)
        template = LAYER.sub("layers.{i}.", name)
        rule = family.weights.get(template)
        if rule is None:
            raise InteropError(
                f"model_type {family.model_type!r} has no tensor for our parameter {name!r}"
            )
        out[name] = (rule, tuple(s.format(i=layer.group(1) if layer else "") for s in rule.sources))
    return out


def _own_parameters(model: TransformerLM) -> list[str]:
    tied = {"lm_head.weight"} if model.config.tie_embeddings else set()
    return [name for name, _ in model.named_parameters() if name not in tied]


def source_shapes(rule: Rule, shape: tuple[int, ...], c: ModelConfig) -> list[tuple[int, ...]]:
    """The shapes the HF tensors of `rule` must have for our parameter of `shape`."""
    match rule.kind:
        case "copy" | "neox_qkv":
            return [shape]
        case "conv1d":
            return [tuple(reversed(shape))]
        case "fuse_qkv":
            return [(n, *shape[1:]) for n in _qkv_sizes(c)]
        case "fuse_gate_up":
            return [(shape[0] // 2, *shape[1:])] * 2
    return []  # zero: nothing stored


def _qkv_sizes(c: ModelConfig) -> list[int]:
    return [c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim, c.n_kv_heads * c.head_dim]


def to_ours(
    rule: Rule, tensors: list[torch.Tensor], shape: tuple[int, ...], c: ModelConfig
) -> torch.Tensor:
    """Join the HF tensors of one rule into our parameter."""
    match rule.kind:
        case "copy":
            return tensors[0]
        case "conv1d":
            return tensors[0].t().contiguous()
        case "fuse_qkv" | "fuse_gate_up":
            return torch.cat(tensors, dim=0)
        case "neox_qkv":  # per head [q_h | k_h | v_h] -> [q | k | v]
            t = tensors[0]
            return t.view(c.n_heads, 3, c.head_dim, *t.shape[1:]).transpose(0, 1).reshape(t.shape)
    return torch.zeros(shape)


def to_hf(rule: Rule, t: torch.Tensor, c: ModelConfig) -> list[torch.Tensor]:
    """Our parameter split into the HF tensors of one rule (the inverse of `to_ours`)."""
    match rule.kind:
        case "copy":
            return [t]
        case "conv1d":
            return [t.t()]
        case "fuse_qkv":
            return list(t.split(_qkv_sizes(c)))
        case "fuse_gate_up":
            return list(t.chunk(2))
        case "neox_qkv":
            return [t.view(3, c.n_heads, c.head_dim, *t.shape[1:]).transpose(0, 1).reshape(t.shape)]
    return []


def _resolve(folder: HFFolder, key: str, family: Family) -> str:
    """`key`, or the name a saved file uses for it: an alias of the head (NeoX writes lm_head.weight
    as embed_out.weight), the key under another prefix of the family's (`Family.key_aliases`), or
    the key without the base model's prefix (the original GPT-2 files)."""
    if key in folder.keys():
        return key
    if key == "lm_head.weight":
        return next((a for a in family.head_aliases if a in folder.keys()), key)
    for prefix, other in family.key_aliases:
        if key.startswith(prefix) and other + key.removeprefix(prefix) in folder.keys():
            return other + key.removeprefix(prefix)
    prefix = family.base_prefix
    if prefix and key.startswith(prefix) and key.removeprefix(prefix) in folder.keys():
        return key.removeprefix(prefix)
    return key


def check_folder(
    folder: HFFolder, family: Family, model: TransformerLM
) -> dict[str, tuple[Rule, tuple[str, ...]]]:
    """The plan with aliases resolved, after checking every key, shape and dtype
    against the headers."""
    shapes = {name: tuple(p.shape) for name, p in model.named_parameters()}
    resolved, used = {}, set()
    for name, (rule, keys) in plan(model, family).items():
        keys = tuple(_resolve(folder, k, family) for k in keys)
        for key, want in zip(keys, source_shapes(rule, shapes[name], model.config)):
            if key not in folder.keys():
                raise InteropError(
                    f"{folder.where(key)}: {key!r} is missing (model_type {family.model_type!r} "
                    f"needs it for {name})"
                )
            if folder.shape(key) != want:
                raise InteropError(
                    f"{folder.where(key)}: {key!r} has shape {list(folder.shape(key))}, the "
                    f"config says {list(want)}"
                )
            folder.dtype(key)
        used |= set(keys)
        resolved[name] = (rule, keys)
    ignore = [re.compile(p) for p in family.ignore]
    # some files store the tied head as well; transformers ties it anyway
    if model.config.tie_embeddings:
        used |= {"lm_head.weight", *family.head_aliases}
    unexpected = sorted(k for k in folder.keys() - used if not any(p.search(k) for p in ignore))
    if unexpected:
        raise InteropError(
            f"{folder.where(unexpected[0])}: unexpected key {unexpected[0]!r} (model_type "
            f"{family.model_type!r} with this config has no such tensor)"
        )
    return resolved


def load_state(
    folder: HFFolder,
    family: Family,
    model: TransformerLM,
    dtype: torch.dtype | None,
    device: torch.device,
) -> dict[str, torch.Tensor]:
    """Our state dict from a checked folder: one parameter at a time, cast to `dtype`
    (None: as stored)."""
    resolved = check_folder(folder, family, model)
    if dtype is None:  # as stored: the embedding's dtype (a file mixing dtypes is cast to it)
        dtype = folder.dtype(resolved["embed_tokens.weight"][1][0])
    shapes = {name: tuple(p.shape) for name, p in model.named_parameters()}
    state = {}
    for name, (rule, keys) in resolved.items():
        stored = [folder.get(k) for k in keys]
        tensor = to_ours(rule, [t.to(dtype) for t in stored], shapes[name], model.config).to(
            device, dtype
        )
        if any(tensor.data_ptr() == t.data_ptr() for t in stored):
            # safetensors hands out views of its memory map: a parameter left on it would die with a
            # bus error when the file is rewritten (save_hf into the same folder), so it gets its
            # own memory
            tensor = tensor.clone()
        state[name] = tensor
    return state


def export_state(model: TransformerLM, family: Family) -> dict[str, torch.Tensor]:
    """The model's weights under the family's HF names; a `zero` rule's parameter must
    be all zeros."""
    c, params = model.config, dict(model.named_parameters())
    out = {}
    for name, (rule, keys) in plan(model, family).items():
        t = params[name].detach()
        if rule.kind == "zero" and bool(t.any()):
            raise InteropError(
                f"{name} is non-zero, and model_type {family.model_type!r} has no such tensor "
                f"(export to a family that has it, or zero it)"
            )
        for key, part in zip(keys, to_hf(rule, t, c)):
            out[family.export_head if key == "lm_head.weight" and family.export_head else key] = (
                part
            )
    return out

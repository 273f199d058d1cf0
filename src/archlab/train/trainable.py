"""Which parameters a run trains: `--trainable PATTERN[,PATTERN...]`, shell-style patterns of parameter names.

    archlab train --init-from FOLDER --trainable 'layers.2[89].*,norm.*'     # the last two layers and the final norm
    archlab train --init-from FOLDER --trainable '*.attn.*'                  # attention only

Every parameter whose name (as `model.named_parameters()` gives it: `layers.0.attn.qkv_proj.weight`, ...) matches
one pattern (`fnmatch`) trains; the rest are frozen (`requires_grad=False`): they get no gradient and no optimizer
state, which is where a partial fine-tune saves memory (train/memory.py estimates it). A tied head is the embedding
matrix, named `embed_tokens.weight`. A pattern that matches nothing is refused with example names.
"""

from __future__ import annotations

from fnmatch import fnmatchcase

from torch import nn


def trainable_names(model: nn.Module, patterns: tuple[str, ...]) -> list[str]:
    """Names of the parameters that train under `patterns` (all of them when there are none)."""
    names = [name for name, _ in model.named_parameters()]
    if not patterns:
        return names
    for pattern in patterns:
        if not any(fnmatchcase(name, pattern) for name in names):
            examples = ", ".join(names[:2] + names[-2:])
            raise ValueError(f"trainable={','.join(patterns)!r} is not allowed: {pattern!r} matches no parameter "
                             f"(names look like {examples})")
    return [name for name in names if any(fnmatchcase(name, p) for p in patterns)]


def freeze_all_but(model: nn.Module, patterns: tuple[str, ...]) -> int:
    """Freeze every parameter not matched by `patterns`; returns how many parameter values still train."""
    keep = set(trainable_names(model, patterns))
    count = 0
    for name, param in model.named_parameters():
        param.requires_grad_(name in keep)
        count += param.numel() if name in keep else 0
    return count

"""A model's weights: model.safetensors written with a tied head once and read with its aliases
filled back in; weights checked against a config, and the model built around them on the meta
device (never randomly initialised first); the training state modules keep outside their tensors.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file
from torch import nn

from archlab.checkpoint.safetensors_file import save_file_sorted
from archlab.nn.config import ModelConfig
from archlab.nn.model import TransformerLM
from archlab.run_folder import CheckpointError


def tied_aliases(module: nn.Module) -> dict[str, str]:
    """{alias: canonical name} for parameters registered under several names (a tied lm_head)."""
    first: dict[int, str] = {}
    aliases: dict[str, str] = {}
    for name, param in module.named_parameters(remove_duplicate=False):
        if id(param) in first:
            aliases[name] = first[id(param)]
        else:
            first[id(param)] = name
    return aliases


def save_weights(file: Path, model_state: dict[str, torch.Tensor], aliases: dict[str, str]) -> None:
    """model.safetensors without the aliases' copies; its bytes depend on the state alone (sorted
    header), so a resumed run's file hashes like the uninterrupted run's."""
    weights = {
        k: v.detach().to("cpu").contiguous() for k, v in model_state.items() if k not in aliases
    }
    save_file_sorted(weights, file, {"tied": json.dumps(aliases, sort_keys=True), "format": "pt"})


def load_weights(path: Path) -> dict[str, torch.Tensor]:
    """The full state dict from model.safetensors, with tied aliases filled back in."""
    file = path / "model.safetensors"
    try:
        weights = load_file(file)
        with safe_open(file, framework="pt") as handle:
            aliases = json.loads((handle.metadata() or {}).get("tied", "{}"))
    except (SafetensorError, OSError, json.JSONDecodeError) as err:
        raise CheckpointError(
            f"checkpoint {path} is corrupt: model.safetensors cannot be read ({err})"
        ) from err
    for alias, canonical in aliases.items():
        weights[alias] = weights[canonical]
    return weights


def module_training_state(model: nn.Module) -> dict[str, dict]:
    """Per module, the training state it keeps outside its tensors (`training_state()`:
    FAVOR+'s count of training forwards, which decides its redraws), for state.pt;
    restored through `load_training_state`."""
    return {
        name: m.training_state()
        for name, m in model.named_modules()
        if hasattr(m, "training_state")
    }


def build_model(
    config: ModelConfig,
    weights: dict[str, torch.Tensor],
    device: str | torch.device = "cpu",
    path: Path | None = None,
    training_state: dict[str, dict] | None = None,
) -> TransformerLM:
    """The model of `config` holding `weights`, without a random init that the
    weights would overwrite.

    Built on the meta device, the weights become its parameters (cast to the dtype the model
    is built in, float32 unless changed, as load_state_dict would); the computed buffers (RoPE
    tables, ALiBi slopes) are then made on `device`. For a SmolLM2-135M-shaped checkpoint the
    random init was over half of the load time (docs/inference.md). `path` names the checkpoint
    in a misfit's message. `training_state` (`module_training_state` of the model the weights
    come from, or a checkpoint's state.pt "modules") puts back what lives outside the tensors: a
    FAVOR+ layer trained with `favor_redraw` then uses the projection its training reached, not its
    seed's first draw.
    """
    with torch.device("meta"):
        model = TransformerLM(config)
    check_weights_fit(model, weights, path or Path("(weights)"))
    device = torch.device(device)
    expected = model.state_dict()
    state = {k: weights[k].to(device=device, dtype=expected[k].dtype) for k in expected}
    model.load_state_dict(state, assign=True)
    if config.tie_embeddings:  # assign gave the head its own Parameter object: tie it again
        model.lm_head.weight = model.embed_tokens.weight
    model.materialise_buffers(device)
    for name, state in (training_state or {}).items():
        module = model.get_submodule(name)
        if hasattr(module, "load_training_state"):
            module.load_training_state(state)
    return model


def check_weights_fit(model: nn.Module, weights: dict[str, torch.Tensor], path: Path) -> None:
    """Every tensor the model expects, with its shape, and nothing else; one line naming
    the first misfit."""
    expected = model.state_dict()
    missing = [k for k in expected if k not in weights]
    unexpected = [k for k in weights if k not in expected]
    if missing or unexpected:
        raise CheckpointError(
            f"checkpoint {path}: model.safetensors does not fit config.json: missing "
            f"{missing[:3]}, unexpected {unexpected[:3]}"
        )
    for name, tensor in expected.items():
        if tuple(weights[name].shape) != tuple(tensor.shape):
            raise CheckpointError(
                f"checkpoint {path}: {name} is {list(weights[name].shape)} in model.safetensors "
                f"but config.json builds {list(tensor.shape)}"
            )

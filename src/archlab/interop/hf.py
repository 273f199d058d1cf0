"""`from_hf` and `save_hf`: Hugging Face model folders in and out of archlab, with their tokenizer.

    model = from_hf("path/to/Llama-3.2-1B", dtype=torch.bfloat16)     # config.json + safetensors
    save_hf(model, "out/", tokenizer=tok)                               # loads in transformers

Loading builds the model on the meta device and assigns each converted tensor as its parameter, so
the weights exist once (plus one parameter in flight), read from memory-mapped safetensors. Saving
picks the first family in `FAMILIES` that carries every switch of the config (or the one asked for),
and otherwise names the switches that have no Hugging Face equivalent instead of writing a file that
computes something else.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.nn as nn

from archlab.data.tokenizer import Tokenizer
from archlab.interop.families import FAMILIES, READ_ONLY
from archlab.interop.family import Family, InteropError
from archlab.interop.folder import HFFolder, write_folder
from archlab.interop.hf_config import config_diff, config_from_hf, config_to_hf, family_of
from archlab.interop.weights import export_state, load_state
from archlab.nn.config import ModelConfig
from archlab.nn.model import TransformerLM

DTYPE_NAMES = {
    torch.float32: "float32",
    torch.bfloat16: "bfloat16",
    torch.float16: "float16",
    torch.float64: "float64",
}


def from_hf(
    path: str | Path, dtype: torch.dtype | None = None, device: str | torch.device = "cpu"
) -> TransformerLM:
    """The model of a Hugging Face folder (eval mode), weights as stored or cast to
    `dtype`, on `device`."""
    folder = HFFolder(path)
    family = family_of(folder.config)
    config = config_from_hf(folder.config, family)
    with torch.device("meta"):
        model = TransformerLM(config)
    device = torch.device(device)
    _assign(model, load_state(folder, family, model, dtype, device), device)
    return model.eval()


def _assign(model: TransformerLM, state: dict[str, torch.Tensor], device: torch.device) -> None:
    """Make the loaded tensors the parameters (no copy), re-tie the head, and compute the
    buffers on `device`."""
    for name, tensor in state.items():
        owner, _, leaf = name.rpartition(".")
        model.get_submodule(owner)._parameters[leaf] = nn.Parameter(tensor)
    if model.config.tie_embeddings:
        model.lm_head.weight = model.embed_tokens.weight
    model.materialise_buffers(device)


def pick_family(config: ModelConfig, name: str | None = None) -> Family:
    """The family to export `config` as: `name`, or the first in FAMILIES that
    carries every switch."""
    if name is not None:
        if name in READ_ONLY:
            raise InteropError(
                f"model_type {name!r} is read only ({READ_ONLY[name].architecture} has parts "
                f"archlab does not model): export one of {', '.join(FAMILIES)}"
            )
        family = family_of({"model_type": name})
        diff = config_diff(config, family)
        if diff:
            raise InteropError(f"model_type {name!r} cannot express this model: {'; '.join(diff)}")
        return family
    diffs = {mt: config_diff(config, f) for mt, f in FAMILIES.items()}
    exact = next((mt for mt, d in diffs.items() if not d), None)
    if exact is not None:
        return FAMILIES[exact]
    closest = min(diffs, key=lambda mt: len(diffs[mt]))
    raise InteropError(
        f"no Hugging Face family expresses this model; the closest, {closest!r}, has no equivalent "
        f"of {'; '.join(diffs[closest])}"
    )


def save_hf(
    model: TransformerLM,
    path: str | Path,
    tokenizer: Tokenizer | None = None,
    family: str | None = None,
) -> Path:
    """Write `model` as a Hugging Face folder that transformers' AutoModelForCausalLM loads with the
    same logits: config.json, model.safetensors, and the tokenizer files when given."""
    chosen = pick_family(model.config, family)
    hf_config, _ = config_to_hf(model.config, chosen)
    # before writing anything: a refused tensor leaves no folder
    tensors = export_state(model, chosen)
    hf_config["dtype"] = DTYPE_NAMES.get(model.embed_tokens.weight.dtype, "float32")
    # the EOS first, then the other ids that stop
    if tokenizer is not None and tokenizer.eos_id is not None:
        hf_config["eos_token_id"] = (
            [tokenizer.eos_id, *sorted(tokenizer.stop_ids - {tokenizer.eos_id})]
            if len(tokenizer.stop_ids) > 1
            else tokenizer.eos_id
        )
    path = Path(path)
    write_folder(path, hf_config, tensors)
    if tokenizer is not None:
        tokenizer.save(path)
    return path


def hf_state_dict(model: TransformerLM, model_type: str = "llama") -> dict[str, torch.Tensor]:
    """The model's weights under the state-dict names of `model_type`'s transformers class (views of
    ours, not copies), for loading into a model built from its config class. Only the weight layout
    is checked: RoPE scaling and lengths are the caller's to put in that config."""
    family = family_of({"model_type": model_type})
    config = model.config
    unscaled = config.replace(rope={"scaling": None}) if config.rope is not None else config
    diff = config_diff(unscaled, family)
    if diff:
        raise InteropError(
            f"hf_state_dict: this model is not {model_type}-shaped; it has {'; '.join(diff)}"
        )
    return export_state(model, family)


def load_hf_tokenizer(path: str | Path) -> Tokenizer:
    """The folder's tokenizer.json; EOS from tokenizer_config.json, else generation_config.json /
    config.json; every `eos_token_id` those two name (an int or a list, as Llama 3's three) also
    stops generation (`stop_ids`)."""
    tokenizer = Tokenizer.load(path)
    named: list[int] = []
    for name in ("generation_config.json", "config.json"):
        file = Path(path) / name
        eos = (
            json.loads(file.read_text(encoding="utf-8")).get("eos_token_id")
            if file.is_file()
            else None
        )
        ids = [
            i
            for i in (eos if isinstance(eos, list) else [eos])
            if isinstance(i, int) and not isinstance(i, bool) and 0 <= i < tokenizer.vocab_size
        ]
        named += ids
        if tokenizer.eos_id is None and ids:
            tokenizer.eos_id = ids[0]
    tokenizer.extra_stop_ids = frozenset(named)
    return tokenizer

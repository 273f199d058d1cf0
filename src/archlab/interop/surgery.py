"""Model surgery: start from existing weights with changed switches, where a mapping exists.

`adapt(model, config)` returns a new model of `config` carrying `model`'s weights. What may change:
- `n_kv_heads` down to a divisor of the current count: each group's K and V heads (weights
  and biases) are mean-pooled into one, the GQA conversion of Ainslie et al. 2023 (arXiv
  2305.13245, section 2.2);
- `rope.scaling` and `max_seq_len` (RoPE or no absolute positions): same weights, longer context;
- `qk_norm` added (from none): new gains 1 (0 when stored as 1 + w), biases 0;
- `attn_softcap`, `final_softcap`: no parameters, the caps act on the same weights;
- training-only fields: dropout, attn_dropout, init, attn_impl, d_ff_multiple_of.
Anything else (widths, norms, positions, activations, ...) has no principled weight mapping and is
refused by name. The weights to start from are read by interop/model_folder.py (a Hugging Face
folder or an archlab checkpoint).
"""

from __future__ import annotations

from dataclasses import fields

import torch

from archlab.interop.family import InteropError
from archlab.nn.config import GROUPS, ModelConfig
from archlab.nn.model import TransformerLM

FREE = (
    "dropout",
    "attn_dropout",
    "init",
    "attn_impl",
    "d_ff_multiple_of",
    "bias",
    "attn_softcap",
    "final_softcap",
    "rope.scaling",
    "max_seq_len",
)
MAPPED = ("n_kv_heads", "qk_norm", "qk_norm_scope")


def check_changes(old: ModelConfig, new: ModelConfig) -> list[str]:
    """The changed fields, after refusing those without a principled weight mapping (one
    line, by name)."""
    changed = changed_fields(old, new)
    for name in changed:
        before, after = _value(old, name), _value(new, name)
        if name == "n_kv_heads" and (
            old.n_kv_heads % after or (old.qk_norm != "none" and old.qk_norm_scope == "proj")
        ):
            why = (
                f"mean-pooling needs a divisor of {old.n_kv_heads}"
                if old.n_kv_heads % after
                else "the K norm spans the whole projection"
            )
            raise InteropError(f"cannot change n_kv_heads {before} -> {after}: {why}")
        if name == "qk_norm" and before != "none":
            raise InteropError(
                f"cannot change qk_norm {before!r} -> {after!r}: only adding one (from 'none') maps"
            )
        if name == "qk_norm_scope" and old.qk_norm != "none":
            raise InteropError(
                f"cannot change qk_norm_scope {before!r} -> {after!r} of an existing QK-norm"
            )
        if name == "max_seq_len" and old.position == "learned":
            raise InteropError(
                f"cannot change max_seq_len {before} -> {after}: learned positions have one row "
                "per position and no principled extension"
            )
        if name in ("attn_bias", "mlp_bias") and "bias" in changed:
            raise InteropError(
                f"cannot change {name} {before} -> {after}: new biases have no weights "
                "to start from"
            )
        if name not in FREE + MAPPED:
            raise InteropError(
                f"cannot change {name} {before!r} -> {after!r}: no principled weight mapping; "
                f"--init-from can change {', '.join(FREE + MAPPED)}"
            )
    return changed


def changed_fields(old: ModelConfig, new: ModelConfig) -> list[str]:
    """The fields that differ, an option group's by its own fields (`rope.scaling`) where both
    configs have it."""
    changed = []
    for f in fields(ModelConfig):
        before, after = getattr(old, f.name), getattr(new, f.name)
        if before == after:
            continue
        if f.name in GROUPS and before is not None and after is not None:
            changed += [
                f"{f.name}.{g.name}"
                for g in fields(before)
                if getattr(before, g.name) != getattr(after, g.name)
            ]
        else:
            changed.append(f.name)
    return changed


def _value(config: ModelConfig, name: str) -> object:
    group, _, field = name.partition(".")
    value = getattr(config, group)
    return getattr(value, field) if field else value


def pool_kv(qkv: torch.Tensor, old: ModelConfig, n_kv: int) -> torch.Tensor:
    """Fused [q | k | v] rows (weight or bias) with each group of K and V heads
    mean-pooled into one."""
    q, k, v = qkv.split(
        [old.n_heads * old.head_dim, old.n_kv_heads * old.head_dim, old.n_kv_heads * old.head_dim]
    )
    group = old.n_kv_heads // n_kv

    # (K*Dh, ...) -> (K/group*Dh, ...), heads g*group.. averaged
    def pool(x: torch.Tensor) -> torch.Tensor:
        return (
            x.view(n_kv, group, old.head_dim, *x.shape[1:])
            .mean(dim=1)
            .reshape(n_kv * old.head_dim, *x.shape[1:])
        )

    return torch.cat([q, pool(k), pool(v)])


def adapt(model: TransformerLM, config: ModelConfig) -> TransformerLM:
    """A model of `config` started from `model`'s weights (see the module docstring for
    what may change).

    The weights it does not change are `model`'s own tensors, not copies (clone `model` first to
    train one and keep the other): at SmolLM2-135M's shapes a copy of the state plus a randomly
    initialised model to load it into held the weights three times and set the peak memory of a LoRA
    fine-tune (docs/training.md). The new model is built on the meta device; only a parameter the
    source lacks (an added QK-norm's gains) is made and initialised."""
    old = model.config
    changed = check_changes(old, config)
    state = {k: v.detach() for k, v in model.state_dict().items()}
    if "n_kv_heads" in changed:
        for key in [k for k in state if k.endswith(("attn.qkv_proj.weight", "attn.qkv_proj.bias"))]:
            state[key] = pool_kv(state[key], old, config.n_kv_heads)
    weight = next(model.parameters())
    with torch.device("meta"):
        new = TransformerLM(config)
    expected = new.state_dict()
    missing = [k for k in expected if k not in state]
    fresh = [
        k
        for k in missing
        if not k.endswith(("q_norm.weight", "k_norm.weight", "q_norm.bias", "k_norm.bias"))
    ]
    unexpected = [k for k in state if k not in expected]
    # check_changes should make this unreachable; never train half-loaded weights
    if fresh or unexpected:
        raise InteropError(
            f"weights do not fit the adapted config: missing {fresh}, unexpected {unexpected}"
        )
    new.load_state_dict({k: state[k] for k in expected if k in state}, strict=False, assign=True)
    # an added QK-norm: gain 1, bias 0
    for owner in dict.fromkeys(k.rpartition(".")[0] for k in missing):
        norm = new.get_submodule(owner).to_empty(device=weight.device)
        norm.reset_parameters()
        norm.to(weight.dtype)
    if config.tie_embeddings:  # assign gave the head its own Parameter object: tie it again
        new.lm_head.weight = new.embed_tokens.weight
    new.materialise_buffers(weight.device)
    return new

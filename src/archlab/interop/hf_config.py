"""Hugging Face `config.json` fields <-> archlab: today the RoPE scaling (`rope_parameters` in transformers 5,
`rope_scaling` + top-level `rope_theta` before it). The per-family tables in `families/` build on this.

Mapping of `RopeScaling.kind` to transformers' `rope_type` (modeling_rope_utils.py, ROPE_INIT_FUNCTIONS):
    none -> default, linear -> linear, dynamic -> dynamic, yarn -> yarn, llama3 -> llama3,
    ntk_by_parts -> llama3 (the same by-parts formula with alpha/beta as low/high_freq_factor),
    ntk -> default with the stretched base theta * s^(d/(d-2)) (transformers has no static NTK type).
"""

from __future__ import annotations

from typing import Any

from archlab.nn.rope import RopeScaling, ntk_theta

# kind -> HF rope_type, and HF rope_parameters key -> RopeScaling field (ntk exports as `default`, see rope_to_hf)
HF_ROPE_TYPE = {"none": "default", "linear": "linear", "ntk_by_parts": "llama3", "dynamic": "dynamic",
                "yarn": "yarn", "llama3": "llama3"}
HF_ROPE_KEYS: dict[str, dict[str, str]] = {
    "none": {},
    "linear": {"factor": "factor"},
    "dynamic": {"factor": "factor"},
    "ntk_by_parts": {"factor": "factor", "original_max_position_embeddings": "original_max_seq_len",
                     "low_freq_factor": "beta_slow", "high_freq_factor": "beta_fast"},
    "yarn": {"factor": "factor", "original_max_position_embeddings": "original_max_seq_len",
             "beta_fast": "beta_fast", "beta_slow": "beta_slow", "attention_factor": "attention_factor",
             "mscale": "mscale", "mscale_all_dim": "mscale_all_dim", "truncate": "truncate"},
    "llama3": {"factor": "factor", "original_max_position_embeddings": "original_max_seq_len",
               "low_freq_factor": "low_freq_factor", "high_freq_factor": "high_freq_factor"},
}


def rope_to_hf(scaling: RopeScaling, theta: float, d_rot: int) -> dict[str, Any]:
    """transformers 5 `rope_parameters` (rope_theta included) that give the same frequencies.

    `ntk` has no HF type, so it exports as `default` with the stretched base (needs d_rot);
    `ntk_by_parts` exports as `llama3`, the same formula. For `dynamic`, transformers takes M from
    `max_position_embeddings`, so write `hf_max_position_embeddings(...)` there.
    """
    if scaling.kind == "ntk":
        return {"rope_type": "default", "rope_theta": ntk_theta(theta, d_rot, scaling.factor)}
    out: dict[str, Any] = {"rope_type": HF_ROPE_TYPE[scaling.kind], "rope_theta": theta}
    for hf_key, name in HF_ROPE_KEYS[scaling.kind].items():
        if getattr(scaling, name) is not None:
            out[hf_key] = getattr(scaling, name)
    return out


def hf_max_position_embeddings(scaling: RopeScaling, max_seq_len: int) -> int:
    """The `max_position_embeddings` to export: dynamic NTK reads its M from there; others keep ours."""
    return scaling.original_max_seq_len if scaling.kind == "dynamic" else max_seq_len


def rope_from_hf(params: dict[str, Any] | None, max_position_embeddings: int) -> RopeScaling:
    """Read HF `rope_parameters` / legacy `rope_scaling` (defaults filled as transformers 5 fills them)."""
    params = dict(params or {})
    hf_type = params.get("rope_type", params.get("type", "default"))
    kinds = {"default": "none", **{v: k for k, v in HF_ROPE_TYPE.items() if k not in ("none", "ntk_by_parts")}}
    if hf_type not in kinds:
        raise ValueError(f"rope_type={hf_type!r} is not supported: one of {', '.join(kinds)}")
    kind = kinds[hf_type]
    if kind in ("yarn", "llama3"):  # transformers' standardize_rope_params does the same
        params.setdefault("original_max_position_embeddings", max_position_embeddings)
    if kind == "yarn":
        if params.get("factor") is None:
            params["factor"] = max_position_embeddings / params["original_max_position_embeddings"]
        params["beta_fast"] = params.get("beta_fast") or 32.0  # HF reads these with `or`: 0/None -> default
        params["beta_slow"] = params.get("beta_slow") or 1.0
    values = {name: params[key] for key, name in HF_ROPE_KEYS[kind].items() if params.get(key) is not None}
    if kind == "dynamic":  # transformers' M is max_position_embeddings
        values["original_max_seq_len"] = max_position_embeddings
    return RopeScaling(kind=kind, **values)

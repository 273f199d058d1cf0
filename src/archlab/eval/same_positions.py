"""Which RoPE methods change nothing at the lengths asked (the default of `archlab eval length`).

Inside the training length most methods are the model itself: a factor s = max(1, L / L_train) of 1
leaves every frequency schedule at plain RoPE, and ReRoPE's remap starts only at distances >= W.
Each such method costs a full pass and prints the same figure (a SmolLM2-135M, 8k context: ten
methods, one result, 1,182 s). This module decides it from the position encodings themselves, not
from the methods' names: for a (method, length) config it builds the attention inputs the model's
own forward over L tokens would use (nn/attention/inputs.py: the RoPE plan, ReRoPE's two rotations,
the window mask, the log-n query scale; no weights), scores fixed random probe queries against
probe keys at every (query, key) pair a layer lets a few query rows see (the last row included:
it sees every distance), and compares. Two methods are the same at a length when every kind of
layer gives the same scores, up to float32 rounding (`SAME`); a method the same as an earlier one at
every requested length is a duplicate.

Cost: one plan per (method, length), O(L) tables, and ReRoPE's in-window mask of L^2 bytes.

Shapes: L length, R probe rows, Dh head dim.
"""

from __future__ import annotations

import math

import torch

from archlab.nn.attention.inputs import AttentionInputs, AttentionInputsBuilder, build_rotaries
from archlab.nn.config import ModelConfig

PROBE_ROWS = 8  # query positions probed per length: evenly spaced from 0 to L - 1
SAME = 1e-6  # scores equal within this share of their largest magnitude: float32 rounding only
PROBE_SEED = 0


def position_scores(config: ModelConfig, length: int) -> list[torch.Tensor]:
    """Per kind of RoPE layer (in layer order), the probe scores q_m . R k_n the model's forward
    over `length` tokens computes, times the query's log-n scale, for the probe rows m -> (R, L)
    each; NaN where the layer does not let query m see key n (the future, outside a window)."""
    rotaries = {name: r.eval() for name, r in build_rotaries(config).items() if r is not None}
    builder = AttentionInputsBuilder(config, {"global": None, "local": None, **rotaries}, None)
    positions = torch.arange(length)[None]  # (1, L)
    gen = torch.Generator().manual_seed(PROBE_SEED)
    q, k = torch.randn(2, 1, length, 1, config.head_dim, generator=gen)  # (1, L, 1, Dh) each
    rows = torch.linspace(0, length - 1, min(PROBE_ROWS, length)).round().long().unique()  # (R,)
    out, seen = [], set()
    for inputs in builder(positions):
        if inputs.rope is None or id(inputs) in seen:  # NoPE layers have no positions to compare
            continue
        seen.add(id(inputs))
        out.append(_visible_scores(inputs, q, k, rows))
    return out


def _visible_scores(
    inputs: AttentionInputs, q: torch.Tensor, k: torch.Tensor, rows: torch.Tensor
) -> torch.Tensor:
    """The probe rows' scores under one layer kind's inputs (R, L), NaN where masked."""
    plan, length = inputs.rope, k.shape[1]
    if plan.computes_scores:  # ReRoPE: two rotations merged per (query, key)
        keys = k.transpose(1, 2)  # (1, 1, L, Dh)
        scores = torch.cat(
            [
                plan.rows(m, m + 1, length).scores(q[:, m : m + 1].transpose(1, 2), keys)[0, 0]
                for m in rows.tolist()
            ]
        )  # (R, L)
    else:
        qr, kr = plan.rotate_queries_keys(q, k)  # (1, L, 1, Dh)
        scores = qr[0, rows, 0] @ kr[0, :, 0].T  # (R, L)
    if inputs.query_scale is not None:
        scores = scores * inputs.query_scale[0, 0, rows, 0][:, None]
    visible = torch.arange(length)[None, :] <= rows[:, None]  # (R, L) causal
    if inputs.mask is not None:
        visible = visible & inputs.mask[0, 0, rows]
    return scores.double().masked_fill(~visible, math.nan)


def same_scores(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    """Whether two `position_scores` are the same: the same layer kinds, the same visible pairs,
    and scores within `SAME` of the largest magnitude."""
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x.shape != y.shape or not torch.equal(x.isnan(), y.isnan()):
            return False
        seen = ~x.isnan()
        scale = max(float(x[seen].abs().max()), float(y[seen].abs().max()), 1e-30)
        if float((x[seen] - y[seen]).abs().max()) > SAME * scale:
            return False
    return True


def duplicate_methods(
    configs: dict[tuple[str, int], ModelConfig], methods: list[str], lengths: list[int]
) -> dict[str, str]:
    """{method: the earlier method it equals at every length} among `methods`, from each (method,
    length)'s config (`rope_methods.method_configs`): a method whose probe scores are a kept
    method's at every one of `lengths` is a duplicate of the first such; the others are kept, so
    the first method (`none`, the model as trained) always is."""
    # (R, L) doubles per layer kind and length: small; each plan is freed once scored
    scores = {m: [position_scores(configs[m, n], n) for n in lengths] for m in methods}
    kept: list[str] = []
    twins: dict[str, str] = {}
    for method in methods:
        twin = next(
            (t for t in kept if all(same_scores(a, b) for a, b in zip(scores[method], scores[t]))),
            None,
        )
        if twin is None:
            kept.append(method)
        else:
            twins[method] = twin
    return twins

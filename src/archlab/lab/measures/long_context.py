"""Su's long-context protocol as lab measures (the `long-context` suite): next-token accuracy at
1x and 8x the training length N, on plain and repeated samples (eval/samples.py), with the run's
weights as trained or under an inference-time method.

    acc_{1x,8x}_{plain,repeated}        the model as trained (inv_leaky_rerope is plain RoPE in
                                        eval)
    acc_8x_{plain,repeated}_rerope      RoPE -> ReRoPE, window N / 2 (Su's w256 at N 512; 9708)
    acc_8x_{plain,repeated}_leaky       RoPE -> Leaky ReRoPE, window N / 4, Su's slope rule
                                        (eval/rope_methods.py: the largest position any query sees
                                        <= N / 2, k >= 16)
    acc_8x_{plain,repeated}_ntk_mixed   RoPE -> NTK-RoPE-mixed, factor 8 (kexue.fm/archives/9706)
    acc_8x_{plain,repeated}_<kind>      RoPE -> any other kind with an inference-time form, at 8x
                                        (`RopeKind.at`: linear, ntk, ntk_by_parts, dynamic, yarn,
                                        llama3)
    acc_8x_{plain,repeated}_logn        "log n-dagger": max(1, log n / log N) per query at
                                        inference only (ModelConfig.with_inference_logn;
                                        kexue.fm/archives/8823, 9708); the model as trained when
                                        it trained with log n

accuracy = mean over windows and every prediction of [argmax z_t == y_t] (Su scores whole samples);
each window's accuracy is an item (`window_accuracies`: the same windows for every run of a suite),
so claims on these measures treat the windows as a sample of text (lab/analysis/items.py). A method
that needs RoPE on a model without it is n/a (None), never a number.
"""

from __future__ import annotations

import numpy as np
import torch

from archlab.checkpoint import build_model, module_training_state
from archlab.eval.rope_methods import method_configs
from archlab.eval.samples import sample_windows
from archlab.eval.variants import SAMPLES
from archlab.lab.measures.run_like import RunLike
from archlab.nn.config import ModelConfig
from archlab.nn.model import TransformerLM
from archlab.nn.positions.scaling import inference_kinds

FACTORS = (1, 8)  # test lengths in training contexts: Su's 512 (train) and 4096 (8x) columns
# a kind's measure suffix where it is not the kind's name (stored measures)
SUFFIXES = {"leaky_rerope": "leaky"}


def inference_config(config: ModelConfig, method: str, length: int) -> ModelConfig | None:
    """`config` under inference-time `method` at `length` (module doc), or None where it
    does not apply."""
    if method == "none":
        return config
    if method == "logn":
        if config.dynamic_cosine:
            # its lambda is already 4 log n per query: the config refuses a second log-n
            return None
        return config if config.attn_logn else config.with_inference_logn()
    if config.position != "rope":
        return None
    return method_configs(config, [method], [length], None, allow_extrapolation=True)[
        method, length
    ]


@torch.no_grad()
def _window_hits(model: TransformerLM, batch: torch.Tensor) -> list[float]:
    """Per window (count, L + 1), the share of its L predictions whose argmax is the next token; one
    at a time."""
    return [
        float((model(row[None, :-1]).argmax(-1) == row[None, 1:]).double().mean()) for row in batch
    ]


def accuracy_at(run: RunLike, factor: int, samples: str, method: str = "none") -> float | None:
    """Next-token accuracy of the run's final weights at `factor` x N on `samples` under
    `method` (module doc)."""
    hits = window_accuracies(run, factor, samples, method)
    return None if hits is None else float(np.mean(hits))


def window_accuracies(
    run: RunLike, factor: int, samples: str, method: str = "none"
) -> list[float] | None:
    """`accuracy_at` per window (the measure's items), or None where the method does not apply."""
    model = run.model.eval()
    length = factor * run.block_size
    config = inference_config(model.config, method, length)
    if config is None:
        return None
    tokens = np.asarray(run.data().splits["val"], dtype=np.int64)
    batch = sample_windows(tokens, length, run.windows, samples)
    scored = (
        model
        if config == model.config
        else build_model(
            config, model.state_dict(), training_state=module_training_state(model)
        ).eval()
    )
    return _window_hits(scored, batch)


def methods() -> dict[str, str]:
    """measure suffix -> inference-time method: every RoPE kind with an inference-time form but
    `none` (read when called, so a kind registered in ROPE_KINDS appears), in ROPE_KINDS order,
    then log n."""
    kinds = [kind for kind in inference_kinds() if kind != "none"]
    return {**{SUFFIXES.get(kind, kind): kind for kind in kinds}, "logn": "logn"}


def measure_names() -> dict[str, tuple[int, str, str]]:
    """Every measure of this module: name -> (factor, samples, method)."""
    out = {f"acc_{f}x_{s}": (f, s, "none") for f in FACTORS for s in SAMPLES}
    out.update(
        {
            f"acc_8x_{s}_{suffix}": (8, s, method)
            for suffix, method in methods().items()
            for s in SAMPLES
        }
    )
    return out

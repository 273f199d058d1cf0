"""The long-context suite's measures (lab/measures/long_context.py): accuracy at 1x / 8x on plain
and repeated samples against a count over the full logits of the same windows, each inference-time
method reaching the config it names (and none other), and n/a where a method needs RoPE."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch

from archlab import ModelConfig, TransformerLM
from archlab.eval.samples import sample_windows
from archlab.lab.measures import long_context
from archlab.lab.measures.measure import MEASURES

SMALL = dict(d_model=32, n_heads=4, n_layers=2, max_seq_len=16, vocab_size=64)


@dataclass
class Data:
    splits: dict


@dataclass
class Run:
    model: TransformerLM
    val: np.ndarray
    windows: int = 3
    block_size: int = 16

    def data(self) -> Data:
        return Data({"val": self.val})


def tiny(**fields: object) -> TransformerLM:
    torch.manual_seed(0)
    return TransformerLM(ModelConfig(**{**SMALL, **fields})).eval()


@pytest.mark.parametrize(("factor", "samples"), [(1, "plain"), (8, "plain"), (8, "repeated")])
def test_accuracy_is_a_count_over_the_full_logits(factor: int, samples: str) -> None:
    run = Run(tiny(), np.random.default_rng(0).integers(0, 64, 600))
    batch = sample_windows(run.val, factor * 16, 3, samples)
    with torch.no_grad():
        hits = [
            (run.model(row[None, :-1])[0].double().argmax(-1) == row[1:]).double().mean()
            for row in batch
        ]
    assert long_context.accuracy_at(run, factor, samples) == pytest.approx(
        float(sum(hits) / 3), abs=1e-12
    )


def test_each_method_reaches_its_config_and_only_it() -> None:
    config = tiny().config
    assert long_context.inference_config(config, "none", 128) is config
    rerope = long_context.inference_config(config, "rerope", 128)
    assert (
        rerope.rope.scaling.kind == "rerope"
        and rerope.rope.scaling.window == 8
        and not rerope.attn_logn
    )
    mixed = long_context.inference_config(config, "ntk_mixed", 128)
    assert mixed.rope.scaling.kind == "ntk_mixed" and mixed.rope.scaling.factor == 8.0
    logn = long_context.inference_config(config, "logn", 128)
    assert (
        logn.attn_logn
        and logn.attn_logn_clip
        and logn.replace(attn_logn=False, attn_logn_clip=False) == config
    )
    trained = config.replace(attn_logn=True)
    assert long_context.inference_config(trained, "logn", 128) is trained
    cosine = config.replace(cosine={"scale": "dynamic"})
    assert long_context.inference_config(cosine, "logn", 128) is None
    assert long_context.inference_config(config.replace(position="none"), "rerope", 128) is None
    run = Run(tiny(position="none"), np.random.default_rng(0).integers(0, 64, 600))
    assert long_context.accuracy_at(run, 8, "plain", "rerope") is None


def test_a_method_changes_the_8x_accuracy_through_the_rebuilt_model() -> None:
    run = Run(tiny(), np.random.default_rng(1).integers(0, 64, 600))
    scaled = TransformerLM(long_context.inference_config(run.model.config, "rerope", 128)).eval()
    scaled.load_state_dict(run.model.state_dict())
    batch = sample_windows(run.val, 128, 3, "plain")
    with torch.no_grad():
        hits = [(scaled(row[None, :-1])[0].argmax(-1) == row[1:]).double().mean() for row in batch]
    assert long_context.accuracy_at(run, 8, "plain", "rerope") == pytest.approx(
        float(sum(hits) / 3)
    )


def test_every_measure_is_registered_higher_is_better() -> None:
    names = long_context.measure_names()
    assert len(names) == 4 + 2 * len(long_context.methods())
    assert all(name in MEASURES and MEASURES[name].better == "higher" for name in names)
    assert names["acc_8x_repeated_leaky"] == (8, "repeated", "leaky_rerope")

"""HWFA2 (Su, "Transformer upgrade 14: when HWFA meets ReRoPE", kexue.fm/archives/9731; `build_preset("hwfa2")`):
windowed RoPE layers and one or two full layers in the middle (L/2, or L/3 and 2L/3) with RoPE in training and
ReRoPE at inference. ReRoPE reaches the full layers only, and only in eval mode; the windowed layers' outputs
are unchanged by it; cached decoding equals the full forward; the parameters reach the config."""

from __future__ import annotations

import pytest
import torch

from archlab import KVCache, RopeScaling, TransformerLM
from archlab.nn.config import ConfigError
from archlab.nn.presets import build_preset
from tests.nn.test_kv_cache import cached_logits

VOCAB, N = 64, 32
SHAPE = dict(d_model=32, n_heads=4, max_seq_len=N, vocab_size=VOCAB)


def model_of(n_layers: int = 6, **fields: object) -> TransformerLM:
    torch.manual_seed(0)
    return TransformerLM(build_preset("hwfa2", n_layers=n_layers, **SHAPE, **fields)).eval()


def ids(length: int = 2 * N, batch: int = 2) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("n_layers,full_layers,full", [(6, 1, (3,)), (24, 1, (12,)), (6, 2, (2, 4)),
                                                       (24, 2, (8, 16)), (2, 1, (1,))])
def test_full_layers_sit_in_the_middle(n_layers: int, full_layers: int, full: tuple[int, ...]) -> None:
    c = build_preset("hwfa2", n_layers=n_layers, full_layers=full_layers, **SHAPE)
    assert tuple(i for i in range(n_layers) if not c.layer_is_sliding(i)) == full
    assert c.sliding_window == N // 8 and c.rope_scaling == RopeScaling("rerope", window=N // 2, inference_only=True)
    assert [c.layer_rope(i) for i in range(n_layers)] == ["global" if i in full else "local" for i in range(n_layers)]
    c = build_preset("hwfa2", n_layers=n_layers, full_layers=full_layers, rerope_window=5, sliding_window=3, **SHAPE)
    assert (c.rope_scaling.window, c.sliding_window) == (5, 3)


@pytest.mark.parametrize("full_layers", [1, 2])
def test_rerope_reaches_only_the_full_layers_and_only_at_inference(full_layers: int) -> None:
    model = model_of(full_layers=full_layers)
    full = {i for i in range(6) if not model.config.layer_is_sliding(i)}
    positions = torch.arange(2 * N)[None]
    eval_plans = [inp.rope.computes_scores for inp in model.attention_inputs(positions)]
    assert {i for i, remapped in enumerate(eval_plans) if remapped} == full
    model.train()
    assert not any(inp.rope.computes_scores for inp in model.attention_inputs(positions))  # RoPE in training


def test_windowed_layers_unchanged_by_rerope_and_training_is_plain_rope() -> None:
    """The same weights with rope_scaling=None: each windowed layer's attention gives the same output on the same
    input (eval mode), the full layers differ past the ReRoPE window, and training mode is that plain model."""
    model = model_of(full_layers=2)
    plain = TransformerLM(model.config.replace(rope_scaling=None)).eval()
    plain.load_state_dict(model.state_dict())
    positions = torch.arange(2 * N)[None]
    ours, theirs = model.attention_inputs(positions), plain.attention_inputs(positions)
    x = torch.randn(1, 2 * N, 32)
    with torch.no_grad():
        for i, layer in enumerate(model.layers):
            a, b = layer.attn(x, ours[i]), plain.layers[i].attn(x, theirs[i])
            if model.config.layer_is_sliding(i):
                torch.testing.assert_close(a, b, rtol=0, atol=0)
            else:
                assert (a - b).abs().max() > 1e-4
        x_ids = ids()
        assert (model(x_ids) - plain(x_ids)).abs().max() > 1e-4  # at inference: ReRoPE in the full layers
        torch.testing.assert_close(model.train()(x_ids), plain.train()(x_ids), rtol=0, atol=0)


@pytest.mark.parametrize("full_layers", [1, 2])
def test_cached_decoding_equals_the_full_forward(full_layers: int) -> None:
    model = model_of(full_layers=full_layers)
    x = ids()
    with torch.no_grad():
        full = model(x)
        for chunks in [(3,), (20, 9)]:  # past the sliding window's ring (4) and the ReRoPE window (16)
            torch.testing.assert_close(cached_logits(model, x, chunks), full, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kwargs,message", [(dict(full_layers=3), r"^full_layers=3 is not allowed"),
                                            (dict(full_layers=2, n_layers=1), r"^n_layers=1 is not allowed")])
def test_bad_parameters_fail_in_one_line(kwargs: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build_preset("hwfa2", **{"n_layers": 6, **SHAPE, **kwargs})


def test_inference_only_rerope_on_any_model() -> None:
    """The switch itself: rerope with inference_only=True is plain RoPE in training, ReRoPE in eval."""
    from archlab import ModelConfig

    torch.manual_seed(0)
    c = ModelConfig(**SHAPE, n_layers=1, rope_scaling=RopeScaling("rerope", window=4, inference_only=True))
    model, plain = TransformerLM(c), TransformerLM(c.replace(rope_scaling=None))
    plain.load_state_dict(model.state_dict())
    x = ids(N)
    with torch.no_grad():
        torch.testing.assert_close(model.train()(x), plain.train()(x), rtol=0, atol=0)
        reference = TransformerLM(c.replace(rope_scaling=RopeScaling("rerope", window=4))).eval()
        reference.load_state_dict(model.state_dict())
        torch.testing.assert_close(model.eval()(x), reference(x), rtol=0, atol=0)


def test_a_cache_filled_in_eval_mode_is_refused_in_training_mode() -> None:
    """HWFA2's full layers cache unrotated keys in eval mode (ReRoPE) and rotated ones in training (RoPE): a cache
    continued in the other mode is refused in one line, naming the inference-only remap."""
    model = model_of(full_layers=1)
    x = ids(batch=1)
    cache = KVCache.for_model(model, 1, x.shape[1])
    with torch.no_grad():
        model(x[:, :20], cache=cache)
        with pytest.raises(ValueError, match="filled in eval mode and is continued in training mode.*'rerope' "
                           "remaps positions in eval mode only") as err:
            model.train()(x[:, 20:21], cache=cache)
    assert "\n" not in str(err.value)

"""HWFA2 (Su, "Transformer upgrade 14: when HWFA meets ReRoPE", kexue.fm/archives/9731;
`build_preset("hwfa2")`): windowed RoPE layers and one or two full layers in the middle (L/2, or
L/3 and 2L/3) with RoPE in training and ReRoPE at inference. ReRoPE reaches the full layers only,
and only in eval mode; the windowed layers' outputs are unchanged by it; cached decoding equals
the full forward, and a cache is never continued in the other mode; its knobs (`full_layers`,
`rope_scaling.window`) reach the right layers from `archlab train` flags, refuse bad values in one
line, and the run folder rebuilds the same model."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from archlab import KVCache, ModelConfig, RopeScaling, TransformerLM
from archlab.checkpoint import load_model, read_run_config
from archlab.cli import main
from archlab.data.prepare import prepare_data
from archlab.nn.config import ConfigError
from archlab.nn.presets import build_preset
from archlab.train.config import resolve_config
from tests.nn.test_kv_cache import cached_logits

VOCAB, N = 64, 32
SHAPE = dict(d_model=32, n_heads=4, max_seq_len=N, vocab_size=VOCAB)


def model_of(n_layers: int = 6, **fields: object) -> TransformerLM:
    torch.manual_seed(0)
    return TransformerLM(build_preset("hwfa2", n_layers=n_layers, **SHAPE, **fields)).eval()


def ids(length: int = 2 * N, batch: int = 2) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize(
    "n_layers,full_layers,full",
    [(6, 1, (3,)), (24, 1, (12,)), (6, 2, (2, 4)), (24, 2, (8, 16)), (2, 1, (1,))],
)
def test_full_layers_sit_in_the_middle(
    n_layers: int, full_layers: int, full: tuple[int, ...]
) -> None:
    c = build_preset("hwfa2", n_layers=n_layers, full_layers=full_layers, **SHAPE)
    assert tuple(i for i in range(n_layers) if not c.layer_is_sliding(i)) == full
    assert c.sliding_window == N // 8 and c.rope.scaling == RopeScaling(
        "rerope", window=N // 2, inference_only=True
    )
    assert [c.layer_rope(i) for i in range(n_layers)] == [
        "global" if i in full else "local" for i in range(n_layers)
    ]
    c = build_preset(
        "hwfa2",
        n_layers=n_layers,
        full_layers=full_layers,
        rope=dict(scaling={"window": 5}),
        sliding_window=3,
        **SHAPE,
    )
    assert (c.rope.scaling.window, c.sliding_window) == (5, 3)


@pytest.mark.parametrize("full_layers", [1, 2])
def test_rerope_reaches_only_the_full_layers_and_only_at_inference(full_layers: int) -> None:
    model = model_of(full_layers=full_layers)
    full = {i for i in range(6) if not model.config.layer_is_sliding(i)}
    positions = torch.arange(2 * N)[None]
    eval_plans = [inp.rope.computes_scores for inp in model.attention_inputs(positions)]
    assert {i for i, remapped in enumerate(eval_plans) if remapped} == full
    model.train()
    # RoPE in training
    assert not any(inp.rope.computes_scores for inp in model.attention_inputs(positions))


def test_windowed_layers_unchanged_by_rerope_and_training_is_plain_rope() -> None:
    """The same weights with rope_scaling=None: each windowed layer's attention gives the same
    output on the same input (eval mode), the full layers differ past the ReRoPE window, and
    training mode is that plain model."""
    model = model_of(full_layers=2)
    plain = TransformerLM(model.config.replace(rope=dict(scaling=None))).eval()
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
        # at inference: ReRoPE in the full layers
        assert (model(x_ids) - plain(x_ids)).abs().max() > 1e-4
        torch.testing.assert_close(model.train()(x_ids), plain.train()(x_ids), rtol=0, atol=0)


@pytest.mark.parametrize("full_layers", [1, 2])
def test_cached_decoding_equals_the_full_forward(full_layers: int) -> None:
    model = model_of(full_layers=full_layers)
    x = ids()
    with torch.no_grad():
        full = model(x)
        # past the sliding window's ring (4) and the ReRoPE window (16)
        for chunks in [(3,), (20, 9)]:
            torch.testing.assert_close(cached_logits(model, x, chunks), full, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        (
            dict(full_layers=3),
            r"^ModelConfig.full_layers=3 is not allowed: None, 1 \(layer n_layers/2\) or 2",
        ),
        (dict(full_layers=True), r"^ModelConfig.full_layers=True is not allowed: None, 1"),
        (
            dict(full_layers=2, n_layers=1),
            r"^ModelConfig.n_layers=1 is not allowed: at least full_layers=2",
        ),
        (
            dict(full_layers=1, sliding_window=None),
            r"^ModelConfig.full_layers=1 is not allowed: None without sliding_window",
        ),
        (
            dict(full_layers=1, window_pattern="SF"),
            r"^ModelConfig.window_pattern='SF' is not allowed: 'S' with full_layers=1",
        ),
        (
            dict(rope=dict(scaling={"window": 0})),
            r"^RopeScaling.window=0 is not allowed: a positive integer",
        ),
        (dict(rerope_window=5), r"^ModelConfig has no field 'rerope_window'"),
    ],
)
def test_bad_parameters_fail_in_one_line(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message) as err:
        build_preset("hwfa2", **{"n_layers": 6, **SHAPE, **kwargs})
    assert "\n" not in str(err.value)


def test_full_layers_is_a_switch_of_any_windowed_model() -> None:
    """Not a preset keyword: a field, so it follows n_layers through `replace` and works without the
    preset; hwfa2 leaves the placement to a window_pattern the caller gives."""
    c = ModelConfig(**SHAPE, n_layers=6, sliding_window=4, full_layers=2)
    assert [i for i in range(6) if not c.layer_is_sliding(i)] == [2, 4]
    assert [i for i in range(12) if not c.replace(n_layers=12).layer_is_sliding(i)] == [4, 8]
    patterned = build_preset("hwfa2", n_layers=4, window_pattern="SFSS", **SHAPE)
    assert patterned.full_layers is None and [patterned.layer_is_sliding(i) for i in range(4)] == [
        True,
        False,
        True,
        True,
    ]
    with pytest.raises(
        ConfigError, match="^ModelConfig.full_layers=1 is not allowed: None without sliding_window"
    ):
        ModelConfig(**SHAPE, full_layers=1)


def plans(model: TransformerLM) -> tuple[list[bool], list[int | None]]:
    """Per layer: whether it reads a remapped (ReRoPE) plan, and its sliding window."""
    inputs = model.attention_inputs(torch.arange(2 * N)[None])
    return [inp.rope.computes_scores for inp in inputs], list(model.layer_windows)


@pytest.mark.parametrize(
    "flags,full,window",
    [
        ({}, [3], N // 2),
        ({"model.full_layers": "2"}, [2, 4], N // 2),
        ({"model.rope.scaling.window": "8"}, [3], 8),
        (
            {"model.full_layers": "2", "model.rope.scaling.window": "8", "model.n_layers": "9"},
            [3, 6],
            8,
        ),
    ],
)
def test_train_flags_reach_the_layers_they_should_and_no_others(
    flags: dict, full: list[int], window: int
) -> None:
    """`archlab train --preset hwfa2 --model.full_layers 2 --model.rope.scaling.window 8`
    (resolve_config is what train runs on its flags): the full layers are where the field says,
    only they get ReRoPE, at that window and in eval mode only; every other layer keeps its sliding
    window and plain RoPE."""
    keys = {
        "preset": "hwfa2",
        **{f"model.{k}": str(v) for k, v in {**SHAPE, "n_layers": 6}.items()},
        **flags,
    }
    model_config = resolve_config([keys])[1]
    torch.manual_seed(0)
    model = TransformerLM(model_config).eval()
    n = model_config.n_layers
    assert model_config.rope.scaling == RopeScaling("rerope", window=window, inference_only=True)
    remapped, windows = plans(model)
    assert [i for i in range(n) if remapped[i]] == full
    assert windows == [None if i in full else N // 8 for i in range(n)]
    assert model.rotary.scaling.window == window and model.rotary_local.scaling.kind == "none"
    assert not any(plans(model.train())[0])  # RoPE in training


@pytest.mark.parametrize(
    "flag,value,message",
    [
        ("model.full_layers", "3", r"^ModelConfig.full_layers=3 is not allowed: None, 1"),
        (
            "model.full_layers",
            "two",
            r"^model.full_layers='two' is not allowed: expected int or None",
        ),
        (
            "model.rope.scaling.window",
            "-1",
            r"^RopeScaling.window=-1 is not allowed: a positive integer",
        ),
    ],
)
def test_a_bad_train_flag_fails_in_one_line(flag: str, value: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as err:
        resolve_config([{"preset": "hwfa2", flag: value}])
    assert "\n" not in str(err.value)


def test_the_run_folder_rebuilds_the_same_model(tmp_path: Path) -> None:
    """Round trip: `archlab train --preset hwfa2 --model.full_layers 2 --model.rope.scaling.window
    8` writes a config beside the run (config.yaml, and config.json in the checkpoint) that rebuilds
    the same config, layers and logits; a resume with the same flags is accepted, another ReRoPE
    window is refused in one line."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("def f(x):\n    return x + 1\n\n" * 100)
    data = prepare_data(str(corpus), tmp_path / "data", "byte", val_fraction=0.2)
    run = tmp_path / "run"
    flags = {
        "preset": "hwfa2",
        "model.d_model": "32",
        "model.n_heads": "4",
        "model.n_layers": "6",
        "model.max_seq_len": "32",
        "model.full_layers": "2",
        "model.rope.scaling.window": "8",
        "data.source": str(data),
        "data.batch_size": "2",
        "steps": "2",
        "out": str(run),
        "logging.progress": "false",
        "logging.tensorboard": "false",
        "logging.samples": "0",
        "logging.eval_every": "0",
        "logging.log_every": "1",
        "checkpoint.save_every": "0",
    }
    assert (
        main(["train", *[item for key, value in flags.items() for item in (f"--{key}", value)]])
        == 0
    )
    asked = resolve_config([flags])[1]
    model, _ = load_model(run)
    assert (
        model.config == asked
        and model.config.full_layers == 2
        and model.config.rope.scaling.window == 8
    )
    assert [i for i in range(6) if plans(model)[0][i]] == [2, 4]
    again = ModelConfig.from_dict(yaml.safe_load((run / "config.yaml").read_text())["model"])
    assert again == asked
    saved = read_run_config(str(run))
    # --resume with the same flags: the same model
    assert resolve_config([flags], saved)[1] == asked
    with pytest.raises(
        ValueError,
        match=r"^--resume: the model config differs from the checkpoint's "
        r"\(rope.scaling.window 8 -> 9\)",
    ):
        resolve_config([{**flags, "model.rope.scaling.window": "9"}], saved)
    rebuilt = TransformerLM(again).eval()
    rebuilt.load_state_dict(model.state_dict())
    x = ids(batch=1)
    with torch.no_grad():
        torch.testing.assert_close(rebuilt(x), model(x), rtol=0, atol=0)


def test_inference_only_rerope_on_any_model() -> None:
    """The switch itself: rerope with inference_only=True is plain RoPE in training,
    ReRoPE in eval."""
    from archlab import ModelConfig

    torch.manual_seed(0)
    c = ModelConfig(
        **SHAPE, n_layers=1, rope=dict(scaling=RopeScaling("rerope", window=4, inference_only=True))
    )
    model, plain = TransformerLM(c), TransformerLM(c.replace(rope=dict(scaling=None)))
    plain.load_state_dict(model.state_dict())
    x = ids(N)
    with torch.no_grad():
        torch.testing.assert_close(model.train()(x), plain.train()(x), rtol=0, atol=0)
        reference = TransformerLM(
            c.replace(rope=dict(scaling=RopeScaling("rerope", window=4)))
        ).eval()
        reference.load_state_dict(model.state_dict())
        torch.testing.assert_close(model.eval()(x), reference(x), rtol=0, atol=0)


def test_a_cache_filled_in_eval_mode_is_refused_in_training_mode() -> None:
    """HWFA2's full layers cache unrotated keys in eval mode (ReRoPE) and rotated ones in
    training (RoPE): a cache continued in the other mode is refused in one line, naming
    the inference-only remap."""
    model = model_of(full_layers=1)
    x = ids(batch=1)
    cache = KVCache.for_model(model, 1, x.shape[1])
    with torch.no_grad():
        model(x[:, :20], cache=cache)
        with pytest.raises(
            ValueError,
            match="filled in eval mode and is continued in training mode.*'rerope' "
            "remaps positions in eval mode only",
        ) as err:
            model.train()(x[:, 20:21], cache=cache)
    assert "\n" not in str(err.value)


# Su (kexue.fm/archives/9731): one full layer at L/2, two at L/3 and 2L/3, floored; written out for
# the depths that are not multiples of 3 (or of 2), where an index formula like 2 * (L // 3) would
# put the second one elsewhere
FULL_BY_DEPTH = {
    (4, 1): (2,),
    (5, 1): (2,),
    (7, 1): (3,),
    (8, 1): (4,),
    (4, 2): (1, 2),
    (5, 2): (1, 3),
    (7, 2): (2, 4),
    (8, 2): (2, 5),
}


@pytest.mark.parametrize(("n_layers", "full_layers"), list(FULL_BY_DEPTH))
def test_full_layers_at_depths_that_are_not_multiples_of_three(
    n_layers: int, full_layers: int
) -> None:
    full = FULL_BY_DEPTH[n_layers, full_layers]
    c = build_preset("hwfa2", n_layers=n_layers, full_layers=full_layers, **SHAPE)
    assert tuple(i for i in range(n_layers) if not c.layer_is_sliding(i)) == full
    model = TransformerLM(c)
    # the built layers too
    assert [w is None for w in model.layer_windows] == [i in full for i in range(n_layers)]

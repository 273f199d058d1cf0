"""Whole-model properties: causality for every preset and position type, tied storage,
softcap bounds, embedding scale, dropout, init statistics, and a sample of the cross product
of switches training."""

import itertools
import math
import random

import pytest
import torch

from archlab import ModelConfig, TransformerLM, build_preset
from archlab.nn.presets import PRESETS
from tests.conftest import randomize_

POSITIONS = ["rope", "sinusoidal", "learned", "relative", "alibi", "none"]


def _rope_free(cfg_kwargs: dict, position: str) -> dict:
    """Preset fields minus the RoPE options when switching a preset to another position type."""
    if position != "rope":
        cfg_kwargs.pop("rope", None)
    return {**cfg_kwargs, "position": position}


@pytest.mark.parametrize("preset", list(PRESETS))
@pytest.mark.parametrize("position", POSITIONS)
def test_future_tokens_never_change_past_logits(preset, position):
    base = build_preset(preset, "tiny", n_layers=2, d_model=32, max_seq_len=32, dropout=0.0)
    cfg = ModelConfig(**_rope_free(base.to_dict(), position))
    model = randomize_(TransformerLM(cfg), 0.2).eval()
    ids = torch.randint(0, cfg.vocab_size, (2, 16))
    t = 9
    changed = ids.clone()
    changed[:, t:] = torch.randint(0, cfg.vocab_size, (2, 16 - t))
    a, b = model(ids), model(changed)
    torch.testing.assert_close(a[:, :t], b[:, :t], rtol=0, atol=1e-5)
    assert not torch.allclose(a[:, t:], b[:, t:])  # the later positions do see the change


def test_tied_embeddings_share_storage():
    model = TransformerLM(ModelConfig(tie_embeddings=True))
    assert model.lm_head.weight is model.embed_tokens.weight
    assert model.lm_head.weight.data_ptr() == model.embed_tokens.weight.data_ptr()
    assert "lm_head.weight" not in dict(model.named_parameters())  # one tensor, counted once
    untied = TransformerLM(ModelConfig(tie_embeddings=False))
    assert model.num_parameters() == untied.num_parameters() - 256 * 64


@pytest.mark.parametrize("cap", [0.5, 30.0])
def test_final_softcap_bounds_logits(cap):
    model = TransformerLM(ModelConfig(final_softcap=cap))
    with torch.no_grad():
        model.lm_head.weight.mul_(1e4)
    logits = model(torch.randint(0, 256, (2, 12)))
    assert logits.abs().max() <= cap
    assert logits.abs().max() > 0.9 * cap  # and the cap is reached, not trivially satisfied


def test_embed_scale_and_absolute_positions_enter_the_first_layer():
    cfg = ModelConfig(embed_scale="sqrt_d", position="sinusoidal", d_model=32, n_heads=4)
    model = TransformerLM(cfg)
    seen = {}
    model.layers[0].register_forward_pre_hook(lambda m, args: seen.update(x=args[0]))
    ids = torch.randint(0, 256, (1, 5))
    model(ids)
    from archlab.nn.positions.absolute import sinusoidal_embedding

    expected = model.embed_tokens(ids) * math.sqrt(32) + sinusoidal_embedding(
        torch.arange(5)[None], 32
    )
    torch.testing.assert_close(seen["x"], expected)


def test_dropout_active_in_train_mode_only():
    model = TransformerLM(ModelConfig(dropout=0.3, attn_dropout=0.2))
    ids = torch.randint(0, 256, (2, 10))
    model.train()
    assert not torch.equal(model(ids), model(ids))
    model.eval()
    no_drop = TransformerLM(ModelConfig())
    no_drop.load_state_dict(model.state_dict())
    torch.testing.assert_close(model(ids), no_drop(ids))


def test_explicit_positions_equal_default():
    model = TransformerLM(ModelConfig())
    ids = torch.randint(0, 256, (2, 10))
    torch.testing.assert_close(model(ids, positions=torch.arange(10)), model(ids))
    torch.testing.assert_close(model(ids, positions=torch.arange(10).expand(2, 10)), model(ids))


def test_rope_logits_invariant_to_a_global_position_shift():
    model = randomize_(TransformerLM(ModelConfig(d_model=32, n_heads=4)), 0.2)
    ids = torch.randint(0, 256, (2, 10))
    torch.testing.assert_close(
        model(ids, positions=torch.arange(100, 110)), model(ids), rtol=1e-4, atol=1e-4
    )
    learned = TransformerLM(ModelConfig(position="learned"))
    assert not torch.allclose(learned(ids, positions=torch.arange(3, 13)), learned(ids))


def test_learned_positions_past_table_raise():
    model = TransformerLM(ModelConfig(position="learned", max_seq_len=16))
    with pytest.raises(ValueError, match="position 19 is past the learned position table"):
        model(torch.randint(0, 256, (1, 20)))


def test_sliding_window_hides_tokens_beyond_it():
    model = randomize_(
        TransformerLM(ModelConfig(n_layers=1, sliding_window=4, d_model=32, n_heads=4)), 0.3
    )
    ids = torch.randint(0, 256, (1, 12))
    changed = ids.clone()
    changed[0, 2] = (ids[0, 2] + 1) % 256
    a, b = model(ids), model(changed)
    torch.testing.assert_close(a[0, 6:], b[0, 6:])  # positions >= 2 + 4 cannot see token 2
    assert not torch.allclose(a[0, 2:6], b[0, 2:6])


def test_trunc_normal_init_statistics():
    cfg = ModelConfig(d_model=256, n_heads=4, n_layers=2, vocab_size=512, init="trunc_normal")
    model = TransformerLM(cfg)
    w = model.layers[0].mlp.down_proj.weight
    std = math.sqrt(2 / (w.shape[0] + w.shape[1]))
    assert w.abs().max() <= 3 * std + 1e-6
    # a N(0, s) clipped at 3s has std 0.986 s
    assert abs(float(w.detach().std()) / (std * 0.986) - 1) < 0.05
    e = model.embed_tokens.weight
    assert e.abs().max() <= 3.0 and abs(float(e.detach().std()) - 0.986) < 0.05


def test_gpt2_init_scales_residual_projections():
    model = TransformerLM(ModelConfig(d_model=256, n_heads=4, n_layers=8, init="gpt2"))
    assert abs(float(model.layers[0].attn.qkv_proj.weight.detach().std()) - 0.02 * 0.986) < 2e-3
    assert (
        abs(float(model.layers[0].attn.o_proj.weight.detach().std()) - 0.02 / math.sqrt(16) * 0.986)
        < 1e-3
    )


SWITCHES = {
    "norm": ["rmsnorm", "layernorm"],
    "norm_position": ["pre", "post", "double", "nonresidual_post"],
    "block": ["serial", "parallel"],
    "ffn": ["mlp", "swiglu", "geglu", "reglu"],
    "position": POSITIONS,
    "n_kv_heads": [4, 2, 1],
    "qk_norm": ["none", "rmsnorm", "layernorm"],
    "bias": [False, True],
    "attn_softcap": [None, 20.0],
    "tie_embeddings": [False, True],
    "embed_scale": ["none", "sqrt_d"],
    "sliding_window": [None, 5],
}


def _sample_switches(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    every = list(itertools.product(*SWITCHES.values()))
    return [dict(zip(SWITCHES, combo)) for combo in rng.sample(every, n)]


@pytest.mark.parametrize(
    "switches", _sample_switches(40), ids=lambda s: "-".join(str(v) for v in s.values())
)
def test_switch_combinations_train(switches):
    cfg = ModelConfig(d_model=32, n_heads=4, n_layers=2, vocab_size=64, max_seq_len=32, **switches)
    model = TransformerLM(cfg)
    ids = torch.randint(0, 64, (2, 12))
    logits = model(ids)
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 64), ids[:, 1:].reshape(-1))
    loss.backward()
    assert torch.isfinite(loss)
    for name, p in model.named_parameters():
        assert p.grad is not None, name
        assert torch.isfinite(p.grad).all(), name


@pytest.mark.parametrize("position", ["rope", "alibi", "relative", "learned"])
def test_meta_device_build_then_init_equals_eager_build(position):
    cfg = ModelConfig(position=position, d_model=32, n_heads=4)
    eager = TransformerLM(cfg)
    torch.manual_seed(1)
    eager.init_weights()  # same RNG stream as the lazy model's single init below
    with torch.device("meta"):
        lazy = TransformerLM(cfg)
    lazy.to_empty(device="cpu")
    torch.manual_seed(1)
    lazy.init_weights()
    for (name, a), (_, b) in zip(eager.state_dict().items(), lazy.state_dict().items()):
        assert torch.equal(a, b), name
    ids = torch.randint(0, 256, (2, 9))
    torch.testing.assert_close(lazy(ids), eager(ids))


@pytest.mark.parametrize(
    ("ids", "message"),
    [
        (torch.tensor([[1, 64]]), r"token id 64 is outside the model's vocabulary \(0..63\)"),
        (torch.tensor([[-1, 3]]), r"token id -1 is outside the model's vocabulary \(0..63\)"),
        (
            torch.tensor([[1.0, 2.0]]),
            "input_ids must hold integer token ids, got dtype torch.float32",
        ),
    ],
    ids=["past-the-end", "negative", "float"],
)
def test_bad_token_ids_fail_in_one_line(ids: torch.Tensor, message: str) -> None:
    model = TransformerLM(ModelConfig(vocab_size=64, d_model=16, n_layers=1, n_heads=2))
    with pytest.raises(ValueError, match=message):
        model(ids)


def _trunc_std(std: float) -> float:
    """Standard deviation of N(0, std^2) truncated at +-3 std: std * sqrt(1 - 2a phi(a) / (2 Phi(a)
    - 1)), a = 3."""
    a = 3.0
    phi = math.exp(-a * a / 2) / math.sqrt(2 * math.pi)
    mass = math.erf(a / math.sqrt(2))  # 2 Phi(a) - 1
    return std * math.sqrt(1 - 2 * a * phi / mass)


@pytest.mark.parametrize("tie", [False, True], ids=["untied", "tied"])
def test_trunc_normal_std_of_every_matrix_and_the_embedding(tie: bool) -> None:
    torch.manual_seed(0)
    cfg = ModelConfig(
        d_model=128, n_heads=4, n_layers=2, vocab_size=1024, tie_embeddings=tie, init="trunc_normal"
    )
    model = TransformerLM(cfg)
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and not (tie and module is model.lm_head):
            w = module.weight.detach().double()
            std = math.sqrt(2.0 / (module.in_features + module.out_features))
            assert float(w.abs().max()) <= 3 * std + 1e-7, name
            assert abs(float(w.std()) / _trunc_std(std) - 1) < 0.04, name
    e = model.embed_tokens.weight.detach().double()
    # a tied table is also the output matrix: unit-scale logits
    std = cfg.d_model**-0.5 if tie else 1.0
    assert float(e.abs().max()) <= 3 * std + 1e-7
    assert abs(float(e.std()) / _trunc_std(std) - 1) < 0.03

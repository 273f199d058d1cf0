"""RoPE frequency schedules (nn/positions/rope.py): each against transformers' own
function, the papers' float64 formulas (YaRN, arXiv 2309.00071) and factor 1 = plain RoPE;
the HF mapping; validation; and whole models against transformers' Llama with the same
weights and rope_parameters."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from archlab import ModelConfig, RopeScaling, TransformerLM
from archlab.interop.hf import hf_state_dict
from archlab.interop.hf_rope import hf_max_position_embeddings, rope_from_hf, rope_to_hf
from archlab.nn.positions.frequencies import base_inv_freq
from archlab.nn.positions.rope import RotaryEmbedding
from archlab.nn.positions.scaling import ROPE_KINDS

THETA, HEAD_DIM, L0 = 10000.0, 32, 64
SCALINGS = {
    "linear": RopeScaling("linear", 4.0),
    "ntk": RopeScaling("ntk", 4.0),
    "ntk_by_parts": RopeScaling("ntk_by_parts", 4.0, L0),
    "dynamic": RopeScaling("dynamic", 4.0, L0),
    "yarn": RopeScaling("yarn", 4.0, L0),
    "yarn_deepseek": RopeScaling(
        "yarn",
        8.0,
        L0,
        beta_fast=16.0,
        beta_slow=2.0,
        mscale=1.0,
        mscale_all_dim=0.7,
        truncate=False,
    ),
    "llama3": RopeScaling("llama3", 8.0, L0, low_freq_factor=1.0, high_freq_factor=4.0),
}


def hf_config(scaling: RopeScaling, d_rot: int, **sizes: int) -> LlamaConfig:
    """A transformers Llama config carrying `scaling` through our exporter,
    with head_dim HEAD_DIM."""
    params = rope_to_hf(scaling, THETA, d_rot)
    if d_rot != sizes.get("head_dim", HEAD_DIM):
        params["partial_rotary_factor"] = d_rot / sizes.get("head_dim", HEAD_DIM)
    defaults = dict(hidden_size=128, num_attention_heads=4, head_dim=HEAD_DIM)
    return LlamaConfig(
        **{**defaults, **sizes},
        max_position_embeddings=hf_max_position_embeddings(scaling, 4 * L0),
        rope_parameters=params,
    )


def hf_inv_freq(config: LlamaConfig, seq_len: int | None) -> tuple[torch.Tensor, float]:
    params = config.rope_parameters
    # transformers' formula, over the rotary dims (Llama's ignores partial)
    if params["rope_type"] == "default":
        d_rot = int(config.head_dim * params.get("partial_rotary_factor", 1.0))
        return 1.0 / (
            params["rope_theta"] ** (torch.arange(0, d_rot, 2, dtype=torch.float) / d_rot)
        ), 1.0
    return ROPE_INIT_FUNCTIONS[params["rope_type"]](config, "cpu", seq_len=seq_len)


@pytest.mark.parametrize("d_rot", [HEAD_DIM, HEAD_DIM // 2])
@pytest.mark.parametrize("name", SCALINGS)
def test_matches_transformers(name: str, d_rot: int) -> None:
    scaling = SCALINGS[name]
    config = hf_config(scaling, d_rot)
    lengths = [None, L0 // 2, L0, 3 * L0 + 5] if scaling.kind == "dynamic" else [None]
    for seq_len in lengths:
        ref, ref_factor = hf_inv_freq(config, seq_len)
        extra = (seq_len,) if scaling.kind == "dynamic" else ()
        ours, factor = ROPE_KINDS[scaling.kind].frequency_function()(d_rot, THETA, scaling, *extra)
        torch.testing.assert_close(ours.float(), ref.float(), rtol=1e-6, atol=1e-6)
        assert factor == pytest.approx(ref_factor, abs=1e-6)


@pytest.mark.parametrize("name", [n for n in SCALINGS if n != "yarn_deepseek"])
def test_factor_one_is_plain_rope(name: str) -> None:
    fields = {k: v for k, v in vars(SCALINGS[name]).items() if k != "factor"}
    scaling = RopeScaling(**fields, factor=1.0)
    # dynamic: up to M; past M see the test below
    extra = (L0,) if scaling.kind == "dynamic" else ()
    inv_freq, factor = ROPE_KINDS[scaling.kind].frequency_function()(
        HEAD_DIM, THETA, scaling, *extra
    )
    torch.testing.assert_close(inv_freq, base_inv_freq(HEAD_DIM, THETA), rtol=1e-12, atol=0)
    assert factor == 1.0


def test_dynamic_factor_one_is_the_papers_dynamic_ntk() -> None:
    """transformers' s_eff = factor * l / M - (factor - 1) is the paper's s = l / M only
    at factor 1."""
    d, ell = HEAD_DIM, 3 * L0
    paper = RopeScaling("dynamic", 1.0, L0)
    ours, _ = ROPE_KINDS["dynamic"].frequency_function()(d, THETA, paper, ell)
    expected = torch.tensor(
        [(THETA * (ell / L0) ** (d / (d - 2))) ** (-2 * i / d) for i in range(d // 2)],
        dtype=torch.float64,
    )
    torch.testing.assert_close(ours, expected, rtol=1e-12, atol=0)
    stretched, _ = ROPE_KINDS["dynamic"].frequency_function()(
        d, THETA, RopeScaling("dynamic", 2.0, L0), 2 * L0
    )
    s_eff = 3.0  # factor 2 at l = 2M: the paper would stretch by 2
    torch.testing.assert_close(
        stretched, base_inv_freq(d, THETA * s_eff ** (d / (d - 2))), rtol=1e-12, atol=0
    )


def paper_inv0(d: int) -> list[float]:
    return [THETA ** (-2 * i / d) for i in range(d // 2)]


def test_ntk_aware_paper_formula() -> None:
    s, d = 4.0, HEAD_DIM
    base = THETA * s ** (d / (d - 2))  # YaRN paper eq. 14-15
    expected = torch.tensor([base ** (-2 * i / d) for i in range(d // 2)], dtype=torch.float64)
    ours, _ = ROPE_KINDS["ntk"].frequency_function()(d, THETA, SCALINGS["ntk"])
    torch.testing.assert_close(ours, expected, rtol=1e-12, atol=0)
    inv0 = paper_inv0(d)
    # the highest frequency is not interpolated
    assert ours[0].item() == pytest.approx(inv0[0], rel=1e-12)
    # the lowest is interpolated by exactly s
    assert ours[-1].item() == pytest.approx(inv0[-1] / s, rel=1e-12)


@pytest.mark.parametrize("alpha,beta", [(1.0, 32.0), (2.0, 8.0)])
def test_ntk_by_parts_paper_formula(alpha: float, beta: float) -> None:
    s, d = 4.0, HEAD_DIM
    expected = []
    for w in paper_inv0(d):  # YaRN paper eq. 17-18, ramp linear in r = L / lambda
        r = L0 / (2 * math.pi / w)
        gamma = 0.0 if r < alpha else 1.0 if r > beta else (r - alpha) / (beta - alpha)
        expected.append((1 - gamma) * w / s + gamma * w)
    scaling = RopeScaling("ntk_by_parts", s, L0, beta_fast=beta, beta_slow=alpha)
    ours, factor = ROPE_KINDS["ntk_by_parts"].frequency_function()(d, THETA, scaling)
    torch.testing.assert_close(
        ours, torch.tensor(expected, dtype=torch.float64), rtol=1e-12, atol=0
    )
    assert factor == 1.0
    # ramp is exercised
    assert 0 < sum(alpha <= L0 * w / (2 * math.pi) <= beta for w in paper_inv0(d)) < d // 2


def test_yarn_temperature_and_ramp_ends() -> None:
    s = 4.0
    inv_freq, factor = ROPE_KINDS["yarn"].frequency_function()(HEAD_DIM, THETA, SCALINGS["yarn"])
    assert factor == pytest.approx(0.1 * math.log(s) + 1)  # sqrt(1/t) of the paper, eq. 22
    inv0 = base_inv_freq(HEAD_DIM, THETA)
    r = L0 * inv0 / (2 * math.pi)
    torch.testing.assert_close(inv_freq[r > 32], inv0[r > 32])  # fast pairs: extrapolated
    torch.testing.assert_close(inv_freq[r < 1], inv0[r < 1] / s)  # slow pairs: interpolated


def test_dynamic_rotary_follows_the_length() -> None:
    scaling = SCALINGS["dynamic"]
    rotary = RotaryEmbedding(HEAD_DIM, THETA, scaling=scaling)
    plain = RotaryEmbedding(HEAD_DIM, THETA)
    positions = torch.arange(3 * L0)[None].expand(2, -1)
    short = positions[:, :L0]
    torch.testing.assert_close(rotary(short), plain(short))  # up to M: the base is unchanged
    seq_len = torch.tensor([L0, 3 * L0])
    cos, sin = rotary(positions, seq_len)  # each row at its own length
    torch.testing.assert_close(cos[0], plain(positions)[0][0])
    config = hf_config(scaling, HEAD_DIM)
    ref, _ = hf_inv_freq(config, 3 * L0)
    angles = positions[1].float()[:, None] * ref.float()
    # half layout: [cos | cos]
    torch.testing.assert_close(cos[1, :, 0, : HEAD_DIM // 2], angles.cos(), atol=1e-5, rtol=0)
    # default: max + 1
    torch.testing.assert_close(rotary(positions)[1], (cos, sin)[1][1:].expand(2, -1, -1, -1))


@pytest.mark.parametrize("name", SCALINGS)
def test_hf_round_trip(name: str) -> None:
    scaling = SCALINGS[name]
    config = hf_config(scaling, HEAD_DIM)
    back = rope_from_hf(config.rope_parameters, config.max_position_embeddings)
    extra = (3 * L0,) if scaling.kind == "dynamic" else ()
    theta = config.rope_parameters["rope_theta"]
    ours, factor = ROPE_KINDS[scaling.kind].frequency_function()(HEAD_DIM, THETA, scaling, *extra)
    again, again_factor = ROPE_KINDS[back.kind].frequency_function()(HEAD_DIM, theta, back, *extra)
    torch.testing.assert_close(again, ours, rtol=1e-12, atol=0)  # ntk returns as none with its base
    assert again_factor == factor


def test_from_hf_legacy_keys_and_defaults() -> None:
    # HF reads these with `or`
    legacy = {"type": "yarn", "factor": 4.0, "beta_fast": None, "beta_slow": 0}
    assert rope_from_hf(legacy, 256) == RopeScaling("yarn", 4.0, 256)
    assert (
        rope_from_hf({"rope_type": "yarn", "original_max_position_embeddings": 64}, 256).factor
        == 4.0
    )
    assert rope_from_hf({"rope_type": "dynamic", "factor": 2.0}, 128).original_max_seq_len == 128
    assert rope_from_hf(None, 128) == RopeScaling()
    with pytest.raises(ValueError, match="rope_type='longrope' is not supported"):
        rope_from_hf({"rope_type": "longrope"}, 128)


def llama_pair(scaling: RopeScaling) -> tuple[TransformerLM, LlamaForCausalLM]:
    """Our Llama and transformers' with the same weights (q/k/v and gate/up are row slices of
    the fused ones)."""
    torch.manual_seed(0)
    c = ModelConfig(
        vocab_size=64,
        d_model=64,
        n_layers=2,
        n_heads=4,
        n_kv_heads=2,
        max_seq_len=4 * L0,
        rope=dict(scaling=scaling),
    )
    ours = TransformerLM(c).eval()
    hf = LlamaForCausalLM(
        hf_config(
            scaling,
            c.rope_dim,
            hidden_size=c.d_model,
            num_attention_heads=c.n_heads,
            num_key_value_heads=c.n_kv_heads,
            head_dim=c.head_dim,
            vocab_size=c.vocab_size,
            intermediate_size=c.d_ff,
            num_hidden_layers=c.n_layers,
            rms_norm_eps=c.norm_eps,
        )
    )
    hf.load_state_dict(hf_state_dict(ours, "llama"), strict=True)
    return ours, hf.eval()


@pytest.mark.parametrize("name", [*SCALINGS, "none"])
def test_model_logits_match_transformers(name: str) -> None:
    scaling = SCALINGS.get(name, RopeScaling())
    ours, hf = llama_pair(scaling)
    lengths = (L0 // 2, 2 * L0 + 3) if scaling.kind == "dynamic" else (2 * L0 + 3,)
    for length in lengths:
        # transformers' dynamic rotary keeps state between calls: start fresh
        if scaling.kind == "dynamic":
            _, hf = llama_pair(scaling)
        ids = torch.randint(0, 64, (1, length), generator=torch.Generator().manual_seed(length))
        with torch.no_grad():
            torch.testing.assert_close(ours(ids), hf(ids).logits, rtol=1e-5, atol=1e-5)


def test_yarn_ramp_clamp_at_the_top_dimension() -> None:
    """theta 100, L0 4096, d_rot 16: the ramp ends at pairs floor(5.24) = 5 and ceil(11.26) = 12,
    past the last pair (7) but inside transformers' clamp to d_rot - 1 = 15 (`find_correction_range`
    clamps to the dimension, not the pair count). So even the top pair is only 2/7 of the way to
    interpolation: a clamp to d_rot/2 - 1 would make it fully interpolated. Checked against float64
    math and transformers' own function."""
    theta, l0, d_rot, s = 100.0, 4096, 16, 4.0
    scaling = RopeScaling("yarn", s, l0)

    def pair_with_rotations(n: float) -> float:
        return d_rot * math.log(l0 / (2 * math.pi * n)) / (2 * math.log(theta))

    lo, hi = math.floor(pair_with_rotations(32.0)), math.ceil(pair_with_rotations(1.0))
    assert (lo, hi) == (5, 12) and d_rot // 2 - 1 < hi < d_rot - 1
    inv0 = theta ** (-torch.arange(0, d_rot, 2, dtype=torch.float64) / d_rot)
    ramp = ((torch.arange(d_rot // 2, dtype=torch.float64) - lo) / (hi - lo)).clamp(0, 1)
    assert ramp[-1] == pytest.approx(2 / 7)
    ours, factor = ROPE_KINDS["yarn"].frequency_function()(d_rot, theta, scaling)
    torch.testing.assert_close(ours, inv0 * (1 - ramp) + inv0 / s * ramp, rtol=1e-12, atol=0)
    config = LlamaConfig(
        hidden_size=64,
        num_attention_heads=4,
        head_dim=d_rot,
        max_position_embeddings=4 * l0,
        rope_parameters=rope_to_hf(scaling, theta, d_rot),
    )
    ref, ref_factor = ROPE_INIT_FUNCTIONS["yarn"](config, "cpu")
    torch.testing.assert_close(ours.float(), ref.float(), rtol=1e-6, atol=0)
    assert factor == pytest.approx(ref_factor)

"""TransformerLM.init_weights seeded per parameter name: common random numbers across arms
that reshape one tensor, bit-identical repeats, the hash itself, and the meta-device path
(tied tables included)."""

import hashlib

import pytest
import torch

from archlab import ModelConfig, TransformerLM
from archlab.nn.init import param_seed

SMALL = dict(d_model=32, n_heads=4, n_layers=2, vocab_size=64, max_seq_len=32)
RANDOM = (
    "qkv_proj.weight",
    "o_proj.weight",
    "up_proj.weight",
    "gate_up_proj.weight",
    "down_proj.weight",
    "embed_tokens.weight",
    "lm_head.weight",
    "pos_embed.weight",
    "rel_bias.weight",
)


def _init(cfg: ModelConfig, seed: int) -> dict[str, torch.Tensor]:
    model = TransformerLM(cfg)
    model.init_weights(seed=seed)
    return {k: v.clone() for k, v in model.state_dict().items()}


def test_param_seed_is_sha256_of_seed_and_name() -> None:
    # the documented rule, computed here independently: the first 8 digest bytes, little-endian,
    # top bit dropped
    digest = hashlib.sha256(b"7/layers.0.attn.qkv_proj.weight").digest()
    assert (
        param_seed(7, "layers.0.attn.qkv_proj.weight") == int.from_bytes(digest[:8], "little") // 2
    )
    assert param_seed(7, "a") != param_seed(8, "a") and param_seed(7, "a") != param_seed(7, "b")
    assert 0 <= param_seed(123, "x") < 2**63


def test_a_tensor_is_its_own_generator_draw() -> None:
    """qkv_proj of layer 1 is exactly trunc_normal from Generator(param_seed(seed, name)),
    whatever came before."""
    cfg = ModelConfig(**SMALL)
    w = _init(cfg, 5)["layers.1.attn.qkv_proj.weight"]
    std = (2.0 / (w.shape[0] + w.shape[1])) ** 0.5
    ref = torch.empty_like(w)
    torch.nn.init.trunc_normal_(
        ref,
        0.0,
        std,
        -3 * std,
        3 * std,
        generator=torch.Generator().manual_seed(param_seed(5, "layers.1.attn.qkv_proj.weight")),
    )
    assert torch.equal(w, ref)


def test_changing_d_ff_keeps_every_other_tensor() -> None:
    a, b = _init(ModelConfig(**SMALL, d_ff=96), 3), _init(ModelConfig(**SMALL, d_ff=128), 3)
    assert a.keys() == b.keys()
    mlp = [k for k in a if ".mlp." in k]
    assert mlp and all(a[k].shape != b[k].shape for k in mlp if k.endswith("proj.weight"))
    # attention, embeddings, norms, head: bit-identical
    for name in (k for k in a if ".mlp." not in k):
        assert torch.equal(a[name], b[name]), name
    assert torch.equal(a["layers.0.attn.qkv_proj.weight"], b["layers.0.attn.qkv_proj.weight"])
    assert torch.equal(a["embed_tokens.weight"], b["embed_tokens.weight"])


def test_same_seed_is_bit_identical_and_seeds_differ() -> None:
    cfg = ModelConfig(**SMALL, position="learned")
    a, again, other = _init(cfg, 11), _init(cfg, 11), _init(cfg, 12)
    for name in a:
        assert torch.equal(a[name], again[name]), name
        if name.endswith(RANDOM):
            # every random tensor moves with the seed
            assert not torch.equal(a[name], other[name]), name
    assert any(k.endswith("pos_embed.weight") for k in a)


def test_unseeded_init_follows_torch_manual_seed() -> None:
    cfg = ModelConfig(**SMALL)
    torch.manual_seed(4)
    a = TransformerLM(cfg).state_dict()
    torch.manual_seed(4)
    b = TransformerLM(cfg).state_dict()
    c = TransformerLM(cfg).state_dict()  # the global generator moved on: another draw
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(a["embed_tokens.weight"], c["embed_tokens.weight"])


@pytest.mark.parametrize("tie", [False, True], ids=["untied", "tied"])
@pytest.mark.parametrize("position", ["rope", "learned", "relative", "alibi"])
def test_meta_build_then_seeded_init_equals_eager(tie: bool, position: str) -> None:
    """The trainer's path (meta build, to_empty, init_weights(seed)) gives the eager model's weights
    and logits; `to_empty` unties a tied head, and init_weights ties it again."""
    cfg = ModelConfig(**SMALL, tie_embeddings=tie, position=position)
    eager = TransformerLM(cfg)
    eager.init_weights(seed=9)
    with torch.device("meta"):
        lazy = TransformerLM(cfg)
    lazy.to_empty(device="cpu")
    lazy.init_weights(seed=9)
    assert (lazy.lm_head.weight is lazy.embed_tokens.weight) == tie
    for name, value in eager.state_dict().items():
        assert torch.equal(value, lazy.state_dict()[name]), name
    ids = torch.randint(0, 64, (2, 9))
    torch.testing.assert_close(lazy(ids), eager(ids), rtol=0, atol=0)


@pytest.mark.parametrize(
    "fields",
    [
        dict(),
        dict(n_kv_heads=2, ffn="mlp", bias=True),
        dict(init="gpt2"),
        dict(block="gau", n_heads=1, head_dim=16),
    ],
)
def test_deepnorm_init_scales_exactly_v_o_and_ffn_by_beta(fields: dict) -> None:
    """DeepNorm's init against post-norm's with the same seed (each tensor is its own draw, so the
    two differ only where DeepNorm rescales): v rows of qkv_proj, o_proj and the FFN (a GAU: the u,
    v rows of uvz_proj and o_proj) are beta = (8N)^(-1/4) times post-norm's; q and k rows (a GAU's
    z), embeddings, head, norms and biases equal."""
    n = 3
    base = {**dict(d_model=32, n_heads=4, n_layers=n, vocab_size=64), **fields}
    deep = TransformerLM(ModelConfig(**base, norm_position="deepnorm"))
    post = TransformerLM(ModelConfig(**base, norm_position="post"))
    deep.init_weights(seed=5)
    post.init_weights(seed=5)
    beta = (8 * n) ** -0.25
    c = deep.config
    scaled = 0
    for (name, a), b in zip(deep.named_parameters(), post.parameters()):
        factor = torch.ones(a.shape[0], 1) if a.dim() == 2 else torch.ones(a.shape)
        if name.endswith("qkv_proj.weight"):
            factor[(c.n_heads + c.n_kv_heads) * c.head_dim :] = beta
        elif name.endswith("uvz_proj.weight"):
            factor[: 2 * c.d_ff] = beta
        elif name.endswith(
            ("o_proj.weight", "gate_up_proj.weight", "up_proj.weight", "down_proj.weight")
        ):
            factor[:] = beta
        scaled += int((factor != 1).any())
        torch.testing.assert_close(a, b * factor, rtol=1e-6, atol=0, msg=name)
    # per layer: qkv (v rows) / uvz (u, v rows), o, FFN x 2
    assert scaled == n * (2 if c.block == "gau" else 4)


def test_deepnorm_constants_are_the_decoder_only_ones() -> None:
    from archlab.nn.norms import deepnorm_constants

    # Wang et al. arXiv 2203.00555, decoder-only: (2N)^(1/4), (8N)^(-1/4)
    alpha, beta = deepnorm_constants(18)
    assert alpha == pytest.approx(36**0.25) and beta == pytest.approx(144**-0.25)

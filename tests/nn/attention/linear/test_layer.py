"""attn_kernel favor / vq through TransformerLM: the switch reaches every layer, decoding with
the state cache equals the full forward, the state does not grow with the context, softmax
weights load into FAVOR, the commitment loss joins the model's loss, and a tiny model trains
through `archlab train`."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from archlab import KVCache, ModelConfig, TransformerLM
from archlab.checkpoint import load_model
from archlab.cli import main
from archlab.infer.generate import left_pad
from archlab.nn.attention.linear.codebook import hard_assign
from archlab.nn.attention.linear.favor import FavorKernel
from archlab.nn.attention.linear.vq import VQKernel
from archlab.nn.config import VQ, ConfigError, Favor
from archlab.nn.config.choices import ATTN_KERNELS, LINEAR_KERNELS
from archlab.nn.positions.biases import alibi_slopes
from archlab.nn.presets import build_preset
from tests.train.conftest import one_thread, prepared  # noqa: F401 (the training tests' corpus)
from tests.train.test_trainer import cli_flags

VOCAB = 64
SMALL = dict(d_model=32, n_heads=4, n_kv_heads=2, n_layers=2, max_seq_len=64, vocab_size=VOCAB)
KERNELS = {
    "favor": dict(attn_kernel="favor", favor=Favor(features=32)),
    "favor-hyperbolic-iid": dict(
        attn_kernel="favor", favor=Favor(features=32, feature="hyperbolic", orthogonal=False)
    ),
    "vq": dict(attn_kernel="vq", vq=VQ(codes=16, block=4)),
    "vq-soft": dict(attn_kernel="vq", vq=VQ(codes=16, block=4, assign="soft", tau=0.5)),
    "vq-alibi": dict(attn_kernel="vq", vq=VQ(codes=16, block=4), position="alibi"),
}


def dotted(fields: dict[str, object]) -> dict[str, str]:
    """`model.*` flags of config fields, an option group as one flag
    per field (`model.favor.features`)."""
    flags = {}
    for key, value in fields.items():
        items = (
            dataclasses.asdict(value).items()
            if dataclasses.is_dataclass(value)
            else [(None, value)]
        )
        flags.update(
            {
                f"model.{key}" + (f".{sub}" if sub else ""): str(v)
                for sub, v in items
                if v is not None
            }
        )
    return flags


def tiny(**fields: object) -> TransformerLM:
    torch.manual_seed(0)
    model = TransformerLM(ModelConfig(**{**SMALL, **fields}))
    if fields.get("attn_kernel") == "vq":  # one training forward: codebooks from keys, one EMA step
        model.train()(torch.randint(0, VOCAB, (2, 16)))
    return model.eval()


def tokens(batch: int = 2, length: int = 23, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def test_registry_matches_config_names():
    assert set(ATTN_KERNELS) == {"softmax", *LINEAR_KERNELS}


def test_switch_reaches_every_layer_and_only_with_its_kernel():
    favor = tiny(attn_kernel="favor", favor=Favor(features=32, orthogonal=False))
    kernels = [layer.attn.linear.kernel for layer in favor.layers]
    assert all(
        isinstance(k, FavorKernel) and k.projection.shape == (32, 8) and not k.orthogonal
        for k in kernels
    )
    assert not torch.equal(kernels[0].projection, kernels[1].projection)  # one draw per layer
    vq = tiny(**KERNELS["vq-soft"])
    assert all(
        isinstance(layer.attn.linear.kernel, VQKernel)
        and layer.attn.linear.kernel.codebook.shape == (2, 16, 8)
        and layer.attn.linear.kernel.assign == "soft"
        for layer in vq.layers
    )
    assert all(layer.attn.linear is None for layer in tiny().layers)
    # Dh ln Dh = 17
    assert ModelConfig(**SMALL, attn_kernel="favor").favor.features == round(8 * 2.0794415)


@pytest.mark.parametrize(
    "fields",
    [
        dict(attn_kernel="favor", position="alibi"),
        dict(attn_kernel="favor", position="relative"),
        dict(attn_kernel="vq", position="relative"),
        dict(attn_kernel="vq", attn_softcap=30.0),
        dict(attn_kernel="favor", sliding_window=8),
        dict(attn_kernel="softmax", favor={"features": 64}),
        dict(attn_kernel="favor", favor={"feature": "hyperbolic", "features": 33}),
        dict(attn_kernel="vq", vq={"ema": 0.0}),
        dict(attn_kernel="vq", vq={"assign": "gumbel"}),
        dict(attn_kernel="linear"),
        dict(attn_kernel="favor", vq={"codes": 8}),
        dict(attn_kernel="vq", vq={"code": 8}),
    ],
)
def test_refused_in_one_line(fields):
    with pytest.raises(ConfigError) as err:
        ModelConfig(**fields)
    message = str(err.value)
    assert "\n" not in message and ("is not allowed" in message or "has no field 'code'" in message)


@torch.no_grad()
def cached_logits(
    model: TransformerLM, ids: torch.Tensor, chunks: tuple[int, ...], max_len: int = 64
):
    cache = KVCache.for_model(model, ids.shape[0], max_len)
    out, start = [], 0
    for size in chunks:
        out.append(model(ids[:, start : start + size], cache=cache))
        start += size
    out += [model(ids[:, t : t + 1], cache=cache) for t in range(start, ids.shape[1])]
    return torch.cat(out, 1), cache


@pytest.mark.parametrize("name", list(KERNELS))
@pytest.mark.parametrize("chunks", [(6,), (6, 5)])
def test_incremental_decoding_equals_full_forward(name, chunks):
    model = tiny(**KERNELS[name])
    ids = tokens()
    with torch.no_grad():
        full = model(ids)
        assert torch.equal(full, model(ids))  # eval: fixed features, frozen codebook
    cached, cache = cached_logits(model, ids, chunks)
    assert (cached - full).abs().max() < 1e-5
    assert all(k.numel() == 0 for k in cache.k) and all(s is not None for s in cache.states)


@pytest.mark.parametrize("name", ["favor", "vq", "vq-alibi"])
def test_state_does_not_grow_with_context(name):
    model = tiny(**KERNELS[name], max_seq_len=512)
    sizes = []
    for length, max_len in ((8, 64), (40, 512), (200, 4096)):  # same place in a block of 4
        _, cache = cached_logits(model, tokens(1, length), (length - 1,), max_len)
        sizes.append(cache.nbytes())
    assert len(set(sizes)) == 1, sizes
    softmax = tiny(max_seq_len=512)
    assert (
        KVCache.for_model(softmax, 1, 4096).nbytes()
        == 64 * KVCache.for_model(softmax, 1, 64).nbytes()
    )


@pytest.mark.parametrize("name", ["favor", "vq", "vq-alibi"])
def test_future_token_leaves_past_logits_bit_identical(name):
    model = tiny(**KERNELS[name])
    ids = tokens(1, 20)
    other = ids.clone()
    other[0, 13] = (other[0, 13] + 1) % VOCAB
    with torch.no_grad():
        assert torch.equal(model(ids)[:, :13], model(other)[:, :13])


@pytest.mark.parametrize("name", ["favor", "vq", "vq-alibi"])
def test_left_padded_batch_equals_each_row_alone(name):
    model = tiny(**KERNELS[name])
    rows = [tokens(1, 9, seed=2)[0], tokens(1, 5, seed=3)[0]]
    ids, mask = left_pad([r.tolist() for r in rows])
    cache = KVCache.for_model(model, 2, 16)
    cache.set_padding(mask)
    with torch.no_grad():
        batched = model(ids, cache=cache)[:, -1]
        for i, row in enumerate(rows):
            assert (model(row[None])[:, -1] - batched[i]).abs().max() < 1e-5


def test_softmax_weights_load_into_favor_and_approach_it_with_features():
    softmax = tiny(attn_kernel="softmax")
    ids = tokens(1, 16)
    with torch.no_grad():
        exact = softmax(ids)
        errors = []
        for m in (8, 512, 8192):
            favor = TransformerLM(
                ModelConfig(**SMALL, attn_kernel="favor", favor=Favor(features=m))
            ).eval()
            # strict: the kernel adds no trained parameters
            favor.load_state_dict(softmax.state_dict())
            errors.append((favor(ids).softmax(-1) - exact.softmax(-1)).abs().max().item())
    assert errors[0] > errors[1] > errors[2], errors


def test_commitment_loss_joins_the_loss():
    model = tiny(**KERNELS["vq"]).train()
    for layer in model.layers:
        # freeze the codebook so the two forwards below see the same codes
        layer.attn.linear.kernel.ema = 1.0
    ids = tokens(2, 16)
    out = model(ids[:, :-1], targets=ids[:, 1:])
    assert out.aux is not None and out.aux > 0
    assert torch.allclose(out.loss, out.ce + out.z + out.aux)
    manual = sum(layer.attn.linear.aux_loss for layer in model.layers)
    assert torch.allclose(out.aux, manual)
    assert tiny(**KERNELS["favor"]).train()(ids[:, :-1], targets=ids[:, 1:]).aux is None


@pytest.mark.parametrize("name", ["favor", "vq-soft", "vq-alibi"])
def test_tiny_model_trains_through_the_cli(name, prepared, tmp_path):  # noqa: F811
    flags = dotted(KERNELS[name])
    run = tmp_path / "run"
    args = cli_flags(
        prepared,
        run,
        steps="30",
        **flags,
        **{"optimizer.lr": "1e-2", "schedule.name": "constant", "schedule.warmup_steps": "3"},
    )
    assert main(["train", *args]) == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    losses = [r["loss"] for r in rows if "loss" in r and r.get("split", "train") == "train"]
    assert sum(losses[-5:]) / 5 < losses[0] - 0.5, losses
    if name.startswith("vq"):
        assert all(r["aux_loss"] > 0 for r in rows if "loss" in r and "aux_loss" in r)
        assert any("aux_loss" in r for r in rows)
    loaded, _ = load_model(run)
    assert loaded.config.attn_kernel == KERNELS[name]["attn_kernel"]
    if name.startswith("vq"):  # the codebook statistics are saved with the weights
        assert all(bool(layer.attn.linear.kernel.initialised) for layer in loaded.layers)


def test_build_preset_takes_the_kernel():
    cfg = build_preset("llama", "tiny", attn_kernel="vq", vq=VQ(codes=64, block=16, assign="soft"))
    assert (cfg.attn_kernel, cfg.vq.codes, cfg.vq.block, cfg.vq.assign) == ("vq", 64, 16, "soft")


def test_replace_rederives_the_feature_count():
    favor = ModelConfig(**SMALL, attn_kernel="favor")
    assert favor.replace(attn_kernel="softmax").favor is None
    # Dh = 16: 44
    assert favor.replace(d_model=64, n_heads=4).favor.features == round(16 * 2.7725887)
    assert favor.replace(favor={"features": 100}).favor.features == 100
    # an edit: features re-derived
    hyperbolic = favor.replace(favor={"feature": "hyperbolic", "orthogonal": False})
    # 17, even
    assert hyperbolic.favor == Favor(features=18, orthogonal=False, feature="hyperbolic")
    assert hyperbolic.replace(d_model=64, n_heads=4).favor == Favor(
        features=44, orthogonal=False, feature="hyperbolic"
    )
    set_away = favor.replace(favor={"features": 100, "redraw": 5})
    with pytest.raises(
        ConfigError, match=r"^ModelConfig.favor=Favor\(features=100.*only with attn_kernel='favor'"
    ):
        # an explicit group stays: refused with the switch off
        set_away.replace(attn_kernel="softmax")


@pytest.mark.parametrize("name", ["favor", "vq"])
def test_kernels_run_in_float32_under_bf16_autocast(name):
    """Under autocast the projections run in bf16 but the kernel's sums stay float32: the attention
    output equals the kernel fed the same (bf16-rounded) q, k, v in float32."""
    model = tiny(**KERNELS[name])
    attn = model.layers[0].attn.linear
    q, k, v = (torch.randn(1, n, 12, 8).bfloat16() for n in (4, 2, 2))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = attn(q, k, v, None)
    ref = attn.kernel(q.float(), k.float(), v.float(), None)[0]
    assert out.dtype == torch.bfloat16
    assert torch.equal(out, ref.bfloat16())


@pytest.mark.parametrize("name", ["favor", "vq-soft"])
def test_generate_decodes_through_the_state(name):
    """`infer.generate` works unchanged: greedy tokens equal the argmax of repeated full forwards,
    and the cache bytes it reports are the state's."""
    from archlab.infer.generate import generate
    from archlab.infer.sampling import SamplingConfig

    model = tiny(**KERNELS[name])
    prompt = tokens(1, 7)[0].tolist()
    out = generate(model, [prompt], SamplingConfig(max_new_tokens=6, temperature=0))
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(6):
            ids.append(int(model(torch.tensor([ids]))[0, -1].argmax()))
    assert out.tokens[0] == ids[7:]
    assert 0 < out.cache_bytes < 20_000


def test_vq_decoding_stays_eager_when_compile_is_asked():
    """compile_decode=True measures compiled against eager steps; a VQ state changes shape every
    step (each step would recompile), so the Decoder keeps eager decoding and the same tokens."""
    from archlab.infer.engine import Decoder
    from archlab.infer.sampling import SamplingConfig

    model = tiny(**KERNELS["vq"])
    sampling = SamplingConfig(max_new_tokens=6, temperature=0)
    decoder = Decoder(model, compile_decode=True)
    assert decoder._choose([[1, 2, 3]]) == "eager"
    assert (
        decoder.generate([[1, 2, 3]], sampling).tokens
        == Decoder(model).generate([[1, 2, 3]], sampling).tokens
    )


def test_alibi_reaches_the_vq_kernel_as_slopes_and_equals_dense_alibi_attention():
    """position="alibi" with attn_kernel="vq": the model hands ALiBi's slopes to the kernel (no (T,
    S) bias is built) and a layer's attention equals float64 softmax over its quantised keys with
    ALiBi's -m_h (i - j), query head h reading K/V head h // 2; the refusals name why T5's bias
    and FAVOR cannot."""
    model = tiny(**KERNELS["vq-alibi"]).double()
    inputs = model.attention_inputs(torch.arange(21)[None])[0]
    assert inputs.bias is None and torch.equal(inputs.slopes, alibi_slopes(4).double())
    attn = model.layers[0].attn
    x = torch.randn(1, 21, 32, dtype=torch.float64)
    with torch.no_grad():
        q, k, v = attn.project(x, inputs)
        got = attn.core(q, k, v, inputs, None)  # (B, T, H*Dh)
        kernel = attn.linear.kernel
        k_hat = hard_assign(k, kernel.codebook)[1].repeat_interleave(2, 1)  # (B, H, T, Dh)
        i = torch.arange(21)
        scores = kernel.scale * q @ k_hat.transpose(-1, -2) - alibi_slopes(4).double()[
            :, None, None
        ] * (i[:, None] - i[None, :])
        scores = scores.masked_fill(~torch.ones(21, 21, dtype=torch.bool).tril(), float("-inf"))
        want = (torch.softmax(scores, -1) @ v.repeat_interleave(2, 1)).transpose(1, 2).flatten(2)
    assert (got - want).abs().max() < 1e-10
    with pytest.raises(
        ConfigError, match="T5's bucketed bias is not a query factor times a key factor"
    ):
        ModelConfig(attn_kernel="vq", position="relative")
    with pytest.raises(
        ConfigError, match="not decayed per query head; attn_kernel='vq' takes ALiBi"
    ):
        ModelConfig(attn_kernel="favor", position="alibi")


def test_favor_rotates_queries_and_keys_before_its_feature_map():
    """RoPE composes with FAVOR+ (the kernel then estimates exp(q_m . R_(n-m) k_n)): a layer's
    attention equals favor_attention, with the layer's projection, on q and k rotated by an
    independent float64 RoPE (halves rotated, theta^(-2i/Dh)), query head h reading K/V head h // 2;
    without the rotation it does not."""
    from archlab.nn.attention.linear.favor import favor_attention

    model = tiny(**KERNELS["favor"]).double()
    T, H, K, Dh = 19, 4, 2, 8
    inputs = model.attention_inputs(torch.arange(T)[None])[0]
    attn = model.layers[0].attn
    x = torch.randn(1, T, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        got = attn.core(*attn.project(x, inputs), inputs, None)  # (B, T, H*Dh)
        q, k, v = attn.qkv_proj(x).view(1, T, H + 2 * K, Dh).split([H, K, K], dim=2)
        angle = torch.arange(T, dtype=torch.float64)[:, None] * model.config.rope.theta ** (
            -torch.arange(0, Dh, 2, dtype=torch.float64) / Dh
        )  # (T, Dh/2)
        # (T, 1, Dh)
        cos, sin = angle.cos().repeat(1, 2)[:, None], angle.sin().repeat(1, 2)[:, None]

        def rotate(t: torch.Tensor) -> torch.Tensor:
            return t * cos + torch.cat((-t[..., Dh // 2 :], t[..., : Dh // 2]), -1) * sin

        kernel = attn.linear.kernel
        errors = []
        for qq, kk in ((rotate(q), rotate(k)), (q, k)):
            o, _ = favor_attention(
                qq.transpose(1, 2),
                kk.repeat_interleave(2, 2).transpose(1, 2),
                v.repeat_interleave(2, 2).transpose(1, 2),
                kernel.projection.double(),
                kernel.scale,
            )
            errors.append(float((got - o.transpose(1, 2).flatten(2)).abs().max()))
    # the model's RoPE tables are float32: 1e-8 here
    assert errors[0] < 1e-6 < 1e-2 < errors[1], errors

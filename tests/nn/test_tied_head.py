"""Tied heads that start right (Su, kexue.fm/archives/9698): the step-0 loss of a tied model with
zeroed residual branches against log(e^(d sigma) + n - 1), the swap and projection heads near log
n + 1/2, the swap as an involution, the projection orthogonal, the switch reaching the head only,
costs and HF export."""

from __future__ import annotations

import math

import pytest
import torch

from archlab import TransformerLM, build_preset
from archlab.costs import parameter_counts
from archlab.interop.hf import InteropError, save_hf
from archlab.nn.config import ConfigError
from archlab.nn.functional import swap_halves


def tied(d: int, n: int, **fields: object) -> TransformerLM:
    torch.manual_seed(0)
    return TransformerLM(
        build_preset(
            "llama",
            "tiny",
            d_model=d,
            n_layers=2,
            n_heads=4,
            vocab_size=n,
            max_seq_len=64,
            tie_embeddings=True,
            **fields,
        )
    )


@torch.no_grad()
def step0_loss(model: TransformerLM) -> float:
    """Mean CE with o_proj and down_proj zeroed (every block the identity), on random pairs whose
    target is never the input token (adjacent tokens rarely repeat)."""
    for layer in model.layers:
        layer.attn.o_proj.weight.zero_()
        layer.mlp.down_proj.weight.zero_()
    n = model.config.vocab_size
    gen = torch.Generator().manual_seed(1)
    x = torch.randint(0, n, (64, 64), generator=gen)
    y = (x + torch.randint(1, n, x.shape, generator=gen)) % n
    return float(model(x, targets=y).ce)


# nats: the formula takes the other logits as 0, but they spread (variance d sigma^2) and the table
# is drawn once; measured off by <= 0.06 at std d^-1/2 and up to 0.16 at log(V)/d (d 64) over draws
FORMULA_TOL = {"default": 0.1, "log_n_over_d": 0.25}
UNIFORM_TOL = 0.1  # nats around log n + 1/2 (unit-variance logits: E log sum e^z = log n + 1/2)


@pytest.mark.parametrize(("d", "n"), [(64, 256), (256, 256)])
@pytest.mark.parametrize("init", ["default", "log_n_over_d"])
def test_plain_tied_model_starts_at_log_of_e_d_sigma_plus_n_minus_one(
    d: int, n: int, init: str
) -> None:
    model = tied(d, n, tied_embed_init=init)
    # the drawn table's std (trunc_normal clips at 3 std)
    sigma = float(model.embed_tokens.weight.detach().std())
    want = {"default": d**-0.5, "log_n_over_d": math.log(n) / d}[init]
    assert sigma == pytest.approx(want, rel=0.05)
    formula = math.log(math.exp(d * sigma) + n - 1)
    assert step0_loss(model) == pytest.approx(formula, abs=FORMULA_TOL[init])
    if init == "default":
        assert formula > math.log(n) + 2  # worse than uniform: the model predicts its input token


@pytest.mark.parametrize(("d", "n"), [(64, 256), (256, 256)])
@pytest.mark.parametrize("head", ["swap", "proj"])
def test_swap_and_proj_heads_start_near_log_n(d: int, n: int, head: str) -> None:
    assert step0_loss(tied(d, n, tied_head=head)) == pytest.approx(
        math.log(n) + 0.5, abs=UNIFORM_TOL
    )


def test_swap_is_a_permutation_and_an_involution() -> None:
    x = torch.randn(3, 5, 8, dtype=torch.float64)
    assert torch.equal(swap_halves(swap_halves(x)), x)
    perm = swap_halves(torch.eye(8))  # the matrix of the map, rows = basis vectors' images
    assert torch.equal(perm.sum(0), torch.ones(8)) and torch.equal(perm.sum(1), torch.ones(8))
    assert torch.equal(swap_halves(x), x @ perm.double())


def final_hidden(model: TransformerLM, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(the final norm's output, the logits) of one forward."""
    seen = {}
    hook = model.norm.register_forward_hook(lambda mod, args, out: seen.setdefault("h", out))
    logits = model(x)
    hook.remove()
    return seen["h"], logits


@pytest.mark.parametrize("head", ["swap", "proj"])
def test_the_switch_reaches_the_head_only(head: str) -> None:
    plain, other = tied(32, 64), tied(32, 64, tied_head=head)
    missing, unexpected = other.load_state_dict(plain.state_dict(), strict=False)
    assert missing == (["head_proj.weight"] if head == "proj" else []) and unexpected == []
    x = torch.randint(0, 64, (2, 9))
    with torch.no_grad():
        h_plain, logits_plain = final_hidden(plain, x)
        h, logits = final_hidden(other, x)
    assert torch.equal(h, h_plain)  # embedding, blocks and final norm untouched
    table = plain.embed_tokens.weight
    if head == "swap":  # = an untied head whose columns are swapped: a pure reparameterisation
        torch.testing.assert_close(logits, h @ swap_halves(table).T, rtol=1e-5, atol=1e-5)
    else:
        p = other.head_proj.weight.double()
        torch.testing.assert_close(p.T @ p, torch.eye(32, dtype=torch.float64), rtol=0, atol=1e-6)
        torch.testing.assert_close(
            logits, (h @ other.head_proj.weight.T) @ table.T, rtol=1e-5, atol=1e-5
        )
    assert not torch.allclose(logits, logits_plain, atol=1e-3)


def test_projection_counted_in_costs_and_parameters() -> None:
    model = tied(32, 64, tied_head="proj")
    counts = parameter_counts(model.config)
    assert counts["total"] == model.num_parameters()
    assert counts["lm_head"] - parameter_counts(tied(32, 64).config)["lm_head"] == 32 * 32


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"tied_head": "swap"},
            "ModelConfig.tied_head='swap' is not allowed: only with tie_embeddings=True",
        ),
        (
            {"tied_embed_init": "log_n_over_d"},
            "ModelConfig.tied_embed_init='log_n_over_d' is not allowed: only with",
        ),
        (
            {"tied_head": "mirror", "tie_embeddings": True},
            "ModelConfig.tied_head='mirror' is not allowed: one of plain",
        ),
        (
            {
                "tied_head": "swap",
                "tie_embeddings": True,
                "d_model": 33,
                "n_heads": 3,
                "head_dim": 12,
            },
            "needs an even d_model",
        ),
    ],
)
def test_bad_tied_head_settings_are_one_line_errors(fields: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        build_preset("llama", "tiny", **fields)


def test_hf_export_refuses_swap_and_proj_and_carries_the_init(tmp_path) -> None:
    for head in ("swap", "proj"):
        with pytest.raises(InteropError, match=f"tied_head='{head}'") as err:
            save_hf(tied(32, 64, tied_head=head), tmp_path / head)
        assert "\n" not in str(err.value) and not (tmp_path / head).exists()
    # an init, not a function change
    save_hf(tied(32, 64, tied_embed_init="log_n_over_d"), tmp_path / "init")
    assert (tmp_path / "init" / "config.json").is_file()

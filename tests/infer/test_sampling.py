"""infer/sampling.py: the sampled distribution against its definition (float64), greedy, and
SamplingConfig validation (every field rejects values outside its domain, NaN and inf included,
in one line)."""

from __future__ import annotations

import math

import pytest
import torch

from archlab.infer.sampling import SamplingConfig, sample_next, sampling_probs

BAD = [
    ("temperature", math.inf),
    ("temperature", math.nan),
    ("temperature", -0.1),
    ("temperature", True),
    ("top_p", math.nan),
    ("top_p", math.inf),
    ("top_p", 0.0),
    ("top_p", 1.5),
    ("top_k", 0),
    ("top_k", 2.5),
    ("max_new_tokens", 0),
    ("max_new_tokens", 1.5),
    ("max_new_tokens", math.inf),
    ("seed", 1.5),
    ("stop", ("",)),
    ("stop", (3,)),
]


@pytest.mark.parametrize("field,value", BAD)
def test_bad_values_fail_naming_the_field(field: str, value: object) -> None:
    with pytest.raises(ValueError) as err:
        SamplingConfig(**{field: value})
    message = str(err.value)
    assert message.startswith(f"SamplingConfig.{field}=") and "\n" not in message


@pytest.mark.parametrize(
    "fields",
    [
        dict(temperature=0),
        dict(temperature=0.7, top_k=1, top_p=1.0, seed=0),
        dict(max_new_tokens=1, stop=["\n\n"]),
    ],
)
def test_edge_values_are_accepted(fields: dict) -> None:
    config = SamplingConfig(**fields)
    assert config.stop == tuple(fields.get("stop", ()))


def test_sampling_distribution_matches_its_definition() -> None:
    logits = torch.tensor([[2.0, 1.0, 0.5, -1.0, 0.0]], dtype=torch.float64)
    p = (logits / 0.7).softmax(-1)[0]
    probs = sampling_probs(logits, SamplingConfig(temperature=0.7))[0].double()
    torch.testing.assert_close(probs, p, rtol=1e-6, atol=1e-7)
    top3 = sampling_probs(logits, SamplingConfig(temperature=0.7, top_k=3))[0].double()
    expected = torch.where(torch.tensor([1, 1, 1, 0, 0]).bool(), p, 0.0)
    torch.testing.assert_close(top3, expected / expected.sum(), rtol=1e-6, atol=1e-7)
    # nucleus: the smallest prefix (by probability) whose mass reaches top_p
    cum = p.sort(descending=True).values.cumsum(0)
    n_keep = int((cum < 0.8).sum()) + 1
    nucleus = sampling_probs(logits, SamplingConfig(temperature=0.7, top_p=0.8))[0]
    assert int((nucleus > 0).sum()) == n_keep and 1 < n_keep < 5
    assert math.isclose(float(nucleus.sum()), 1.0, rel_tol=1e-6)


def test_greedy_and_top_k_one_pick_the_argmax() -> None:
    logits = torch.randn(4, 50, generator=torch.Generator().manual_seed(0))
    assert torch.equal(sample_next(logits, SamplingConfig(temperature=0), None), logits.argmax(-1))
    g = torch.Generator().manual_seed(0)
    assert torch.equal(
        sample_next(logits, SamplingConfig(temperature=5.0, top_k=1), g), logits.argmax(-1)
    )


@pytest.mark.parametrize("order", [(0, 1, 2), (1, 0, 2), (2, 1, 0)])
def test_top_p_stops_where_the_prefix_mass_equals_top_p_exactly(
    order: tuple[int, int, int],
) -> None:
    """Nucleus = the smallest set of most likely tokens whose mass reaches top_p: with probabilities
    0.5, 0.25, 0.25 (exact in binary) and top_p = 0.5 the most likely token alone reaches it, so
    only it is kept; a strict `>` would keep the next one too. Just above 0.5 the second token is
    needed (ties: either)."""
    probs = torch.tensor([0.5, 0.25, 0.25])[list(order)]
    logits = probs.log()[None]
    top = order.index(0)
    kept = sampling_probs(logits, SamplingConfig(top_p=0.5))[0]
    assert kept.tolist() == [1.0 if i == top else 0.0 for i in range(3)]
    wider = sampling_probs(logits, SamplingConfig(top_p=0.5 + 1e-4))[0]
    assert (wider > 0).sum() == 2 and wider[top] == pytest.approx(2 / 3)

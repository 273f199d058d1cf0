"""Family parity: tiny random transformers models load into archlab with the same logits and the
same greedy decoding, and `save_hf` writes folders transformers loads with the same logits (litgpt's
`test_against_hf_*` pattern: built from transformers' config classes, no downloads)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from archlab import from_hf, save_hf
from archlab.infer.generate import generate
from archlab.infer.sampling import SamplingConfig
from archlab.nn.parallel import fusing
from tests.interop.family_cases import CASES, VOCAB, Case

NEW_TOKENS = 32
TOL = 1e-4


def randomize_hf_(model: torch.nn.Module, gain_center: float) -> torch.nn.Module:
    """Every parameter re-drawn: matrices N(0, 0.2^2), 1-D tensors (gains, biases) around
    `gain_center`, so a dropped bias, a missing (1 + w) or a swapped norm changes the logits."""
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.2 if p.dim() > 1 else 0.1)
            if p.dim() == 1:
                p.add_(gain_center)
    return model


@pytest.fixture(scope="module", params=CASES, ids=lambda c: c.id)
def built(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Case, Path]:
    """A saved random transformers model of one case (the folder
    transformers' save_pretrained writes)."""
    case: Case = request.param
    torch.manual_seed(0)
    hf = AutoModelForCausalLM.from_config(case.config(), dtype=torch.float32)
    randomize_hf_(hf, 0.0 if case.family.startswith("gemma") else 1.0).eval()
    folder = tmp_path_factory.mktemp(case.id)
    hf.save_pretrained(folder)
    return case, folder


def fresh_hf(folder: Path) -> torch.nn.Module:
    """transformers' model read back from disk: a fresh one per use, since dynamic
    RoPE keeps state."""
    return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()


def batch(case: Case) -> torch.Tensor:
    return torch.randint(0, VOCAB, (2, case.length), generator=torch.Generator().manual_seed(1))


def test_logits_match_transformers(built: tuple[Case, Path]) -> None:
    case, folder = built
    ours, ids = from_hf(folder), batch(case)
    with torch.no_grad():
        want, got = fresh_hf(folder)(ids).logits, ours(ids)
    assert (got - want).abs().max().item() <= TOL


def test_greedy_decoding_matches_transformers(built: tuple[Case, Path]) -> None:
    case, folder = built
    if not case.generate:
        pytest.skip("transformers' dynamic RoPE keeps the longest length seen between calls")
    ours, prompt = from_hf(folder), batch(case)[:1, :8]
    want = fresh_hf(folder).generate(
        prompt,
        max_new_tokens=NEW_TOKENS,
        min_new_tokens=NEW_TOKENS,
        do_sample=False,
        pad_token_id=0,
    )
    got = generate(
        ours, [prompt[0].tolist()], SamplingConfig(max_new_tokens=NEW_TOKENS, temperature=0.0)
    )
    assert got.tokens[0] == want[0, prompt.shape[1] :].tolist()


def test_save_hf_round_trip(built: tuple[Case, Path], tmp_path: Path) -> None:
    case, folder = built
    ours, ids = from_hf(folder), batch(case)
    save_hf(ours, tmp_path / "out")
    again = from_hf(tmp_path / "out")
    assert again.config == ours.config
    for (name, a), (_, b) in zip(ours.state_dict().items(), again.state_dict().items()):
        assert torch.equal(a, b), name
    with torch.no_grad():
        want, got = fresh_hf(folder)(ids).logits, fresh_hf(tmp_path / "out")(ids).logits
    assert (got - want).abs().max().item() <= TOL


def test_fused_parallel_training_forward_matches_transformers(built: tuple[Case, Path]) -> None:
    """Parallel families (GPT-NeoX, GPT-J, Phi) through the fused block's GEMMs, which
    run while autograd records: the loaded separate projections, concatenated per call,
    give transformers' logits."""
    case, folder = built
    ours, ids = from_hf(folder), batch(case)
    if ours.config.block != "parallel":
        pytest.skip("a serial block has nothing to fuse")
    layer = ours.layers[0]
    assert fusing(layer.attn, layer.mlp) and (layer.fuse_in or layer.fuse_out)
    with torch.no_grad():
        want = fresh_hf(folder)(ids).logits
    got = ours(ids)  # grad enabled: the fused path
    assert (got.detach() - want).abs().max().item() <= TOL

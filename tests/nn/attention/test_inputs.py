"""The attention inputs (nn/attention/inputs.py): the log-n factor per query.

Log-n at inference only ("log n" with a dagger in Su's tables, kexue.fm/archives/9708;
bojone/rerope's patch): `ModelConfig.with_inference_logn` scales each query by max(1, log(n)
/ log(N_train)), n = position + 1, on a model trained without log-n; up to N_train nothing
changes, past it each query's scores grow as log-n scales them. Also `archlab generate
--logn` and `with_inference_logn(model)`."""

from __future__ import annotations

import math

import pytest
import torch

from archlab import ModelConfig, TransformerLM
from archlab.cli import main
from archlab.infer.generate import with_inference_logn
from archlab.nn.config import ConfigError

N, VOCAB = 16, 64
SMALL = dict(d_model=32, n_heads=4, n_layers=1, max_seq_len=N, vocab_size=VOCAB)


def tiny(**fields: object) -> TransformerLM:
    torch.manual_seed(0)
    return TransformerLM(ModelConfig(**{**SMALL, **fields})).eval()


def test_query_scale_is_max_one_log_n_over_log_n_train_per_query() -> None:
    model = tiny()
    # without the flag: nothing
    assert model.attention_inputs(torch.arange(40)[None])[0].query_scale is None
    logn = with_inference_logn(model)
    scale = logn.attention_inputs(torch.arange(40).expand(2, 40))[0].query_scale  # (B, 1, T, 1)
    want = torch.tensor([max(1.0, math.log(p + 1) / math.log(N)) for p in range(40)])
    torch.testing.assert_close(
        scale[:, 0, :, 0].double(), want.double().expand(2, 40), rtol=1e-6, atol=0
    )


def test_logits_unchanged_up_to_the_training_length_and_log_n_scaled_past_it() -> None:
    """One layer, so row m depends on its own query's scale only: rows m < N equal the model without
    log-n, rows m >= N - 1 equal the same weights with training-time (unclipped) log-n, whose factor
    there is >= 1."""
    model = tiny()
    logn, trained = (
        with_inference_logn(model),
        TransformerLM(model.config.replace(attn_logn=True)).eval(),
    )
    trained.load_state_dict(model.state_dict())
    x = torch.randint(0, VOCAB, (2, 3 * N), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        got, plain, unclipped = logn(x), model(x), trained(x)
    torch.testing.assert_close(got[:, :N], plain[:, :N], rtol=0, atol=0)
    torch.testing.assert_close(got[:, N - 1 :], unclipped[:, N - 1 :], rtol=1e-6, atol=1e-6)
    assert (got[:, N:] - plain[:, N:]).abs().max() > 1e-3


def test_same_weights_and_mode() -> None:
    model = tiny().train()
    logn = with_inference_logn(model)
    assert logn.training and logn.config.attn_logn and logn.config.attn_logn_clip
    assert all(
        torch.equal(a, b) for a, b in zip(model.state_dict().values(), logn.state_dict().values())
    )


def test_refusals_are_one_line() -> None:
    with pytest.raises(
        ConfigError, match=r"attn_logn=True is not allowed: False for log-n at inference only"
    ):
        tiny(attn_logn=True).config.with_inference_logn()
    with pytest.raises(
        ConfigError, match=r"attn_logn_clip=True is not allowed: only with attn_logn=True"
    ):
        ModelConfig(**SMALL, attn_logn_clip=True)


def test_generate_cli_logn(monkeypatch, capsys) -> None:  # noqa: ANN001
    from archlab.data.tokenizer import build_tokenizer

    tokenizer = build_tokenizer("byte", 256, None)
    monkeypatch.setattr(
        "archlab.interop.model_folder.open_model", lambda path: (tiny(vocab_size=256), tokenizer)
    )
    seen = []
    # the command imports it from archlab.infer.generate when it runs (its module imports no torch)
    monkeypatch.setattr(
        "archlab.infer.generate.with_inference_logn",
        lambda m: seen.append(with_inference_logn(m)) or seen[-1],
    )
    argv = [
        "generate",
        "--checkpoint",
        "c",
        "--prompt",
        "Hi",
        "--max-new-tokens",
        "30",
        "--temperature",
        "0",
        "--allow-extrapolation",
    ]
    assert main(argv) == 0
    plain = capsys.readouterr().out
    assert main([*argv, "--logn"]) == 0
    with_logn = capsys.readouterr().out
    assert len(seen) == 1 and seen[0].config.attn_logn_clip
    # the prompt and the first steps, inside N: the same tokens
    assert with_logn[: N - 1] == plain[: N - 1]

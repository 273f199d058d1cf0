"""Sampling past the context with a sliding window (infer/window.py, `past_context="slide"`): the
logits of every new token equal a fresh forward of the last context-limit tokens (nanoGPT's crop),
on both sides of the boundary (exactly at the context, one past), for RoPE, learned positions and a
scaled context; a batch equals each row alone; a model without a limit never slides; and the flag
of `archlab generate`."""

from __future__ import annotations

import pytest
import torch

from archlab import RopeScaling, TransformerLM
from archlab.cli import main
from archlab.commands import generate as command
from archlab.infer import engine
from archlab.infer.generate import generate
from archlab.infer.sampling import PAST_CONTEXT, SamplingConfig
from tests.infer.conftest import tiny


def recorded_logits(monkeypatch: pytest.MonkeyPatch) -> list[torch.Tensor]:
    """Every logits tensor the decode loop samples from, in order (a spy on `sample_next`)."""
    seen: list[torch.Tensor] = []
    original = engine.sample_next

    def spy(
        logits: torch.Tensor, sampling: SamplingConfig, generator: torch.Generator | None
    ) -> torch.Tensor:
        seen.append(logits.clone())
        return original(logits, sampling, generator)

    monkeypatch.setattr(engine, "sample_next", spy)
    return seen


def fresh_forward(model: TransformerLM, tokens: list[int], window: int) -> torch.Tensor:
    """The reference: the model's plain forward (no cache) over the last `window` tokens,
    last position's logits."""
    with torch.no_grad():
        return model(torch.tensor([tokens[-window:]]))[0, -1]


MODELS = {
    "rope": dict(max_seq_len=16),
    "learned": dict(max_seq_len=16, position="learned"),  # nanoGPT's case: no table rows past 16
    # the limit is 16, not max_seq_len 8
    "yarn": dict(max_seq_len=8, rope=dict(scaling=RopeScaling("yarn", 2.0, 8))),
}


@pytest.mark.parametrize("fields", MODELS.values(), ids=MODELS.keys())
@pytest.mark.parametrize(
    "prompt_len", [13, 16, 21], ids=["crosses", "at-the-context", "longer-than-it"]
)
def test_each_token_past_the_context_is_predicted_from_the_last_window(
    fields: dict, prompt_len: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = tiny(**fields)
    window = model.config.context_limit
    assert window == 16
    prompt = torch.randint(
        0, 256, (prompt_len,), generator=torch.Generator().manual_seed(prompt_len)
    ).tolist()
    seen = recorded_logits(monkeypatch)
    sampling = SamplingConfig(max_new_tokens=7, temperature=1.0, seed=3, past_context="slide")
    result = generate(model, [prompt], sampling)
    tokens = result.tokens[0]
    assert len(tokens) == len(seen) == 7
    lengths = [prompt_len + i for i in range(7)]  # the sequence each logits tensor predicts after
    for i, (length, logits) in enumerate(zip(lengths, seen)):
        sequence = prompt + tokens[:i]
        torch.testing.assert_close(
            logits[0],
            fresh_forward(model, sequence, window),
            atol=2e-5,
            rtol=1e-5,
            msg=f"the logits after {length} tokens",
        )
    # the window really is the limit: one token more or less would be another distribution
    # past the context
    past = [i for i, n in enumerate(lengths) if n > window]
    for i in past:
        other = fresh_forward(model, prompt + tokens[:i], window - 1)
        assert (seen[i][0] - other).abs().max() > 1e-2
    # what was recomputed: every step after the prefill whose sequence is past the window; up to
    # it, the cache
    assert result.slid == len([i for i in past if i > 0])
    assert result.context_len == window and result.slid == {13: 3, 16: 6, 21: 6}[prompt_len]


def test_a_batch_slides_each_row_as_it_would_alone() -> None:
    """Left-padded rows of 3, 13 and 20 tokens reach the window at different steps; each
    row's tokens equal its own generation, and equal greedy decoding by fresh forwards of the
    last 16 tokens."""
    model = tiny(max_seq_len=16)
    gen = torch.Generator().manual_seed(1)
    prompts = [torch.randint(0, 256, (n,), generator=gen).tolist() for n in (3, 13, 20)]
    sampling = SamplingConfig(max_new_tokens=10, temperature=0, past_context="slide")
    batched = generate(model, prompts, sampling).tokens
    assert batched == [generate(model, [p], sampling).tokens[0] for p in prompts]
    for prompt, tokens in zip(prompts, batched):
        sequence = list(prompt)
        for _ in range(10):
            sequence.append(int(fresh_forward(model, sequence, 16).argmax()))
        assert tokens == sequence[len(prompt) :]


def test_slide_changes_nothing_inside_the_context_or_without_a_limit() -> None:
    """Inside the context slide is the cached decode itself; a ReRoPE model has no limit
    and never slides."""
    model = tiny(max_seq_len=16)
    inside = [
        SamplingConfig(max_new_tokens=6, temperature=0, past_context=p) for p in ("stop", "slide")
    ]
    runs = [generate(model, [[5, 6, 7, 8]], s) for s in inside]
    assert runs[0].tokens == runs[1].tokens and runs[1].slid == 0 and runs[1].context_len == 10
    rerope = tiny(max_seq_len=16, rope=dict(scaling=RopeScaling("rerope", window=4)))
    assert rerope.config.context_limit is None
    far = [
        SamplingConfig(max_new_tokens=20, temperature=0, past_context=p) for p in ("stop", "slide")
    ]
    runs = [generate(rerope, [[5, 6, 7, 8]], s) for s in far]
    assert runs[0].tokens == runs[1].tokens and runs[1].slid == 0 and runs[1].context_len == 24


def test_past_context_is_checked_and_named_in_the_refusal() -> None:
    with pytest.raises(
        ValueError,
        match=r"SamplingConfig.past_context='crop' is not allowed: one of stop, extrapolate, slide",
    ):
        SamplingConfig(past_context="crop")
    with pytest.raises(
        ValueError,
        match=r"learned positions cannot extrapolate; past_context='slide' "
        r"\(--past-context slide\) keeps the last 16 tokens",
    ):
        generate(
            tiny(max_seq_len=16, position="learned"),
            [[1] * 10],
            SamplingConfig(max_new_tokens=7, past_context="extrapolate"),
        )
    assert list(command.PAST_CONTEXT) == list(PAST_CONTEXT)  # the flag's choices are the field's


@pytest.fixture
def short_checkpoint(monkeypatch: pytest.MonkeyPatch, tokenizer) -> None:
    monkeypatch.setattr(
        "archlab.interop.model_folder.open_model", lambda path: (tiny(max_seq_len=16), tokenizer)
    )


def test_cli_slides_past_the_context_and_refuses_two_answers(
    short_checkpoint, tokenizer, capsys
) -> None:
    argv = [
        "generate",
        "--checkpoint",
        "c",
        "--prompt",
        "Hello there",
        "--max-new-tokens",
        "12",
        "--temperature",
        "0",
    ]
    assert main(argv) == 2  # 11 + 12 > 16
    assert "exceeds the model's context of 16 tokens" in capsys.readouterr().err
    assert main([*argv, "--past-context", "slide"]) == 0
    want = generate(
        tiny(max_seq_len=16),
        [tokenizer.encode("Hello there")],
        SamplingConfig(max_new_tokens=12, temperature=0, past_context="slide"),
    ).tokens[0]
    assert capsys.readouterr().out == "Hello there" + tokenizer.decode(want) + "\n"
    # the default 128 new tokens are not clipped to the context when the window slides past it
    short = ["generate", "--checkpoint", "c", "--prompt", "Hi", "--temperature", "0"]
    assert main([*short, "--past-context", "slide"]) == 0
    assert capsys.readouterr().err == ""
    assert main(short) == 0
    assert "--max-new-tokens 14 (the default 128 clipped" in capsys.readouterr().err
    assert main([*argv, "--allow-extrapolation", "--past-context", "slide"]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        "argument --past-context: not allowed with argument --allow-extrapolation" in err
        and "\n" not in err
    )

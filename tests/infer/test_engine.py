"""The decoding engine's stop handling (infer/engine.py), read from `Generation.tokens`,
`decode_steps`, the model's forwards and the callback's calls: a row stopped by `on_step` keeps the
token that completed its stop string, a stopped row stays stopped (a later EOS does not move its
end), and once every row has stopped there is no further forward or callback. The reference is the
same greedy decode without any stop."""

from __future__ import annotations

import pytest

from archlab.infer.engine import Decoder
from archlab.infer.generate import generate
from archlab.infer.sampling import SamplingConfig
from tests.infer.conftest import tiny

GREEDY = SamplingConfig(max_new_tokens=12, temperature=0)
PROMPTS = [[1, 2, 3], [60, 61]]


class Recorder:
    """An on_step that stops row r once it has seen `after[r]` tokens (never if absent),
    recording every call."""

    def __init__(self, after: dict[int, int]) -> None:
        self.after, self.calls, self.seen = after, [], {0: 0, 1: 0}

    def __call__(self, tokens: list[int | None]) -> list[bool]:
        self.calls.append(list(tokens))
        for row, tok in enumerate(tokens):
            self.seen[row] += tok is not None
        return [self.seen[row] >= self.after.get(row, 10**9) for row in range(len(tokens))]


def _counted(model) -> list[int]:  # noqa: ANN001
    forwards = []
    model.register_forward_pre_hook(lambda module, args: forwards.append(1))
    return forwards


def test_callback_stopped_rows_keep_their_last_token_and_the_loop_ends_with_the_last_row() -> None:
    model = tiny()
    free = generate(model, PROMPTS, GREEDY).tokens
    forwards = _counted(model)
    # row 0 stops on its 3rd token (step 2), row 1 on its 6th (step 5)
    stop = Recorder({0: 3, 1: 6})
    with Decoder(model) as decoder:
        out = decoder.generate(PROMPTS, GREEDY, on_step=stop)
    assert out.tokens == [free[0][:3], free[1][:6]]  # the token that completed the stop is kept
    # the prefill, then steps 1..5: none after the last stop
    assert out.decode_steps == 5 and len(forwards) == 1 + 5
    assert len(stop.calls) == 6  # one call per sampled step, none after every row stopped
    # a stopped row reads as None
    assert [call[0] for call in stop.calls] == [*free[0][:3], None, None, None]
    assert [call[1] for call in stop.calls] == free[1][:6]


def test_a_stopped_row_keeps_its_end_when_it_later_samples_eos() -> None:
    """Row 0 stops at its 2nd token; the batch goes on for row 1, and row 0 (still sampled) produces
    the EOS id later: its end must not move to that EOS."""
    model = tiny()
    free = generate(model, PROMPTS, GREEDY).tokens
    later = [k for k in range(3, 12) if free[0][k] not in free[0][:2] and free[0][k] not in free[1]]
    assert later, f"the fixture's greedy rows give no usable EOS id: {free}"
    eos = free[0][later[0]]
    forwards = _counted(model)
    with Decoder(model) as decoder:
        out = decoder.generate(PROMPTS, GREEDY, eos_id=eos, on_step=Recorder({0: 2}))
    # row 1 never samples the EOS id: it runs to max_new_tokens
    assert out.tokens == [free[0][:2], free[1]]
    assert out.decode_steps == GREEDY.max_new_tokens - 1 and len(forwards) == GREEDY.max_new_tokens


def test_when_every_row_ends_at_eos_the_loop_stops_there() -> None:
    model = tiny()
    free = generate(model, [PROMPTS[0]], GREEDY).tokens[0]
    k = next(k for k in range(2, 12) if free[k] not in free[:k])
    forwards = _counted(model)
    stop = Recorder({})
    with Decoder(model) as decoder:
        out = decoder.generate([PROMPTS[0]], GREEDY, eos_id=free[k], on_step=stop)
    assert out.tokens == [free[:k]]  # the EOS itself is not returned
    assert out.decode_steps == k and len(forwards) == 1 + k
    # the EOS step's call sees the row ended
    assert len(stop.calls) == k + 1 and stop.calls[-1] == [None]


@pytest.mark.parametrize("rows", [[2, 2], [4, 1]])
def test_rows_stopped_together_or_apart_end_the_loop_at_the_last_stop(rows: list[int]) -> None:
    model = tiny()
    free = generate(model, PROMPTS, GREEDY).tokens
    forwards = _counted(model)
    stop = Recorder(dict(enumerate(rows)))
    with Decoder(model) as decoder:
        out = decoder.generate(PROMPTS, GREEDY, on_step=stop)
    assert out.tokens == [free[0][: rows[0]], free[1][: rows[1]]]
    assert (
        out.decode_steps == max(rows) - 1
        and len(forwards) == max(rows)
        and len(stop.calls) == max(rows)
    )


# ---------------------------------------------------------------------- the measured choice, reused
@pytest.fixture
def measured(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Each measurement of the compiled-vs-eager choice, by the batch it measured; the steps'
    times are faked (compiled slower: eager is chosen, so nothing compiles) and the GEMV probe
    answers at once."""
    from archlab.infer import engine

    def fake_time(self: Decoder, mode: str, batch: list[list[int]], n: int) -> float:
        return 2e-3 if mode == "eager" else 3e-3

    monkeypatch.setattr(Decoder, "_time_steps", fake_time)
    monkeypatch.setattr(engine, "reduction_gemvs_win", lambda model: False)
    counts = []
    choose = Decoder._choose

    def counting(self: Decoder, prompts: list[list[int]]) -> str:
        counts.append(len(prompts))
        return choose(self, prompts)

    monkeypatch.setattr(Decoder, "_choose", counting)
    return counts


def test_compiled_decoding_is_measured_once_per_model_and_reused_by_later_calls(
    measured: list[int], caplog: pytest.LogCaptureFixture
) -> None:
    """Five `generate(..., compile_decode=True)` calls measure once (a notebook or a chat loop pays
    the probe on its first call only) and decode eager's tokens every time."""
    model = tiny()
    eager = generate(model, PROMPTS, GREEDY).tokens
    with caplog.at_level("INFO", logger="archlab.infer.engine"):
        for _ in range(5):
            assert generate(model, PROMPTS, GREEDY, compile_decode=True).tokens == eager
    assert measured == [2]
    assert caplog.text.count("measured for this model's weights at batch 2 earlier") == 4


def test_the_measurement_is_taken_again_for_other_weights_batch_dtype_or_model(
    measured: list[int],
) -> None:
    import torch

    model = tiny()
    generate(model, PROMPTS, GREEDY, compile_decode=True)
    generate(model, PROMPTS[:1], GREEDY, compile_decode=True)  # another batch size
    assert measured == [2, 1]
    with torch.no_grad():
        # an in-place update (a training step): the weights' version moves
        model.lm_head.weight.mul_(1.0)
    generate(model, PROMPTS, GREEDY, compile_decode=True)
    assert measured == [2, 1, 2]
    model.double()  # another dtype: new tensors
    generate(model, PROMPTS, GREEDY, compile_decode=True)
    generate(tiny(), PROMPTS, GREEDY, compile_decode=True)  # another model
    assert measured == [2, 1, 2, 2, 2]
    generate(model, PROMPTS, GREEDY, compile_decode=True)  # nothing changed since: reused
    assert measured == [2, 1, 2, 2, 2]


def test_the_layout_is_set_once_per_decoder_and_the_callers_tensors_come_back() -> None:
    """The decoder re-lays the weights when it first decodes and leaves them alone on later
    calls (it used to rewrite every parameter's .data on every call); closing puts the caller's
    own tensors back."""
    model = tiny()
    before = {name: (p.data_ptr(), p.stride()) for name, p in model.named_parameters()}
    with Decoder(model) as decoder:
        first = decoder.generate([[1, 2, 3]], SamplingConfig(max_new_tokens=3, temperature=0.0))

        class Untouchable(dict):
            def items(self):  # noqa: ANN202 - any rewrite of the layout reads the copies through here
                raise AssertionError("the layout was rewritten")

        decoder.columns, decoder.originals = (
            Untouchable(decoder.columns),
            Untouchable(decoder.originals),
        )
        again = decoder.generate([[1, 2, 3]], SamplingConfig(max_new_tokens=3, temperature=0.0))
        assert again.tokens == first.tokens
        decoder.columns, decoder.originals = dict(decoder.columns), dict(decoder.originals)
    assert {name: (p.data_ptr(), p.stride()) for name, p in model.named_parameters()} == before

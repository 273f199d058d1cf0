"""infer/speed.py and the Decoder of infer/engine.py: the column-major decode layout (same products,
the caller's own weight tensors given back: same data pointers and strides), the compiled decode
step (equal to eager, one graph for every cache length and prompt length, still compiling for new
models, a missing C++ compiler refused up front, chosen over eager only where measured faster), and
its one-token products as Inductor reductions (equal to eager, really in the graph, chosen by a
measurement that leaves the weights alone, once per decoder)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn as nn
from torch._dynamo.utils import counters

from archlab import KVCache
from archlab.infer import engine, speed
from archlab.infer.engine import Decoder
from archlab.infer.generate import generate, generate_text
from archlab.infer.sampling import SamplingConfig
from archlab.infer.speed import column_major_linears, compiled_forward, row_major_linears
from tests.infer.conftest import tiny

GREEDY = SamplingConfig(max_new_tokens=12, temperature=0)


def test_column_major_linears_keep_shapes_values_and_products() -> None:
    model = tiny(tie_embeddings=True)
    before = {name: p.clone() for name, p in model.named_parameters()}
    linears = {name: m for name, m in model.named_modules() if isinstance(m, nn.Linear)}
    xs = {name: torch.randn(5, m.in_features) for name, m in linears.items()}
    expected = {name: xs[name].double() @ m.weight.double().T for name, m in linears.items()}
    changed = column_major_linears(model)
    # the tied head counts once
    assert len(changed) == len({id(m.weight) for m in linears.values()})
    for name, m in linears.items():
        w = m.weight
        assert w.shape == (m.out_features, m.in_features) and w.stride() == (1, m.out_features)
        torch.testing.assert_close(m(xs[name]).double(), expected[name], rtol=1e-5, atol=1e-6)
    assert all(torch.equal(p, before[name]) for name, p in model.named_parameters())
    assert model.lm_head.weight is model.embed_tokens.weight
    assert column_major_linears(model) == []  # already column-major
    row_major_linears(changed)
    assert all(
        p.is_contiguous() and torch.equal(p, before[name]) for name, p in model.named_parameters()
    )
    # only float32 is re-laid (bf16 runs slower so)
    assert column_major_linears(tiny().to(torch.bfloat16)) == []


@pytest.mark.parametrize("compile_decode", [False, "always"])
def test_generate_leaves_every_parameter_as_it_was(compile_decode: bool | str) -> None:
    """generate() reads the column-major layout while decoding, and afterwards every parameter
    is the caller's own tensor again: the same data pointer and strides (issue 23), values bit
    for bit, trainable."""
    model = tiny(tie_embeddings=True).train()
    before = {name: (p.data_ptr(), p.stride(), p.clone()) for name, p in model.named_parameters()}
    seen = []
    # a caller's inference mode must not turn the weights into inference tensors
    with torch.inference_mode():
        generate(
            model,
            [[1, 2, 3]],
            GREEDY,
            compile_decode=compile_decode,
            on_step=lambda tokens: (
                seen.append(model.lm_head.weight.stride()) or [False] * len(tokens)
            ),
        )
    # decoding read the column-major layout (the tied head too)
    assert seen[0] == (1, model.config.vocab_size)
    for name, p in model.named_parameters():
        ptr, stride, value = before[name]
        assert (p.data_ptr(), p.stride()) == (ptr, stride), name
        assert not p.is_inference() and torch.equal(p, value), name
    assert model.training and model.lm_head.weight is model.embed_tokens.weight
    model(torch.tensor([[1, 2, 3]])).sum().backward()  # still trainable
    assert all(p.grad is not None for p in model.parameters())


def steps_match_eager(
    model: nn.Module,
    step: Callable[..., torch.Tensor],
    n: int,
    after_each: Callable[[], None] = lambda: None,
) -> None:
    """After the same 4-token prompts, `n` one-token steps of `step` give the eager model's
    logits to 1e-5."""
    caches = [KVCache.for_model(model, 2, 40) for _ in range(2)]
    token = torch.tensor([[7], [9]])
    with torch.inference_mode():
        for cache in caches:
            model(torch.tensor([[1, 2, 3, 4], [5, 6, 7, 8]]), cache=cache)
        for _ in range(n):
            torch.testing.assert_close(
                step(token, cache=caches[0]), model(token, cache=caches[1]), rtol=1e-5, atol=1e-5
            )
            after_each()


COMPILED = dict(
    qk_norm="rmsnorm", attn_softcap=30.0, sliding_window=6, final_softcap=20.0, max_seq_len=64
)


def test_compiled_decode_step_equals_eager_and_does_not_recompile_per_step() -> None:
    """The compiled step's logits equal the eager step's to 1e-5 at every cache length. The cache
    length is a symbol, so the graphs are one per branch of the model's Python (here: before and
    after the window's ring cache wraps), never one per step."""
    torch._dynamo.reset()
    counters.clear()
    model = tiny(**COMPILED)
    step = compiled_forward(model)
    graphs = []
    steps_match_eager(model, step, 30, lambda: graphs.append(counters["stats"]["unique_graphs"]))
    # the ring of 6 slots is full from the second step on
    assert graphs[0] == 1 and graphs[5] == graphs[-1] == 2


def test_compiled_generation_samples_the_same_text(tokenizer) -> None:
    model = tiny(**COMPILED)
    sampling = SamplingConfig(max_new_tokens=20, temperature=0.8, top_k=40, seed=3)
    eager = generate_text(model, tokenizer, ["Once", "upon a"], sampling)
    compiled = generate_text(
        model, tokenizer, ["Once", "upon a"], sampling, compile_decode="always"
    )
    assert compiled.tokens == eager.tokens and compiled.texts == eager.texts


def test_compiled_decoding_keeps_compiling_for_new_models() -> None:
    """A sweep over many models must not fall back to eager once dynamo's per-function limit is
    reached (here lowered to 1, where the second model would already run eagerly)."""
    torch._dynamo.reset()
    counters.clear()
    with torch._dynamo.config.patch(recompile_limit=1):  # restores the limit afterwards
        for heads in (2, 1):
            generate(tiny(n_kv_heads=heads), [[1, 2, 3]], GREEDY, compile_decode="always")
    assert counters["stats"]["unique_graphs"] == 2


def test_compile_without_a_cpp_compiler_fails_before_compute(monkeypatch) -> None:
    monkeypatch.delenv("CXX", raising=False)
    monkeypatch.setattr("shutil.which", lambda name: None)
    with pytest.raises(
        ValueError, match=r"compile_decode=True \(--compile\) on the CPU needs a C\+\+ compiler"
    ):
        generate(tiny(), [[1, 2]], GREEDY, compile_decode=True)


@pytest.mark.parametrize("reductions", [False, True], ids=["mkl", "reductions"])
def test_compiled_generate_compiles_once_for_every_prompt_length(
    reductions: bool, monkeypatch
) -> None:
    """A warm-up at one length must not recompile at another: the cache position and the cache's
    capacity (prompt + new tokens) are symbols of the one graph, so generating after prompts of 5,
    9 and 17 tokens builds one graph and recompiles nothing, and gives eager's greedy tokens each
    time; with the products as reductions too."""
    monkeypatch.setattr(engine, "reduction_gemvs_win", lambda model: reductions)
    torch._dynamo.reset()
    counters.clear()
    model = tiny(n_layers=1)
    sampling = SamplingConfig(max_new_tokens=6, temperature=0)
    graphs = []
    for length in (5, 9, 17):
        prompt = [(7 * i + 3) % 256 for i in range(length)]
        compiled = generate(model, [prompt], sampling, compile_decode="always").tokens
        assert compiled == generate(model, [prompt], sampling).tokens
        graphs.append(counters["stats"]["unique_graphs"])
    assert graphs == [1, 1, 1] and not counters["recompiles"]


REDUCING = dict(
    attn_bias=True, mlp_bias=True, qk_norm="rmsnorm", final_softcap=20.0, max_seq_len=64
)


def test_reducing_step_equals_eager_and_has_no_linear_left(monkeypatch) -> None:
    """`compiled_forward(model, reduce_linears=True)`: every one-token `F.linear` of the traced
    step (biases included) became a multiply and a sum, and the logits equal the eager step's at
    every cache length."""
    torch._dynamo.reset()
    graphs: list[torch.fx.GraphModule] = []

    def recording(gm: torch.fx.GraphModule, example_inputs: list) -> object:
        graphs.append(gm)
        return gm.forward

    model = tiny(**REDUCING)
    step = compiled_forward(model, reduce_linears=True, backend=recording)
    steps_match_eager(model, step, 8)
    targets = [
        str(node.target)
        for gm in graphs
        for node in gm.graph.nodes
        if node.op in ("call_function", "call_method")
    ]
    # qkv, o, up/gate, down per layer, head
    linears = sum(isinstance(m, nn.Linear) for m in model.modules())
    assert graphs and not any("linear" in t for t in targets)
    assert sum(t == "sum" for t in targets) >= linears


def test_generate_with_reductions_keeps_row_major_weights_and_eager_tokens(monkeypatch) -> None:
    """Where the reductions win, the weights keep their row-major layout during decoding (the
    reductions read rows), and the tokens are eager's; where MKL wins, they are column-major while
    decoding, as before."""
    eager = generate(tiny(**REDUCING), [[1, 2, 3]], GREEDY).tokens
    for wins in (True, False):
        monkeypatch.setattr(engine, "reduction_gemvs_win", lambda m, wins=wins: wins)
        model = tiny(**REDUCING)  # a model of its own: a model's measured choice is kept and reused
        layouts = []

        def on_step(tokens: list[int | None]) -> list[bool]:
            layouts.append(model.lm_head.weight.is_contiguous())
            return [False] * len(tokens)

        assert (
            generate(model, [[1, 2, 3]], GREEDY, on_step=on_step, compile_decode="always").tokens
            == eager
        )
        assert set(layouts) == {wins}
        assert model.lm_head.weight.is_contiguous()


def test_the_gemv_measurement_decides_with_a_margin_once_per_decoder(monkeypatch) -> None:
    """`reduction_gemvs_win` takes the reductions only when they take under PROBE_MARGIN of MKL's
    time and does not measure models small enough to stay in the caches; a Decoder measures once for
    all its calls."""
    calls = []
    times = iter([(1.0, 2.0), (0.97, 1.0), (1.0, 2.0)])

    def fake_seconds(weights: list[nn.Parameter]) -> tuple[float, float]:
        calls.append(len(weights))
        return next(times)

    monkeypatch.setattr(speed, "_gemv_seconds", fake_seconds)
    assert not speed.reduction_gemvs_win(tiny())  # far below PROBE_MIN_BYTES: not measured
    assert calls == []
    monkeypatch.setattr(speed, "PROBE_MIN_BYTES", 0)
    assert speed.reduction_gemvs_win(tiny())  # 2x faster
    assert calls == [2 * 4 + 1]  # qkv, o, gate_up, down per layer, and the head
    assert not speed.reduction_gemvs_win(tiny(n_layers=1))  # 3% faster: inside the margin
    assert calls == [9, 5]
    model = tiny()
    with Decoder(model, "always") as decoder:
        for _ in range(2):
            decoder.generate([[1, 2, 3]], GREEDY)
        assert decoder.mode == "compiled reductions"
    assert calls == [9, 5, 9]  # one measurement for both calls


def test_compile_is_chosen_only_where_it_measures_faster(monkeypatch, caplog) -> None:
    """compile_decode=True times the compiled step against eager in interleaved rounds and keeps the
    faster (never slower than eager), logs the choice, and decodes eager's tokens either way."""
    eager = generate(tiny(), [[1, 2, 3]], GREEDY).tokens
    for compiled_s, want in ((1e-3, "compiled"), (3e-3, "eager")):
        model = tiny()  # a model of its own: a model's measured choice is kept and reused

        def fake(
            self: Decoder, mode: str, batch: list[list[int]], n: int, compiled_s: float = compiled_s
        ) -> float:
            self._step(mode)  # the compiled step is still built (and compiles during the warm-up)
            return compiled_s if mode != "eager" else 2e-3

        monkeypatch.setattr(Decoder, "_time_steps", fake)
        with (
            caplog.at_level("INFO", logger="archlab.infer.engine"),
            Decoder(model, True) as decoder,
        ):
            assert decoder.generate([[1, 2, 3]], GREEDY).tokens == eager
            assert decoder.mode == want
        assert f"decode: {want}" in caplog.text
        caplog.clear()


def test_the_real_measurement_times_both_steps_and_decodes_eagers_tokens() -> None:
    """Unfaked: the measurement compiles, times both sides on scratch caches, and the chosen step's
    tokens are eager's."""
    model = tiny(n_layers=1)
    eager = generate(model, [[4, 5, 6]], GREEDY).tokens
    with Decoder(model, True) as decoder:
        assert decoder.generate([[4, 5, 6]], GREEDY).tokens == eager
        assert decoder.mode in ("eager", "compiled")
        assert 0 < decoder._time_steps("eager", [[1, 2]], 2) < 1


def test_gemv_measurement_times_both_kernels_and_leaves_the_model_alone() -> None:
    """The real measurement compiles the reductions, times both kernels, and leaves every weight
    row-major and bit for bit as it was."""
    model = tiny()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    weights = [m.weight for m in model.modules() if isinstance(m, nn.Linear)]
    reduce_s, mkl_s = speed._gemv_seconds(weights)
    assert 0 < reduce_s < 1 and 0 < mkl_s < 1
    for name, p in model.named_parameters():
        assert p.is_contiguous() and torch.equal(p, before[name]), name


def test_a_later_generate_call_reuses_the_measured_compiled_step_without_recompiling() -> None:
    """The measurement (under inference mode) compiles the step on the first call; a second call's
    decoder makes its column-major weights outside inference mode. They must be alike: copies made
    as inference tensors once recompiled the step on the second call (a dispatch-key guard), 3.4 s
    of a 5 s first call here."""
    torch._dynamo.reset()
    counters.clear()
    model = tiny(n_layers=1)
    for _ in range(3):
        with Decoder(model, True) as decoder:
            tokens = decoder.generate([[4, 5, 6]], GREEDY).tokens
        assert tokens == generate(model, [[4, 5, 6]], GREEDY).tokens
    assert counters["stats"]["unique_graphs"] <= 1 and not counters["recompiles"]

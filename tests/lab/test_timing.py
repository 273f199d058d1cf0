"""The timing harness's wiring, with a fake clock where values matter (no timed assertions):
which configs are built, A/B interleaving and its balance, warm-up dropped, threads set and
restored, and that each kind's options reach the measured op (the decode step really reads the
stated cache length)."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from scipy import stats as scipy_stats

from archlab.lab.measures import timing
from archlab.lab.measures.timing import (
    TIMINGS,
    DecodeStep,
    NormOp,
    PairedTimes,
    TrainStep,
    balanced_orders,
    log_ratio_summary,
    norm_step_effect,
    time_pairs,
)
from archlab.nn.model import TransformerLM
from archlab.nn.presets import build_preset


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeKind:
    """A timing kind whose op advances the fake clock: the first `slow` calls (warm-up) by 1000 s,
    later ones by the config's `d_model` in seconds; it records which configs were built, with which
    options, and each call."""

    def __init__(self, clock: FakeClock, slow: int) -> None:
        self.clock, self.slow = clock, slow
        self.built: list[tuple[object, dict]] = []
        self.calls: list[int] = []  # d_model of each call, in call order

    def __call__(self, config: object, **options: object):
        self.built.append((config, options))
        count = [0]

        def op() -> None:
            count[0] += 1
            self.calls.append(config.d_model)
            self.clock.now += 1000.0 if count[0] <= self.slow else float(config.d_model)

        return op


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> tuple[FakeClock, FakeKind]:
    clock = FakeClock()
    kind = FakeKind(clock, slow=3)
    monkeypatch.setitem(TIMINGS, "fake", kind)
    return clock, kind


A = build_preset("llama", "tiny", d_model=64)
B = build_preset("llama", "tiny", d_model=128, n_heads=4)


def test_pairs_time_each_arm_after_warmup_and_interleave(fake: tuple[FakeClock, FakeKind]) -> None:
    clock, kind = fake
    times = time_pairs(A, B, kind="fake", pairs=6, warmup=3, number=2, clock=clock, seed=5, width=7)
    assert [c for c, _ in kind.built] == [A, B]  # A's op built from config_a, B's from config_b
    assert all(o == {"seed": 5, "width": 7} for _, o in kind.built)  # options reach the builder
    # warm-up (1000 s calls) dropped; per call
    assert times.a == [64.0] * 6 and times.b == [128.0] * 6
    timed = kind.calls[6:]  # after 3 warm-up calls per arm
    expected = [
        64 if arm == "a" else 128 for order in times.order for arm in order for _ in range(2)
    ]
    assert timed == expected  # A and B alternate pair by pair in the recorded order
    assert kind.calls[:6] == [64] * 3 + [128] * 3


def test_orders_are_balanced_shuffled_and_reproducible() -> None:
    orders = balanced_orders(24, seed=0)
    assert orders.count("ab") == orders.count("ba") == 12
    assert orders == balanced_orders(24, seed=0) and orders != balanced_orders(24, seed=1)
    # shuffled, not a fixed pattern
    assert orders != ["ab"] * 12 + ["ba"] * 12 and orders != ["ab", "ba"] * 12
    odd = balanced_orders(5, seed=3)
    assert sorted(odd) == ["ab", "ab", "ab", "ba", "ba"]


def test_threads_are_set_for_the_measurement_and_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []
    monkeypatch.setitem(
        TIMINGS, "fake", lambda config, **o: lambda: seen.append(torch.get_num_threads())
    )
    before = torch.get_num_threads()
    time_pairs(A, B, kind="fake", pairs=2, warmup=1, threads=1)
    assert seen and set(seen) == {1}
    assert torch.get_num_threads() == before


def test_bad_kind_and_counts_fail_before_building(fake: tuple[FakeClock, FakeKind]) -> None:
    with pytest.raises(
        ValueError, match="timing kind 'steps' is not allowed: one of train_step, norm_op, decode"
    ):
        time_pairs(A, B, kind="steps")
    with pytest.raises(ValueError, match="pairs=1"):
        time_pairs(A, B, kind="fake", pairs=1)
    assert fake[1].built == []


def test_log_ratio_summary_is_the_t_interval_of_the_pair_log_ratios() -> None:
    a, b = [2.0, 2.2, 1.9, 2.1, 2.05], [1.0, 1.0, 1.1, 0.95, 1.0]
    d = [math.log(x / y) for x, y in zip(a, b)]
    s = log_ratio_summary(PairedTimes(a, b))
    ref = scipy_stats.ttest_1samp(d, 0.0).confidence_interval(0.95)
    assert s.mean == pytest.approx(sum(d) / 5) and s.ci == pytest.approx((ref.low, ref.high))
    assert s.median == pytest.approx(sorted(d)[2])
    assert s.ratio_ci == pytest.approx((math.exp(ref.low), math.exp(ref.high)))


def test_norm_step_effect_is_share_times_saving() -> None:
    # the op takes half as long: half its share saved
    assert norm_step_effect(0.2, 2.0) == pytest.approx(0.1)
    assert norm_step_effect(0.3, 1.0) == 0.0
    with pytest.raises(ValueError, match="share=1.5"):
        norm_step_effect(1.5, 2.0)


# ---------------------------------------------------------------------------------- the real kinds
def test_decode_step_runs_at_the_stated_cache_length_and_batch() -> None:
    config = build_preset("llama", "tiny", n_kv_heads=2)
    step = DecodeStep(config, cache_len=40, batch=3)
    assert step.cache.pos == 40 and step.cache.k[0].shape == (3, 2, 41, config.head_dim)
    w = step.model.layers[0].attn.qkv_proj.weight
    assert w.stride() == (1, w.shape[0])  # the column-major layout `generate` decodes with
    read: list[int] = []
    update = step.cache.update

    def spy(layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        keys, values = update(layer, k, v)
        read.append(keys.shape[2])
        return keys, values

    step.cache.update = spy
    first = step()
    second = step()
    assert step.cache.pos == 40  # rewound: the next step reads the same cache length again
    # every layer of every step reads cache_len + 1 keys
    assert read == [41] * (2 * config.n_layers)
    assert torch.equal(first, second) and first.shape == (3, 1, config.vocab_size)
    # the timed step is a real decode step: the full forward over prompt + token gives its logits
    torch.manual_seed(0)
    model = TransformerLM(config).eval()
    prompt = torch.randint(config.vocab_size, (3, 40), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        full = model(torch.cat([prompt, step.token], dim=1))[:, -1:]
    torch.testing.assert_close(first, full, rtol=1e-4, atol=1e-4)


def test_decode_past_the_trained_context_extends_it_for_the_timing() -> None:
    # max_seq_len 128: the lab's small budget trains at 128 tokens
    config = build_preset("llama", "tiny")
    step = DecodeStep(config, cache_len=200, batch=1)
    assert step.model.config.max_seq_len == 201 and step.cache.pos == 200
    assert step.model.config == dataclasses.replace(config, max_seq_len=201)  # nothing else changed
    step()
    assert step.cache.pos == 200
    with pytest.raises(ValueError, match="cache_len=0 is not allowed"):
        DecodeStep(config, cache_len=0)


def test_train_step_builds_the_config_at_the_batch_and_steps_the_optimizer() -> None:
    config = build_preset("llama", "tiny", norm="layernorm")
    step = TrainStep(config, batch=3, block=16)
    assert step.model.config is config and step.ids.shape == (3, 17) and step.model.training
    before = [p.detach().clone() for p in step.model.parameters()]
    loss = step()
    assert math.isfinite(loss.item())
    assert all(p.grad is None for p in step.model.parameters())  # zeroed for the next call
    moved = sum(not torch.equal(p, q) for p, q in zip(step.model.parameters(), before))
    # the optimizer stepped every parameter (AdamW moves even the norm gains)
    assert moved == len(before)


@pytest.mark.parametrize("norm, bias", [("rmsnorm", False), ("layernorm", True)])
def test_norm_op_times_the_configs_norm_at_width_d(
    monkeypatch: pytest.MonkeyPatch, norm: str, bias: bool
) -> None:
    config = build_preset("llama", "tiny", norm=norm, norm_bias=bias)
    used: list[tuple[int, ...]] = []
    cls = timing.NORMS[norm]
    formula = cls.formula
    monkeypatch.setattr(
        cls,
        "formula",
        staticmethod(
            lambda x, w, b, eps: used.append((*x.shape, b is not None)) or formula(x, w, b, eps)
        ),
    )
    op = NormOp(config, d=512, rows=10)
    y = op()
    # the composite formula of this norm, at (rows, d), with its bias
    assert used == [(10, 512, bias)]
    assert op.x.grad is None and y.shape == (10, 512)  # backward ran and its gradients were cleared
    ref = (
        torch.nn.functional.layer_norm(op.x, (512,))
        if norm == "layernorm"
        else (op.x * torch.rsqrt(op.x.pow(2).mean(-1, keepdim=True) + config.norm_eps))
    )
    torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-5)
    module_op = NormOp(config, d=512, rows=10, build="module")
    assert type(module_op.fn).__name__ == {"rmsnorm": "RMSNorm", "layernorm": "LayerNorm"}[norm]
    with pytest.raises(
        ValueError, match="build='fused' is not allowed: one of composite, compiled, module"
    ):
        NormOp(config, build="fused")


FAST = [0.0100, 0.0112, 0.0121, 0.0103, 0.0109, 0.0098]  # seconds per call, pair by pair
SLOW = [0.0131, 0.0140, 0.0149, 0.0137, 0.0139, 0.0135]


@pytest.mark.parametrize("first", ["fast", "slow"])
def test_a_timing_record_is_judged_for_the_claims_arm_whichever_arm_it_lists_first(
    first: str,
) -> None:
    """lab-timings.json lists the timing's arms in the suite's order, which need not be the
    claim's: the claim's arm's seconds are its own in both orders, and the verdict is the one-sided
    paired t-test on log seconds (scipy), confirmed for "fast is faster" and contradicted for
    "slow is faster"."""
    from archlab.lab.analysis import stats
    from archlab.lab.analysis.verdicts import _judge_timing
    from archlab.lab.spec.suite import Claim

    record = (
        {"arms": ["fast", "slow"], "a": FAST, "b": SLOW}
        if first == "fast"
        else {"arms": ["slow", "fast"], "a": SLOW, "b": FAST}
    )
    log_fast, log_slow = [math.log(t) for t in FAST], [math.log(t) for t in SLOW]
    claim = Claim(text="fast is faster", metric="step_s", arm="fast", versus="slow")
    got = _judge_timing(claim, record, 0.05)
    assert got.a == pytest.approx(log_fast) and got.b == pytest.approx(log_slow)
    assert got.estimate == pytest.approx(sum(f - s for f, s in zip(log_fast, log_slow)) / len(FAST))
    assert got.outcome == stats.CONFIRMED
    assert got.p == pytest.approx(
        scipy_stats.ttest_rel(log_fast, log_slow, alternative="less").pvalue, rel=1e-9
    )
    reverse = _judge_timing(
        Claim(text="slow is faster", metric="step_s", arm="slow", versus="fast"), record, 0.05
    )
    assert reverse.a == pytest.approx(log_slow) and reverse.estimate == pytest.approx(-got.estimate)
    assert reverse.outcome == stats.CONTRADICTED

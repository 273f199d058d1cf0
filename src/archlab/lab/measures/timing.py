"""Speed claims timed on freshly initialised models in interleaved A/B pairs, judged on
log(t_A / t_B).

A model's weights do not change its speed, so timings are not replicated by training seed: a
trained checkpoint times like a fresh model of the same config, and two seeds give two minima
of one distribution, not two replicates of the effect. The replicate here is the *pair*: A and
B timed back to back, the order of the two randomised per pair (a fixed RNG, balanced over
the pairs), so a background load or a thermal drift that lasts longer than a pair hits both
arms and cancels in the ratio. Each pair gives log(t_A) - log(t_B); the claim is judged on
those (`archlab.lab.analysis.stats.test_claim(log a, log b, expect=..., better="lower")`, the
ratio's confidence interval is exp of the log interval), and `log_ratio_summary` gives the same
figures for printing.

Kinds (`TIMINGS`: kind -> builder(config, **options) -> one call of the measured op):
- `train_step`: forward + backward + optimizer step of the config's model at `batch`
  x `block` tokens;
- `norm_op`: the config's norm alone, forward + backward on (rows, d), `d` in {128, 512, 2048},
  both norms built alike (`build`: the plain composite formulas under autograd, or those under
  torch.compile; `module` times the model's own modules: a hand-written RMSNorm backward against
  torch's native LayerNorm kernel);
- `decode`: one-token decode steps of the config's model at a stated cache length (`cache_len`,
  prefilled once, rewound after each step so every step reads exactly that many keys) and batch
  (`batch`, default 8).

Warm-up calls (allocator, lazy inits, compilation) run before the pairs and are discarded.
Threads are set explicitly for the measurement (`threads`, default 1: the lab runs 2 jobs on 2
cores, one thread each, and one thread is the least sensitive to other work on a shared machine)
and restored afterwards.
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
from scipy import stats as scipy_stats

from archlab.infer.speed import column_major_linears
from archlab.lab.measures.timing_load import (
    LoadAvg,
    OtherWork,
    cpu_count,
    read_load,
    usable_cores,
)
from archlab.nn.config import ModelConfig
from archlab.nn.config.choices import NORMS
from archlab.nn.kv_cache import KVCache
from archlab.nn.model import TransformerLM
from archlab.train.optim import build_optimizer
from archlab.train.sections import OptimizerConfig

NORM_BUILDS = ("composite", "compiled", "module")
NORM_DIMS = (128, 512, 2048)  # the widths the norm-type suite times (lab-method section 8, item 3)
DEFAULT_ROWS = 16 * 128  # the `small` budget's batch x block tokens
Op = Callable[[], object]


@dataclass(frozen=True)
class PairedTimes:
    """Seconds per call of the measured op, one entry per pair (a[i] and b[i] were timed
    back to back)."""

    a: list[float]
    b: list[float]
    # "ab" or "ba" per pair: which arm was timed first
    order: list[str] = field(default_factory=list)
    # the 1-min load average after each pair (lab/measures/timing_load.py)
    load: list[float] = field(default_factory=list)
    cpus: int | None = None  # the machine's CPUs, the load's scale
    cores: int | None = None  # the cores this process could run on
    threads: int | None = None  # torch threads the timing ran with (None: torch's own)
    # the CPUs other processes kept busy during each pair (NaN: not readable here)
    others: list[float] = field(default_factory=list)

    def log_ratios(self) -> list[float]:
        return [math.log(x) - math.log(y) for x, y in zip(self.a, self.b)]


@dataclass(frozen=True)
class RatioSummary:
    """log(t_A / t_B) over the pairs: mean and its t interval, median; `ratio*` are exp of those."""

    n: int
    mean: float
    ci: tuple[float, float]
    median: float
    confidence: float

    @property
    def ratio(self) -> float:
        return math.exp(self.mean)

    @property
    def ratio_ci(self) -> tuple[float, float]:
        return math.exp(self.ci[0]), math.exp(self.ci[1])


def log_ratio_summary(times: PairedTimes, confidence: float = 0.95) -> RatioSummary:
    """Mean of the per-pair log ratios with a two-sided t interval (n - 1 df), and their median."""
    d = times.log_ratios()
    n = len(d)
    if n < 2:
        raise ValueError(f"log_ratio_summary needs at least 2 pairs, got {n}")
    mean = sum(d) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
    half = scipy_stats.t.ppf(0.5 + confidence / 2, n - 1) * sd / math.sqrt(n)
    return RatioSummary(n, mean, (mean - half, mean + half), statistics.median(d), confidence)


def balanced_orders(pairs: int, seed: int = 0) -> list[str]:
    """Which arm goes first in each pair: half "ab", half "ba" (one more "ab" when odd), shuffled by
    a fixed RNG."""
    orders = ["ab"] * ((pairs + 1) // 2) + ["ba"] * (pairs // 2)
    random.Random(seed).shuffle(orders)
    return orders


@contextmanager
def thread_count(threads: int | None) -> Iterator[None]:
    """torch's intra-op threads set to `threads` for the block (None: left as they
    are), then restored."""
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def time_pairs(
    config_a: ModelConfig,
    config_b: ModelConfig,
    *,
    kind: str,
    pairs: int = 24,
    warmup: int = 3,
    number: int = 1,
    threads: int | None = 1,
    seed: int = 0,
    clock: Callable[[], float] = time.perf_counter,
    loadavg: LoadAvg | None = None,
    other_work: OtherWork | None = None,
    **options: object,
) -> PairedTimes:
    """Time TIMINGS[kind] built for config_a and for config_b in `pairs` interleaved pairs.

    Each arm's op is built once (a fresh model), called `warmup` times untimed, then per pair
    each arm is timed over `number` consecutive calls (seconds per call), the arm timed first
    chosen by `balanced_orders(pairs, seed)`; the machine's load is read after each pair
    (`loadavg`) and the CPUs other processes kept busy during it (`other_work`; both
    lab/measures/timing_load.py). `options` go to the kind's builder (batch, block,
    d, cache_len, ...)."""
    if kind not in TIMINGS:
        raise ValueError(f"timing kind {kind!r} is not allowed: one of {', '.join(TIMINGS)}")
    if pairs < 2 or warmup < 0 or number < 1:
        raise ValueError(
            f"time_pairs: pairs={pairs} (>= 2), warmup={warmup} (>= 0) and number={number} (>= "
            "1) are required"
        )
    with thread_count(threads):
        ops = {
            "a": TIMINGS[kind](config_a, seed=seed, **options),
            "b": TIMINGS[kind](config_b, seed=seed, **options),
        }
        for op in ops.values():
            for _ in range(warmup):
                op()
        times: dict[str, list[float]] = {"a": [], "b": []}
        orders, load, others = balanced_orders(pairs, seed), [], []
        watch = other_work or OtherWork()
        for order in orders:
            watch.start()
            for arm in order:
                times[arm].append(_seconds_per_call(ops[arm], number, clock))
            others.append(watch.stop())
            load.append(read_load(loadavg))
    return PairedTimes(
        times["a"], times["b"], orders, load, cpu_count(), usable_cores(), threads, others
    )


def _seconds_per_call(op: Op, number: int, clock: Callable[[], float]) -> float:
    start = clock()
    for _ in range(number):
        out = op()
    _wait(out)
    return (clock() - start) / number


def _wait(out: object) -> None:
    """Accelerators run asynchronously: the clock is read only once the device finished
    the op's work."""
    if isinstance(out, torch.Tensor) and out.device.type == "cuda":
        torch.cuda.synchronize(out.device)


# ---------------------------------------------------------------------------------------- the kinds
def _fresh_model(config: ModelConfig, seed: int, device: str) -> TransformerLM:
    torch.manual_seed(seed)
    return TransformerLM(config).to(device)


class TrainStep:
    """One training step of a fresh model: forward with the loss, backward, optimizer step,
    zero grads, on one fixed random batch of `batch` x `block` tokens (speed does not depend
    on the tokens)."""

    def __init__(
        self,
        config: ModelConfig,
        *,
        batch: int = 16,
        block: int = 128,
        optimizer: str = "adamw",
        seed: int = 0,
        device: str = "cpu",
    ) -> None:
        if block > config.max_seq_len:
            raise ValueError(
                f"train_step timing: block={block} is past "
                f"the model's max_seq_len={config.max_seq_len}"
            )
        self.model = _fresh_model(config, seed, device).train()
        o = OptimizerConfig(name=optimizer)
        self.optimizer = build_optimizer(self.model, o)
        ids = torch.randint(
            config.vocab_size, (batch, block + 1), generator=torch.Generator().manual_seed(seed)
        )
        self.ids = ids.to(device)  # (batch, block + 1): inputs and shifted targets

    def __call__(self) -> torch.Tensor:
        loss = self.model(self.ids[:, :-1], targets=self.ids[:, 1:]).loss
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss


class NormOp:
    """Forward + backward of the config's norm (`config.norm`, its eps and bias) alone on
    x (rows, d).

    build: `composite` = the norm classes' `formula` under autograd, `compiled` = those under
    torch.compile (Inductor fuses both into generated kernels), `module` = the model's own norm
    modules (what a training step runs)."""

    def __init__(
        self,
        config: ModelConfig,
        *,
        d: int | None = None,
        rows: int = DEFAULT_ROWS,
        build: str = "composite",
        seed: int = 0,
        device: str = "cpu",
    ) -> None:
        if build not in NORM_BUILDS:
            raise ValueError(
                f"norm_op timing: build={build!r} is not allowed: one of {', '.join(NORM_BUILDS)}"
            )
        d = config.d_model if d is None else d
        gen = torch.Generator().manual_seed(seed)
        self.x = torch.randn(rows, d, generator=gen).to(device).requires_grad_()  # (rows, d)
        self.grad = torch.randn(rows, d, generator=gen).to(device)  # the incoming gradient
        if build == "module":
            module = NORMS[config.norm](d, eps=config.norm_eps, bias=config.norm_bias).to(device)
            self.fn, self.params = module, list(module.parameters())
        else:
            weight = torch.ones(d, device=device, requires_grad=True)
            bias = torch.zeros(d, device=device, requires_grad=True) if config.norm_bias else None
            formula, eps = NORMS[config.norm].formula, config.norm_eps
            fn = lambda x: formula(x, weight, bias, eps)  # noqa: E731
            self.fn = torch.compile(fn, dynamic=False) if build == "compiled" else fn
            self.params = [p for p in (weight, bias) if p is not None]

    def __call__(self) -> torch.Tensor:
        y = self.fn(self.x)
        y.backward(self.grad)
        for t in (self.x, *self.params):
            t.grad = None
        return y


class DecodeStep:
    """One greedy decode step of a fresh model for `batch` rows whose KVCache holds `cache_len`
    tokens: the prompt is prefilled once, and the cache is rewound after each step, so every timed
    step reads the same cache_len + 1 keys (`cache.pos` is cache_len before every call). A config
    whose max_seq_len is shorter than that is timed with max_seq_len = cache_len + 1 (only position
    tables grow; speed is not a function of the length trained for). The weights are laid out as
    `generate` decodes with them (the Decoder of archlab.infer.engine: column-major float32 Linears
    on the CPU)."""

    def __init__(
        self,
        config: ModelConfig,
        *,
        cache_len: int = 1024,
        batch: int = 8,
        seed: int = 0,
        device: str = "cpu",
    ) -> None:
        if cache_len < 1:
            raise ValueError(
                f"decode timing: cache_len={cache_len} is not allowed: a positive number of tokens"
            )
        # a suite trains short and times decoding at a long cache
        if cache_len + 1 > config.max_seq_len:
            config = config.replace(max_seq_len=cache_len + 1)
        self.cache_len = cache_len
        self.model = _fresh_model(config, seed, device).eval()
        column_major_linears(self.model)  # permanent: the model is this op's own
        prompt = torch.randint(
            config.vocab_size, (batch, cache_len), generator=torch.Generator().manual_seed(seed)
        )
        self.cache = KVCache.for_model(self.model, batch, cache_len + 1)
        with torch.inference_mode():
            # (B, 1)
            self.token = self.model(prompt.to(device), cache=self.cache, logits_to_keep=1).argmax(
                -1
            )

    @torch.inference_mode()
    def __call__(self) -> torch.Tensor:
        # (B, 1, V), reading cache_len + 1 keys per layer
        logits = self.model(self.token, cache=self.cache)
        self.cache.rewind(self.cache_len)
        return logits


TIMINGS: dict[str, Callable[..., Op]] = {
    "train_step": TrainStep,
    "norm_op": NormOp,
    "decode": DecodeStep,
}


def norm_step_effect(share: float, speedup: float) -> float:
    """The step-time saving a faster norm op buys: the norm's share of the step times (1 - 1 /
    speedup), with speedup = t_slow / t_fast of the op alone (Amdahl)."""
    if not 0.0 <= share <= 1.0 or speedup <= 0:
        raise ValueError(
            f"norm_step_effect: share={share} must be in [0, 1] and speedup={speedup} > 0"
        )
    return share * (1.0 - 1.0 / speedup)

"""The decoder: one object that owns how a model decodes (layout, compiled step, measured choices).

`Decoder(model, compile_decode)` holds, as its own state, everything decoding changes or learns
about a model:
- the weight layout: float32 CPU Linear weights re-laid column-major (MKL's one-row product streams
  that layout at close to memory bandwidth, infer/speed.py); the caller's own tensors are kept and
  put back on `close`, so every parameter ends with the data pointer and strides it had;
- the compiled decode step (`compile_decode`), built once per decoder;
- the measurements: whether the compiled step's one-token products run faster as Inductor reductions
  over row-major weights (`speed.reduction_gemvs_win`), and whether the compiled step beats eager
  decoding at all on this machine: `compile_decode=True` times both in interleaved rounds on the
  first batch and keeps the faster, so asking for compilation is never slower than eager decoding (a
  2-core Zen 2 measured compiled decoding slower, docs/inference.md); the choice is logged and kept
  in `Decoder.mode`. `compile_decode="always"` compiles without measuring (tests, benchmarks of the
  compiled step itself).
The choice is measured once per model, device, dtype, batch size and weights, and reused: it is kept
per model (`_MEASURED`, weakly keyed, so it goes with the model) and every later decoder of the same
model reads it, so `generate(..., compile_decode=True)` in a notebook, an eval or a chat loop pays
the measurement on its first call only (the compiled step itself comes from torch's compile cache,
which keys on the forward's code). New weights tensors, an in-place change of any weight (a training
step), another dtype or device, or another batch size measure again. `archlab generate` keeps one
decoder for all its prompts; `generate()` (infer/generate.py), the trainer's samples and the lab's
decode timing open one per call.

The decode loop: prefill (eager: every prompt length would be a new graph), then one-token steps
through the chosen step with a `KVCache`; prompts of different lengths run as one left-padded batch
(infer/prompts.py, which also checks them against the model's context).

Shapes: B batch, T prompt length (padded), V vocabulary.
"""

from __future__ import annotations

import logging
import statistics
import time
import weakref
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

import torch
import torch.nn as nn

from archlab.infer.healing import Healing
from archlab.infer.prompts import check_prompts, left_pad, prefill
from archlab.infer.sampling import SamplingConfig, sample_next
from archlab.infer.speed import (
    check_compile_decode,
    compiled_forward,
    recompile_limit,
    reduction_gemvs_win,
    row_major_cpu_linears,
)
from archlab.infer.window import SlidingWindow, slide_window
from archlab.nn.kv_cache import KVCache
from archlab.nn.model import TransformerLM

logger = logging.getLogger(__name__)

# eager; compiled where measured faster; compiled without measuring
COMPILE_CHOICES = (False, True, "always")
PROBE_STEPS = 6  # timed decode steps per side and round of the compiled-vs-eager measurement
PROBE_ROUNDS = 4  # rounds, alternating which side runs first
PROBE_PROMPT = 16  # prompt tokens of the measurement's scratch batch (the first prompt, cut)
OnStep = Callable[[list[int | None]], list[bool]]
# model -> {what a choice was measured on: the mode chosen}; weak keys, and values that do not refer
# to the model
_MEASURED: weakref.WeakKeyDictionary[nn.Module, dict[tuple, str]] = weakref.WeakKeyDictionary()
# the id(s) that end a row (EOS, end-of-turn tokens), not returned
StopIds = int | Collection[int] | None


@dataclass
class Generation:
    """What `generate` produced, and what it cost."""

    # new tokens per prompt, without the EOS; up to the token completing a stop string
    tokens: list[list[int]]
    # decoded new text per prompt (generate_text only)
    texts: list[str] = field(default_factory=list)
    # bytes the KV cache allocated (window layers: their window), = costs.kv_cache_bytes
    cache_bytes: int = 0
    # tokens per row the cache holds: longest prompt + max_new_tokens, or the sliding window
    context_len: int = 0
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0
    decode_steps: int = 0  # forwards after the prefill (one token per row each)
    mode: str = "eager"  # how the steps ran: eager, compiled, compiled reductions (`Decoder.mode`)
    # past_context="slide": steps predicted from a fresh forward of the last context-limit tokens
    slid: int = 0
    # token healing: prompt tokens removed per row, whose bytes the first new tokens re-spell
    # (empty without healing)
    backed_off: list[int] = field(default_factory=list)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Decoder:
    """Decodes with `model` (see the module docstring). Use as a context manager, or call
    `close`. While open it owns the model's weight layout: open one decoder per model at a time
    (another would see the re-laid weights as the caller's), and do not train the model until
    it is closed."""

    def __init__(
        self, model: TransformerLM, compile_decode: bool | str = False, restore: bool = True
    ) -> None:
        if compile_decode not in COMPILE_CHOICES:
            raise ValueError(
                f"compile_decode={compile_decode!r} is not allowed: one of {COMPILE_CHOICES}"
            )
        self.model, self.compile_decode, self.restore = model, compile_decode, restore
        self.device = next(model.parameters()).device
        if compile_decode:
            check_compile_decode(self.device)
        self.was_training = model.training
        model.eval()
        # the caller's tensors, put back on close
        self.originals = {w: w.data for w in row_major_cpu_linears(model)}
        self.weights = self._weights_key()
        # their column-major copies, made on first use
        self.columns: dict[nn.Parameter, torch.Tensor] = {}
        self.laid_out_columns = False  # whether the parameters hold the column-major copies now
        # eager | compiled | compiled reductions
        self.mode: str | None = None if compile_decode else "eager"
        self._steps: dict[str, Callable[..., torch.Tensor]] = {"eager": model}
        self.closed = False

    def __enter__(self) -> Decoder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Give the model back: the caller's own weight tensors (same data pointers and strides;
        with restore=False the decode layout stays) and its training mode."""
        if self.closed:
            return
        if self.restore:
            self._layout(columns=False)
        self.columns.clear()
        self.originals.clear()
        self.model.train(self.was_training)
        self.closed = True

    def _layout(self, columns: bool) -> None:
        """Weights column-major (what MKL's GEMVs and eager steps want) or the caller's row-major
        tensors (what the compiled reductions read). The parameters are touched only when the layout
        changes: once when a decoder first decodes, back on `close`, and between modes while
        `compile_decode=True` measures them."""
        if columns == self.laid_out_columns:
            return
        # real tensors, even inside inference_mode (the measurement's): a compiled step guards on
        # the weights' dispatch keys, and copies made as inference tensors on one call recompiled it
        # on the next (3.4 s)
        with torch.inference_mode(False), torch.no_grad():
            if columns and not self.columns:
                self.columns = {w: data.t().contiguous().t() for w, data in self.originals.items()}
            for w, data in (self.columns if columns else self.originals).items():
                w.data = data
        self.laid_out_columns = columns

    def _weights_key(self) -> tuple:
        """What the measured choice depends on besides the batch: each parameter's identity,
        the caller's tensor (its storage, dtype, device) and its in-place version (a training
        step bumps it)."""
        return tuple(
            (id(p), p._version, t.data_ptr(), t.dtype, t.device.type)
            for p in self.model.parameters()
            for t in [self.originals.get(p, p.data)]
        )

    def _step(self, mode: str) -> Callable[..., torch.Tensor]:
        if mode not in self._steps:
            self._steps[mode] = compiled_forward(
                self.model, reduce_linears=mode == "compiled reductions"
            )
        return self._steps[mode]

    def generate(
        self,
        prompts: list[list[int]],
        sampling: SamplingConfig = SamplingConfig(),
        eos_id: StopIds = None,
        on_step: OnStep | None = None,
        heal: Healing | None = None,
    ) -> Generation:
        """Up to `sampling.max_new_tokens` tokens after each prompt (token ids), as one batch; a row
        ends before the first of `eos_id` (one id or several: a tokenizer's `stop_ids`) it samples.
        `on_step(tokens)` sees each step's new token per row (None for rows already finished) and
        returns, per row, whether it must stop (e.g. a stop string appeared). `heal` constrains the
        first steps (token healing, infer/generate.py backs the prompts off and builds it)."""
        if self.closed:
            raise ValueError("this Decoder is closed: open a new one")
        check_prompts(self.model.config, prompts, sampling)
        if self.mode is None:
            known = _MEASURED.setdefault(self.model, {})
            key = (self.compile_decode, len(prompts), self.weights)
            if key not in known:
                # choices for weights no longer there
                for stale in [k for k in known if k[2] != self.weights]:
                    del known[stale]
                known[key] = self._choose(prompts)
            else:
                logger.info(
                    "decode: %s (measured for this model's weights at batch %d earlier)",
                    known[key],
                    len(prompts),
                )
            self.mode = known[key]
        self._layout(columns=self.mode != "compiled reductions")
        if self.mode != "compiled reductions" and not self.restore:
            self.originals.clear()  # the caller gave the weights up: free the row-major copies
        stops = (
            frozenset()
            if eos_id is None
            else frozenset([eos_id] if isinstance(eos_id, int) else eos_id)
        )
        with recompile_limit():
            return self._generate(prompts, sampling, stops, on_step, heal)

    def _choose(self, prompts: list[list[int]]) -> str:
        """The compiled step's kind (reductions where `reduction_gemvs_win` measures them faster),
        and with compile_decode=True whether it beats eager decoding here: interleaved rounds on
        the first prompt."""
        if not self.model.static_decode_shape and self.compile_decode != "always":
            # e.g. VQ: its state's tail grows by one token a step (up to two blocks), so every step
            # would recompile
            logger.info(
                "decode: eager (attn_kernel=%r: the state's shape changes every step)",
                self.model.config.attn_kernel,
            )
            return "eager"
        compiled = "compiled reductions" if reduction_gemvs_win(self.model) else "compiled"
        if self.compile_decode == "always":
            return compiled
        batch = [prompts[0][:PROBE_PROMPT]] * len(prompts)
        times: dict[str, list[float]] = {"eager": [], compiled: []}
        with recompile_limit():
            for mode in (compiled, "eager"):  # warm-up: the compile happens here, untimed
                self._time_steps(mode, batch, 2)
            for r in range(PROBE_ROUNDS):
                for mode in (compiled, "eager") if r % 2 == 0 else ("eager", compiled):
                    times[mode].append(self._time_steps(mode, batch, PROBE_STEPS))
        step_ms = {mode: 1e3 * statistics.median(t) for mode, t in times.items()}
        choice = compiled if step_ms[compiled] < step_ms["eager"] else "eager"
        logger.info(
            "decode: %s (a step took %.2f ms compiled%s, %.2f ms eager, batch %d, median "
            "of %d rounds)",
            choice,
            step_ms[compiled],
            " with reductions" if compiled != "compiled" else "",
            step_ms["eager"],
            len(batch),
            PROBE_ROUNDS,
        )
        return choice

    @torch.inference_mode()
    def _time_steps(self, mode: str, batch: list[list[int]], n: int) -> float:
        """Seconds per decode step of `mode` after a scratch prefill of `batch` (its own cache)."""
        self._layout(columns=mode != "compiled reductions")
        ids, _ = left_pad(batch, self.device)
        cache = KVCache.for_model(self.model, len(batch), ids.shape[1] + n + 1)
        token = self.model(ids, cache=cache, logits_to_keep=1)[:, -1].argmax(-1)[:, None]  # (B, 1)
        step = self._step(mode)
        _sync(self.device)
        start = time.perf_counter()
        for _ in range(n):
            token = step(token, cache=cache)[:, -1].argmax(-1)[:, None]
        _sync(self.device)
        return (time.perf_counter() - start) / n

    @torch.inference_mode()
    def _generate(
        self,
        prompts: list[list[int]],
        sampling: SamplingConfig,
        stops: frozenset[int],
        on_step: OnStep | None,
        heal: Healing | None = None,
    ) -> Generation:
        """Prefill, then the decode loop, timed apart (inputs already checked)."""
        longest, device = max(len(p) for p in prompts), self.device
        generator = (
            torch.Generator(device=device).manual_seed(sampling.seed)
            if sampling.seed is not None
            else None
        )
        window = slide_window(self.model.config, sampling, longest)
        if window is not None:  # a prompt longer than the window keeps its last `window` tokens
            prompts = [p[-window:] for p in prompts]
        capacity = window or longest + sampling.max_new_tokens
        start = time.perf_counter()
        logits, cache = prefill(self.model, prompts, capacity, device)  # (B, V)
        _sync(device)
        prefill_s = time.perf_counter() - start
        step = self._step(self.mode)
        forward = (
            SlidingWindow(self.model, step, cache, prompts, window)
            if window is not None
            else lambda token: step(token[:, None], cache=cache)[:, -1]  # (B, V)
        )
        out, ends, steps = _decode(forward, logits, sampling, generator, stops, on_step, heal)
        _sync(device)
        decode = time.perf_counter() - start - prefill_s
        tokens = [row[:end] for row, end in zip(out[:, :steps].tolist(), ends)]
        slid = forward.slid if isinstance(forward, SlidingWindow) else 0
        return Generation(
            tokens, [], cache.nbytes(), cache.max_len, prefill_s, decode, steps - 1, self.mode, slid
        )


def _decode(
    forward: Callable[[torch.Tensor], torch.Tensor],
    logits: torch.Tensor,
    sampling: SamplingConfig,
    generator: torch.Generator | None,
    stops: frozenset[int],
    on_step: OnStep | None,
    heal: Healing | None = None,
) -> tuple[torch.Tensor, list[int], int]:
    """The decode loop: sample (the first steps constrained while healing), record, feed back
    (`forward`: the new tokens (B,) -> the next logits (B, V)). Returns tokens (B, N), each row's
    length, steps taken."""
    n_new, batch = sampling.max_new_tokens, logits.shape[0]
    out = torch.empty(batch, n_new, dtype=torch.long, device=logits.device)
    # a row's tokens end before its EOS / after the token that completed a stop string
    ends = [n_new] * batch
    watch = bool(stops) or on_step is not None  # otherwise no per-step host sync at all
    for step in range(n_new):
        healing = heal is not None and heal.active
        # (B,)
        token = sample_next(heal.constrain(logits) if healing else logits, sampling, generator)
        if healing:
            heal.advance(token.tolist())
        out[:, step] = token
        if watch:
            _update_ends(token.tolist(), step, ends, stops, on_step)
            if all(end <= step + 1 for end in ends):
                return out, ends, step + 1
        if step + 1 < n_new:
            logits = forward(token)  # (B, V)
    return out, ends, n_new


def _update_ends(
    tokens: list[int], step: int, ends: list[int], stops: frozenset[int], on_step: OnStep | None
) -> None:
    """Close rows that produced a stop id at `step`, then those the callback stops (O(B)
    Python per step)."""
    active = [end > step for end in ends]
    for row, tok in enumerate(tokens):
        if active[row] and tok in stops:
            ends[row], active[row] = step, False
    if on_step is not None:
        stops = on_step([tok if live else None for tok, live in zip(tokens, active)])
        for row, stop in enumerate(stops):
            if active[row] and stop:
                ends[row] = step + 1

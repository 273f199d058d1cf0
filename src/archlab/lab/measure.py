"""What the lab measures per run: from metrics.jsonl, and from the final checkpoint after training.

Measures read from metrics.jsonl: `train_loss`, `spikes`, `diverged`, `max_grad_norm`. Measures computed by the
lab from the final checkpoint (`archlab.checkpoint.load_model`), in this process, one thread, after every run
has finished, so parallel arms never skew a timing:
- on the fixed evaluation set (lab/eval_set.py: >= 64k tokens in evenly strided validation windows, the same for
  every seed and arm): `val_loss`, `log_z_drift`, `max_attn_logit`; `bits_per_byte` on one byte span for every
  tokenizer;
- `embed_drift_rare` / `embed_drift_ratio` (lab/drift.py): per-row displacement from the step-0 weights
  (RUN_DIR/initial, train key `checkpoint.keep_initial`), binned by the row's count in the replayed batches;
- `step_ms`, `norm_time_share` / `norm_flop_share`, `kv_bytes_per_token`, `parameters`, `decode_tok_s`,
  `loss_at_2x` / `loss_at_4x`; Su's long-context accuracies `acc_{1x,8x}_{plain,repeated}[_method]`
  (lab/long_context.py); `max_embed_row_norm` and `max_embed_row_growth` read the checkpoints the run kept.

Rules stated once:
- A spike is a logged finite train loss above the median of the SPIKE_WINDOW finite logged losses before it
  (the point itself excluded, so a spike cannot raise its own reference) by more than SPIKE_NATS, or a skipped
  (non-finite) step.
- A run diverged when training stopped on non-finite steps, or its final validation loss is not finite or
  above its first logged train loss. `diverged` (0/1) is its own measure: the losses of a diverged run
  (`Measure.censored`) are not measurements of the arm, so a report ranks or excludes them (a non-finite
  one reads inf: the worst rank), never averages them.
- `Measure.exact`: arithmetic on the config (parameters, KV bytes, FLOP shares), the same at every seed;
  claims on it are "by construction", not experiments.
- `Measure.items`: the measure is a mean over a fixed item set (continuation cuts, accuracy windows), the same
  items in the same order for every run of a suite; its function returns the per-item outcomes, and the run's
  values hold their mean under the measure's name and the list under NAME@items (ITEMS_KEY), so a
  claim on it treats items as a second source of variance (lab/items.py).
- Measured values are cached per run (`read_measured` / `write_measured`, RUN/lab-measures.json) with each
  measure's `version`: a measure whose definition changed is computed again from the checkpoint on the next
  pass, so old run folders are re-scored without retraining.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from archlab.checkpoint import latest_checkpoint, list_checkpoints, load_initial_weights, load_model, load_weights
from archlab.costs import flops_per_token, kv_cache_bytes
from archlab.data.tokens import TokenData
from archlab.infer.engine import Decoder
from archlab.infer.sampling import SamplingConfig
from archlab.lab import drift, eval_set, long_context
from archlab.lab import embed_measures as embed
from archlab.nn.functional import cross_entropy
from archlab.nn.model import TransformerLM
from archlab.nn.norms import LayerNorm, RMSNorm
from archlab.train.metrics import read_metrics

logger = logging.getLogger(__name__)
SPIKE_WINDOW, SPIKE_NATS = 5, 0.5
LONGEST = 4  # the longest context measured, in training contexts (loss_at_4x)
STATUS = "lab-status.json"  # written by the runner beside a run: {"returncode": ...}
MEASURED = "lab-measures.json"  # per run: the lab's measurements and their versions (read_measured)
VERSIONS = "_versions"  # the key of lab-measures.json that holds {measure: version}
ITEMS_KEY = "@items"  # a measure's per-item outcomes in a run's measured values: f"{name}{ITEMS_KEY}"
# Timings keep the best of several tries: other load on the machine only ever adds time, so the minimum is the
# figure least moved by it (the benchmarks' rule too). A slow spell of a shared machine lasts tens of seconds, longer
# than one run's tries, so the lab times every run TIMING_ROUNDS times, in rounds over all runs
# (runner.measure_plan), and keeps each run's best round: a spell then costs a run one round, not all its tries.
TIMING_ROUNDS = 3
TIMED_STEPS, WARMUP_STEPS = 5, 2  # per round: forward+backward passes timed (the fastest counts) after warm-up
PROFILED_STEPS = 8  # forward+backward passes under the profiler (norm_time_share)
DECODE_TOKENS, DECODE_PROMPT, DECODE_TRIES = 64, 16, 2  # per round: greedy generations timed (the fastest counts)
# FLOPs per normalized element, forward: RMSNorm x*x, mean, * rsqrt, * gain; LayerNorm adds the mean, the
# subtraction and (with a bias) the shift. Backward costs about twice the forward, as for matmuls.
NORM_FLOPS = {"rmsnorm": 4, "layernorm": 6}


@dataclass
class RunView:
    """One finished run folder and what the lab loaded from it (the model only when a measure needs it)."""

    run_dir: Path
    windows: int  # the long-context loss measures read this many windows of LONGEST x the training context
    _model: TransformerLM | None = None
    _memo: dict = field(default_factory=dict)  # passes several measures share (one evaluation forward, ...)

    @property
    def config(self) -> dict:
        return json.loads((self.run_dir / "config.json").read_text(encoding="utf-8"))

    @property
    def model(self) -> TransformerLM:
        if self._model is None:
            self._model = load_model(self.run_dir)[0]
        return self._model

    def status(self) -> dict:
        path = self.run_dir / STATUS
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}

    def data(self) -> TokenData:
        return TokenData(self.config["train"]["data"]["source"])

    @property
    def block_size(self) -> int:
        return int(self.config["train"]["data"]["block_size"])

    def memo(self, key: str, compute: Callable[[], object]) -> object:
        if key not in self._memo:
            self._memo[key] = compute()
        return self._memo[key]


# -------------------------------------------------------------------------------------- from metrics
def _losses(run: RunView) -> list[float]:
    return [float(r["loss"]) for r in read_metrics(run.run_dir, "train")]


def diverged(run: RunView) -> float:
    evals = read_metrics(run.run_dir, "eval")
    train = _losses(run)
    final = float(evals[-1]["loss"]) if evals else math.nan
    if run.status().get("returncode", 0) != 0 or not math.isfinite(final):
        return 1.0
    return float(bool(train) and final > train[0])


def train_loss(run: RunView) -> float:
    tail = [v for v in _losses(run)[-3:] if math.isfinite(v)]
    return statistics.fmean(tail) if tail else math.nan


def spikes(run: RunView) -> float:
    """Skipped steps plus logged losses above the median of the SPIKE_WINDOW finite losses before them by more
    than SPIKE_NATS (the trailing window excludes the point, so a spike never hides in its own median)."""
    losses = [v for v in _losses(run) if math.isfinite(v)]  # a skipped step's nan is counted as a skip
    count = len(read_metrics(run.run_dir, "skip"))
    for i in range(SPIKE_WINDOW, len(losses)):
        if losses[i] > statistics.median(losses[i - SPIKE_WINDOW:i]) + SPIKE_NATS:
            count += 1
    return float(count)


def max_grad_norm(run: RunView) -> float:
    norms = [float(r["grad_norm"]) for r in read_metrics(run.run_dir, "train")]
    return max((n for n in norms if math.isfinite(n)), default=math.inf)


# -------------------------------------------------------------------------------- from the checkpoint
def _batch(run: RunView) -> torch.Tensor:
    d = run.config["train"]["data"]
    return torch.randint(run.model.config.vocab_size, (d["batch_size"], d["block_size"] + 1),
                         generator=torch.Generator().manual_seed(0))


def _train_pass(model: TransformerLM, batch: torch.Tensor) -> None:
    cross_entropy(model(batch[:, :-1]), batch[:, 1:]).backward()
    model.zero_grad(set_to_none=True)


def step_ms(run: RunView) -> float:
    """Fastest wall time of a forward + backward at the run's batch and block (no optimizer), milliseconds."""
    model, batch = run.model.train(), _batch(run)
    times = []
    for i in range(WARMUP_STEPS + TIMED_STEPS):
        start = time.perf_counter()
        _train_pass(model, batch)
        if i >= WARMUP_STEPS:
            times.append(time.perf_counter() - start)
    return 1000.0 * min(times)


def _norm_modules(model: TransformerLM) -> list[RMSNorm]:
    return [m for m in model.modules() if isinstance(m, RMSNorm)]  # LayerNorm subclasses RMSNorm


def norm_time_share(run: RunView) -> float:
    """Share of a forward + backward's time inside norm layers, from torch.profiler ranges.

    Each norm's forward runs inside a `norm` record_function range opened and closed by module hooks; its
    backward inside `norm.backward`, opened by a full-backward pre-hook and closed by the backward hook (the
    CPU autograd engine runs one norm's backward as one stretch, so the ranges nest as the hooks assume).
    """
    model, batch = run.model.train(), _batch(run)
    handles = []
    for module in _norm_modules(model):
        handles += [module.register_forward_pre_hook(_open("norm")), module.register_forward_hook(_close),
                    module.register_full_backward_pre_hook(_open("norm.backward")),
                    module.register_full_backward_hook(_close)]
    try:
        for _ in range(WARMUP_STEPS):
            _train_pass(model, batch)
        cpu = [torch.profiler.ProfilerActivity.CPU]
        with without_profiler_chatter(), torch.profiler.profile(activities=cpu) as prof:
            with torch.profiler.record_function("step"):
                for _ in range(PROFILED_STEPS):
                    _train_pass(model, batch)
    finally:
        for h in handles:
            h.remove()
    totals = {"step": 0.0, "norm": 0.0, "norm.backward": 0.0}
    for event in prof.events():
        if event.name in totals:
            totals[event.name] += event.cpu_time_total
    return (totals["norm"] + totals["norm.backward"]) / totals["step"]


PROFILER_CHATTER = ("USDT:", "STAGE:")  # kineto's lines at every profiler start and stop


@contextlib.contextmanager
def without_profiler_chatter() -> Iterator[None]:
    """Hold back the lines torch's profiler (kineto, in C++) writes to file descriptor 2 at start and stop, and
    log every other line written meanwhile as a warning. Kineto's own switch (KINETO_LOG_LEVEL, read when torch
    loads) silences its errors along with the chatter."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            lines = held.read().decode(errors="replace").splitlines(keepends=True)
            for line in lines:
                if line.strip() and not line.startswith(PROFILER_CHATTER):
                    logger.warning("torch profiler: %s", line.rstrip())


_OPEN: list[torch.profiler.record_function] = []  # ranges opened by hooks, closed last-in first-out


def _open(name: str) -> Callable:
    def hook(module: torch.nn.Module, *args: object) -> None:
        _OPEN.append(torch.profiler.record_function(name).__enter__())
    return hook


def _close(module: torch.nn.Module, *args: object) -> None:
    _OPEN.pop().__exit__(None, None, None)


def norm_flop_share(run: RunView) -> float:
    """Share of a training step's FLOPs in norm layers: normalized elements x NORM_FLOPS, forward and backward."""
    model, batch = run.model, _batch(run)
    forward_flops: list[int] = []

    def count(module: RMSNorm, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
        kind = "layernorm" if isinstance(module, LayerNorm) else "rmsnorm"  # QK-norms may differ from `norm`
        forward_flops.append(inputs[0].numel() * (NORM_FLOPS[kind] + (module.bias is not None)))

    handles = [m.register_forward_hook(count) for m in _norm_modules(model)]
    try:
        with torch.no_grad():
            model(batch[:, :-1])
    finally:
        for h in handles:
            h.remove()
    norm = 3 * sum(forward_flops) / batch[:, :-1].numel()  # per token, forward + backward
    return norm / (flops_per_token(model.config, batch.shape[1] - 1)["training"] + norm)


def kv_bytes_per_token(run: RunView) -> float:
    return float(kv_cache_bytes(run.model.config, dtype="bf16")["per_token"])


def decode_tok_s(run: RunView) -> float:
    """Greedy decoding speed, batch 1: DECODE_TOKENS new tokens after a DECODE_PROMPT-token prompt, the
    fastest of DECODE_TRIES generations (after one untimed)."""
    prompt = _batch(run)[0, :DECODE_PROMPT].tolist()
    sampling = SamplingConfig(max_new_tokens=DECODE_TOKENS, temperature=0.0)
    with Decoder(run.model) as decoder:  # one decode layout for every try; the weights come back after
        decoder.generate([prompt], sampling)  # warm-up
        rates = []
        for _ in range(DECODE_TRIES):
            start = time.perf_counter()
            out = decoder.generate([prompt], sampling)
            rates.append(len(out.tokens[0]) / (time.perf_counter() - start))
    return max(rates)


def _val_windows(run: RunView, length: int) -> np.ndarray:
    """Non-overlapping validation windows of length + 1 tokens over the same stretch of text for every length:
    the first `run.windows` x LONGEST x block_size tokens of val (or all of it), so 1x, 2x and 4x compare the
    loss on the same targets and only the context differs."""
    val = np.asarray(run.data().splits["val"])
    span = min(run.windows * LONGEST * run.config["train"]["data"]["block_size"], len(val) - 1)
    n = span // length
    if n < 1:
        raise ValueError(f"{run.run_dir}: the validation split ({len(val)} tokens) is shorter than {length + 1}")
    return np.stack([val[i * length:(i + 1) * length + 1] for i in range(n)]).astype(np.int64)


@torch.no_grad()
def _loss_at(run: RunView, factor: int) -> float | None:
    model = run.model.eval()
    if factor > 1 and model.config.position == "learned":
        return None  # a learned table has no rows past the training length
    windows = torch.from_numpy(_val_windows(run, factor * run.config["train"]["data"]["block_size"]))
    return float(cross_entropy(model(windows[:, :-1]), windows[:, 1:]))


def _scores(run: RunView) -> eval_set.Scores:
    """One forward pass over the fixed evaluation set, shared by val_loss and log_z_drift."""
    return run.memo("scores", lambda: eval_set.score_windows(
        run.model, run.data(), eval_set.eval_starts(run.data(), run.block_size), run.block_size))


def _worst_if_not_finite(value: float) -> float:
    return value if math.isfinite(value) else math.inf  # a diverged model ranks last, never as nan


def val_loss(run: RunView) -> float:
    """Mean cross entropy of the final checkpoint on the fixed evaluation set (eval_set.eval_starts)."""
    return _worst_if_not_finite(_scores(run).loss)


def log_z_drift(run: RunView) -> float:
    """Mean |log Z| of the head's logits on the fixed evaluation set (z-loss pins log Z to 0)."""
    return _worst_if_not_finite(_scores(run).abs_log_z)


def max_attn_logit(run: RunView) -> float:
    """Largest |q . k| * scale of any layer and head on the fixed evaluation set (QK-norm, softcap claims)."""
    data = run.data()
    return _worst_if_not_finite(eval_set.max_attention_logit(run.model, data, eval_set.eval_starts(
        data, run.block_size), run.block_size))


def bits_per_byte(run: RunView) -> float:
    """Bits per byte on the validation byte span every tokenizer scores (eval_set.byte_span)."""
    return _worst_if_not_finite(eval_set.bits_per_byte(run.model, run.data(), run.block_size))


def _drift(run: RunView) -> tuple[float | None, float | None]:
    """(mean drift of rare rows, of frequent rows) of the token embedding from step 0 (lab/drift.py)."""
    def compute() -> tuple[float | None, float | None]:
        initial = load_initial_weights(run.run_dir)
        if initial is None:
            raise ValueError(f"{run.run_dir} has no step-0 weights (initial/): embedding drift needs a run "
                             "trained with --checkpoint.keep_initial true")
        final_path = latest_checkpoint(run.run_dir)
        final = load_weights(final_path)["embed_tokens.weight"]
        t = run.config["train"]
        counts = drift.seen_counts(run.data(), int(t["seed"]), int(final_path.name.split("_")[1]),
                                   int(t["data"]["batch_size"]), run.block_size, int(t["optimizer"]["grad_accum"]),
                                   final.shape[0])
        return drift.drift_by_count(drift.row_drift(initial["embed_tokens.weight"], final), counts)
    return run.memo("drift", compute)


def embed_drift_ratio(run: RunView) -> float | None:
    rare, frequent = _drift(run)
    return None if rare is None or not frequent else rare / frequent


def max_embed_row_norm_series(run_dir: Path) -> list[tuple[int, float]]:
    """(step, largest L2 norm of an embedding row) for every checkpoint the run kept."""
    out = []
    for path in list_checkpoints(run_dir):
        weight = load_weights(path)["embed_tokens.weight"].float()
        out.append((int(path.name.split("_")[1]), float(weight.norm(dim=1).max())))
    return out


def max_embed_row_growth(run: RunView) -> float | None:
    """Largest growth of one embedding row's norm from the first kept checkpoint to the last: the rows a
    sign-based optimizer keeps pushing (rare tokens) grow while the init still dominates the largest norm."""
    paths = list_checkpoints(run.run_dir)
    if len(paths) < 2:
        return None
    first, last = (load_weights(p)["embed_tokens.weight"].float().norm(dim=1) for p in (paths[0], paths[-1]))
    return float((last - first).max())


@dataclass(frozen=True)
class Measure:
    fn: Callable[[RunView], float | None]
    better: str  # lower | higher: which way is good, for verdicts and tables
    label: str  # what the number is, with its unit
    needs_checkpoint: bool = True  # reads the final checkpoint (n/a for a run that diverged before saving one)
    timing: bool = False  # a wall-clock time: taken in TIMING_ROUNDS rounds over all runs, the best round kept
    exact: bool = False  # arithmetic on the config, the same at every seed: claims on it are "by construction"
    censored: bool = False  # a diverged run's value is no measurement of the arm: rank or exclude it
    version: int = 1  # raised when the definition changes, so cached values are computed again
    items: bool = False  # fn returns per-item outcomes on a fixed item set; the value is their mean

    def best(self, a: float | None, b: float | None) -> float | None:
        """The better of two tries of this measure (None, n/a for the run, stays None)."""
        if a is None or b is None:
            return None
        return min(a, b) if self.better == "lower" else max(a, b)


MEASURES: dict[str, Measure] = {
    "val_loss": Measure(val_loss, "lower", f"validation loss on the fixed evaluation set ({eval_set.EVAL_TOKENS:,} "
                        "tokens in evenly strided windows, or the whole split; nats/token)", censored=True,
                        version=2),
    "train_loss": Measure(train_loss, "lower", "train loss, mean of the last 3 logged steps", False, censored=True),
    "spikes": Measure(spikes, "lower", f"loss spikes (> median of the {SPIKE_WINDOW} logged losses before + "
                      f"{SPIKE_NATS} nats) and skipped steps", False, version=2),
    "diverged": Measure(diverged, "lower", "diverged (1) or not (0)", False),
    "max_grad_norm": Measure(max_grad_norm, "lower", "largest gradient norm before clipping", False),
    "step_ms": Measure(step_ms, "lower", f"forward + backward time, ms, fastest of {TIMING_ROUNDS} x {TIMED_STEPS} "
                       "(1 thread)", timing=True),
    "norm_time_share": Measure(norm_time_share, "lower", "share of step time in norms (torch.profiler)"),
    "norm_flop_share": Measure(norm_flop_share, "lower", "share of step FLOPs in norms", exact=True),
    "kv_bytes_per_token": Measure(kv_bytes_per_token, "lower", "KV-cache bytes per token (bf16)", exact=True),
    "parameters": Measure(lambda r: float(r.model.num_parameters()), "lower", "parameters (a tied head once)",
                          exact=True),
    "decode_tok_s": Measure(decode_tok_s, "higher", f"greedy decode tokens/s, batch 1, fastest of {TIMING_ROUNDS} x "
                            f"{DECODE_TRIES} (1 thread)", timing=True),
    "loss_at_1x": Measure(lambda r: _loss_at(r, 1), "lower", "validation loss at the training length",
                          censored=True),
    "loss_at_2x": Measure(lambda r: _loss_at(r, 2), "lower", "validation loss at 2x the training length",
                          censored=True),
    "loss_at_4x": Measure(lambda r: _loss_at(r, 4), "lower", "validation loss at 4x the training length",
                          censored=True),
    "bits_per_byte": Measure(bits_per_byte, "lower", f"bits per byte on the first {eval_set.SPAN_BYTES:,} bytes of "
                             "validation text (the same bytes for every tokenizer)", censored=True, version=2),
    "log_z_drift": Measure(log_z_drift, "lower", "mean |log Z| of the head's logits on the fixed evaluation set",
                           censored=True),
    "max_attn_logit": Measure(max_attn_logit, "lower", "largest attention logit |q.k| x scale on the fixed "
                              "evaluation set", censored=True),
    "embed_drift_rare": Measure(lambda r: _drift(r)[0], "lower", f"mean embedding-row drift from step 0 of the "
                                f"ids seen 1-{drift.RARE_MAX} times", censored=True),
    "embed_drift_ratio": Measure(embed_drift_ratio, "lower", "embedding drift of rare ids / of the "
                                 f"{drift.FREQUENT_SHARE:.0%} most-seen ids", censored=True),
    "max_embed_row_norm": Measure(lambda r: max(v for _, v in max_embed_row_norm_series(r.run_dir)), "lower",
                                  "largest embedding row norm over the kept checkpoints"),
    "max_embed_row_growth": Measure(max_embed_row_growth, "lower",
                                    "largest growth of an embedding row norm, first to last kept checkpoint"),
    "embed_near_fixed_point": Measure(lambda r: embed.last_eval(r, "embed_near_fixed_point"), "lower",
                                      "share of embedding entries within 1% of 1/lambda (last evaluation)", False),
    "embed_max_abs": Measure(lambda r: embed.last_eval(r, "embed_max_abs"), "lower",
                             "largest |embedding entry| (last evaluation)", False),
    "first_train_loss": Measure(embed.first_train_loss, "lower", "loss of the step-0 model on its first batch",
                                False),
    "continuation_acc": Measure(embed.continuation_hits, "higher", f"next 8 bytes right after a random byte cut "
                                f"of the first {embed.CONTINUATION_BYTES:,} bytes of validation text, the same for "
                                "every tokenizer (greedy; eval/continuation.py); items: the cuts", version=2,
                                items=True),
    "continuation_healing_gain": Measure(embed.continuation_healing_gains, "higher",
                                         "continuation_acc with token healing minus without, same cuts; items: the "
                                         "cuts", version=2, items=True),
}
for _name, (_f, _s, _m) in long_context.measure_names().items():  # Su's protocol (lab/long_context.py)
    MEASURES[_name] = Measure(lambda r, f=_f, s=_s, m=_m: long_context.window_accuracies(r, f, s, m), "higher",
                              f"next-token accuracy at {_f}x the training length, {_s} samples"
                              + ("" if _m == "none" else f", {_m} at inference") + "; items: the windows",
                              censored=True, items=True,
                              version=3 if _m in ("leaky_rerope", "logn") else 2)  # +1: per-window items kept


def measure_run(run_dir: Path, names: list[str], windows: int) -> dict[str, float | None]:
    """Every measure in `names` for one finished run (the model is loaded once, one thread)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        run = RunView(Path(run_dir), windows)
        saved = bool(list_checkpoints(run_dir))
        out: dict = {}
        for name in names:
            value = MEASURES[name].fn(run) if saved or not MEASURES[name].needs_checkpoint else None
            if MEASURES[name].items and value is not None:
                items = [float(v) for v in value]  # type: ignore[union-attr]
                out[name + ITEMS_KEY] = items
                value = statistics.fmean(items)
            out[name] = value
        return out
    finally:
        torch.set_num_threads(threads)


def read_measured(run_dir: Path) -> dict[str, float | None]:
    """The values cached in RUN/lab-measures.json whose measure still has the version they were computed at
    (a file without versions predates them: version 1)."""
    path = Path(run_dir) / MEASURED
    values = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    versions = values.pop(VERSIONS, {})

    def current(key: str) -> bool:
        name = key.removesuffix(ITEMS_KEY)
        return name in MEASURES and versions.get(name, 1) == MEASURES[name].version

    return {k: v for k, v in values.items() if current(k)}


def write_measured(run_dir: Path, values: dict) -> None:
    """Cache `values` (NAME@items lists too) with the version of each measure (read back by `read_measured`)."""
    record = {**values, VERSIONS: {k: MEASURES[k].version for k in values if k in MEASURES}}
    (Path(run_dir) / MEASURED).write_text(json.dumps(record, indent=2), encoding="utf-8")

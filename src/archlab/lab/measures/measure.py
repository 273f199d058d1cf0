"""What the lab measures per run (MEASURES): the registry, one finished run as the measures see it
(`RunView`), and each run's cache of measured values.

Measures read from metrics.jsonl (lab/measures/training_measures.py): `train_loss`, `spikes`,
`diverged`, `max_grad_norm`. Measures computed by the lab from the final checkpoint
(`archlab.checkpoint.load_model`), in this process, one thread, after every run has finished, so
parallel arms never skew a timing:
- on validation text (lab/measures/eval_measures.py): `val_loss`, `log_z_drift`,
  `max_attn_logit`, `bits_per_byte` on the fixed evaluation set (lab/measures/eval_set.py),
  `loss_at_2x` / `loss_at_4x`;
- what the model costs (lab/measures/cost_measures.py): `step_ms`, `norm_time_share` /
  `norm_flop_share`, `kv_bytes_per_token`, `decode_tok_s`; and `parameters`;
- the embedding and the vocabulary (lab/measures/embed_measures.py): `embed_drift_rare` /
  `embed_drift_ratio` from the step-0 weights, `max_embed_row_norm` / `max_embed_row_growth` over
  the kept checkpoints, the outlier signature, `first_train_loss`, `continuation_acc`;
- Su's long-context accuracies
  `acc_{1x,8x}_{plain,repeated}[_method]` (lab/measures/long_context.py).

Rules stated once:
- `diverged` (0/1) is its own measure: the losses of a diverged run (`Measure.censored`) are not
  measurements of the arm, so a report ranks or excludes them (a non-finite one reads inf: the worst
  rank), never averages them.
- `Measure.exact`: arithmetic on the config (parameters, KV bytes, FLOP shares), the same at every
  seed; claims on it are "by construction", not experiments.
- `Measure.items`: the measure is a mean over a fixed item set (continuation cuts, accuracy
  windows), the same items in the same order for every run of a suite; its function returns
  the per-item outcomes, and the run's values hold their mean under the measure's name and
  the list under NAME@items (ITEMS_KEY), so a claim on it treats items as a second source
  of variance (lab/analysis/items.py).
- Measured values are cached per run (`read_measured` / `write_measured`, RUN/lab-measures.json)
  with each measure's `version`: a measure whose definition changed is computed again from the
  checkpoint on the next pass, so old run folders are re-scored without retraining.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from archlab.checkpoint import list_checkpoints, load_model
from archlab.data.tokens import TokenData
from archlab.lab.measures import drift, eval_set, long_context
from archlab.lab.measures import embed_measures as embed
from archlab.lab.measures.cost_measures import (
    DECODE_TRIES,
    TIMED_STEPS,
    decode_tok_s,
    kv_bytes_per_token,
    norm_flop_share,
    norm_time_share,
    step_ms,
)
from archlab.lab.measures.eval_measures import (
    bits_per_byte,
    log_z_drift,
    loss_at,
    max_attn_logit,
    val_loss,
)
from archlab.lab.measures.training_measures import (
    SPIKE_NATS,
    SPIKE_WINDOW,
    diverged,
    max_grad_norm,
    spikes,
    train_loss,
)
from archlab.nn.model import TransformerLM

STATUS = "lab-status.json"  # written by the runner beside a run: {"returncode": ...}
MEASURED = "lab-measures.json"  # per run: the lab's measurements and their versions (read_measured)
VERSIONS = "_versions"  # the key of lab-measures.json that holds {measure: version}
# a measure's per-item outcomes in a run's measured values: f"{name}{ITEMS_KEY}"
ITEMS_KEY = "@items"
# Timings keep the best of several tries: other load on the machine only ever adds time, so
# the minimum is the figure least moved by it (the benchmarks' rule too). A slow spell of a
# shared machine lasts tens of seconds, longer than one run's tries, so the lab times every run
# TIMING_ROUNDS times, in rounds over all runs (collect.measure_plan), and keeps each run's best
# round: a spell then costs a run one round, not all its tries.
TIMING_ROUNDS = 3


@dataclass
class RunView:
    """One finished run folder and what the lab loaded from it (the model only when a
    measure needs it)."""

    run_dir: Path
    # loss_at_Nx reads this many windows of LONGEST x the
    # training context (lab/measures/eval_measures.py)
    windows: int
    _model: TransformerLM | None = None
    # passes several measures share (one evaluation forward, ...)
    _memo: dict = field(default_factory=dict)

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


@dataclass(frozen=True)
class Measure:
    fn: Callable[[RunView], float | None]
    better: str  # lower | higher: which way is good, for verdicts and tables
    label: str  # what the number is, with its unit
    # reads the final checkpoint (n/a for a run that diverged before saving one)
    needs_checkpoint: bool = True
    # a wall-clock time: taken in TIMING_ROUNDS rounds over all runs, the best round kept
    timing: bool = False
    # arithmetic on the config, the same at every seed: claims on it are "by construction"
    exact: bool = False
    # a diverged run's value is no measurement of the arm: rank or exclude it
    censored: bool = False
    version: int = 1  # raised when the definition changes, so cached values are computed again
    items: bool = False  # fn returns per-item outcomes on a fixed item set; the value is their mean
    # nats | share (0 to 1): the unit whose margins lab/spec/budgets.py MARGIN_LIMITS bounds
    scale: str | None = None

    def best(self, a: float | None, b: float | None) -> float | None:
        """The better of two tries of this measure (None, n/a for the run, stays None)."""
        if a is None or b is None:
            return None
        return min(a, b) if self.better == "lower" else max(a, b)


MEASURES: dict[str, Measure] = {
    "val_loss": Measure(
        val_loss,
        "lower",
        f"validation loss on the fixed evaluation set ({eval_set.EVAL_TOKENS:,} "
        "tokens in evenly strided windows, or the whole split; nats/token)",
        censored=True,
        version=2,
        scale="nats",
    ),
    "train_loss": Measure(
        train_loss,
        "lower",
        "train loss, mean of the last 3 logged steps",
        False,
        censored=True,
        scale="nats",
    ),
    "spikes": Measure(
        spikes,
        "lower",
        f"loss spikes (> median of the {SPIKE_WINDOW} logged losses before + "
        f"{SPIKE_NATS} nats) and skipped steps",
        False,
        version=2,
    ),
    "diverged": Measure(diverged, "lower", "diverged (1) or not (0)", False, scale="share"),
    "max_grad_norm": Measure(
        max_grad_norm, "lower", "largest gradient norm before clipping", False
    ),
    "step_ms": Measure(
        step_ms,
        "lower",
        f"forward + backward time, ms, fastest of {TIMING_ROUNDS} x {TIMED_STEPS} (1 thread)",
        timing=True,
    ),
    "norm_time_share": Measure(
        norm_time_share, "lower", "share of step time in norms (torch.profiler)", scale="share"
    ),
    "norm_flop_share": Measure(
        norm_flop_share, "lower", "share of step FLOPs in norms", exact=True, scale="share"
    ),
    "kv_bytes_per_token": Measure(
        kv_bytes_per_token, "lower", "KV-cache bytes per token (bf16)", exact=True
    ),
    "parameters": Measure(
        lambda r: float(r.model.num_parameters()),
        "lower",
        "parameters (a tied head once)",
        exact=True,
    ),
    "decode_tok_s": Measure(
        decode_tok_s,
        "higher",
        f"greedy decode tokens/s, batch 1, fastest of {TIMING_ROUNDS} x {DECODE_TRIES} (1 thread)",
        timing=True,
    ),
    "loss_at_1x": Measure(
        lambda r: loss_at(r, 1),
        "lower",
        "validation loss at the training length",
        censored=True,
        scale="nats",
    ),
    "loss_at_2x": Measure(
        lambda r: loss_at(r, 2),
        "lower",
        "validation loss at 2x the training length",
        censored=True,
        scale="nats",
    ),
    "loss_at_4x": Measure(
        lambda r: loss_at(r, 4),
        "lower",
        "validation loss at 4x the training length",
        censored=True,
        scale="nats",
    ),
    "bits_per_byte": Measure(
        bits_per_byte,
        "lower",
        f"bits per byte on the first {eval_set.SPAN_BYTES:,} bytes of "
        "validation text (the same bytes for every tokenizer)",
        censored=True,
        version=2,
    ),
    "log_z_drift": Measure(
        log_z_drift,
        "lower",
        "mean |log Z| of the head's logits on the fixed evaluation set",
        censored=True,
    ),
    "max_attn_logit": Measure(
        max_attn_logit,
        "lower",
        "largest attention logit |q.k| x scale on the fixed evaluation set",
        censored=True,
    ),
    "embed_drift_rare": Measure(
        lambda r: embed.embed_drift(r)[0],
        "lower",
        f"mean embedding-row drift from step 0 of the ids seen 1-{drift.RARE_MAX} times",
        censored=True,
    ),
    "embed_drift_ratio": Measure(
        embed.embed_drift_ratio,
        "lower",
        f"embedding drift of rare ids / of the {drift.FREQUENT_SHARE:.0%} most-seen ids",
        censored=True,
    ),
    "max_embed_row_norm": Measure(
        lambda r: max(v for _, v in embed.max_embed_row_norm_series(r.run_dir)),
        "lower",
        "largest embedding row norm over the kept checkpoints",
    ),
    "max_embed_row_growth": Measure(
        embed.max_embed_row_growth,
        "lower",
        "largest growth of an embedding row norm, first to last kept checkpoint",
    ),
    "embed_near_fixed_point": Measure(
        lambda r: embed.last_eval(r, "embed_near_fixed_point"),
        "lower",
        "share of embedding entries within 1% of 1/lambda (last evaluation)",
        False,
        scale="share",
    ),
    "embed_max_abs": Measure(
        lambda r: embed.last_eval(r, "embed_max_abs"),
        "lower",
        "largest |embedding entry| (last evaluation)",
        False,
    ),
    "first_train_loss": Measure(
        embed.first_train_loss,
        "lower",
        "loss of the step-0 model on its first batch",
        False,
        scale="nats",
    ),
    "continuation_acc": Measure(
        embed.continuation_hits,
        "higher",
        f"next 8 bytes right after each of "
        f"{embed.CONTINUATION['cuts']:,} random byte cuts of the first "
        f"{embed.CONTINUATION_BYTES:,} bytes of validation text, the same for every tokenizer "
        "(greedy; eval/continuation.py; runs measured before version 3: 200 cuts of the "
        "first 20,000 bytes); items: the cuts",
        version=3,
        items=True,
        scale="share",
    ),
    "continuation_healing_gain": Measure(
        embed.continuation_healing_gains,
        "higher",
        "continuation_acc with token healing minus without, same cuts; items: the cuts",
        version=3,
        items=True,
        scale="share",
    ),
}
# Su's protocol (lab/measures/long_context.py)
for _name, (_f, _s, _m) in long_context.measure_names().items():
    MEASURES[_name] = Measure(
        lambda r, f=_f, s=_s, m=_m: long_context.window_accuracies(r, f, s, m),
        "higher",
        f"next-token accuracy at {_f}x the training length, {_s} samples"
        + ("" if _m == "none" else f", {_m} at inference")
        + "; items: the windows",
        censored=True,
        items=True,
        scale="share",
        # +1: per-window items kept
        version=3 if _m in ("leaky_rerope", "logn") else 2,
    )


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
    """The values cached in RUN/lab-measures.json whose measure still has the version they were
    computed at (a file without versions predates them: version 1)."""
    path = Path(run_dir) / MEASURED
    values = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    versions = values.pop(VERSIONS, {})

    def current(key: str) -> bool:
        name = key.removesuffix(ITEMS_KEY)
        return name in MEASURES and versions.get(name, 1) == MEASURES[name].version

    return {k: v for k, v in values.items() if current(k)}


def write_measured(run_dir: Path, values: dict) -> None:
    """Cache `values` (NAME@items lists too) with the version of each measure (read
    back by `read_measured`)."""
    record = {**values, VERSIONS: {k: MEASURES[k].version for k in values if k in MEASURES}}
    (Path(run_dir) / MEASURED).write_text(json.dumps(record, indent=2), encoding="utf-8")

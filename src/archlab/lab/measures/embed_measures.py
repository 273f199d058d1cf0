"""The lab's measures for the embedding and vocabulary suites (optimizer,
sign-optimizer-embeddings, tied-head, vocab):

- `embed_near_fixed_point`, `embed_max_abs`: the trainer's outlier signature at the last evaluation
  (train/metrics.py `embedding_signature`: the share of entries within 1% of 1/lambda, max |E|);
- `first_train_loss`: the loss of the first logged batch, which is the step-0 model's when
  `logging.log_every` is 1 (n/a otherwise): where a tied head starts (kexue.fm/archives/9698);
- `continuation_hits`, `continuation_healing_gains` (the measures continuation_acc,
  continuation_healing_gain): per cut, whether the next 8 bytes were generated
  (eval/continuation.py), and what token healing (one token) changes on the same cut
  (kexue.fm/archives/9762). The text is the first CONTINUATION_BYTES bytes of the validation text
  (lab/measures/eval_set.py `byte_span`), the same bytes for every tokenizer, so every arm of a
  suite is scored on the same cuts and a cut pairs across arms and seeds;
- `embed_drift_rare` / `embed_drift_ratio` (`embed_drift`, lab/measures/drift.py): per-row
  displacement from the step-0 weights (RUN_DIR/initial, train key `checkpoint.keep_initial`),
  binned by the row's count in the replayed batches;
- `max_embed_row_norm` and `max_embed_row_growth` read the checkpoints the run kept.
"""

from __future__ import annotations

from pathlib import Path

from archlab.checkpoint import (
    latest_checkpoint,
    list_checkpoints,
    load_initial_weights,
    load_weights,
)
from archlab.eval.continuation import continuation_table
from archlab.lab.measures import drift
from archlab.lab.measures.eval_set import byte_span
from archlab.lab.measures.run_like import RunLike
from archlab.train.metrics import read_metrics

# 1,000 cuts of the first 100,000 bytes of validation text (every tokenizer alike): one cut per 100
# bytes, as the first 200 of 20,000 were, but 5x the items, so that a 0/1 claim rests on dozens
# of informative cuts, not the 3-7 a few-percent hit rate leaves of 200 (docs/lab-statistics.md,
# "Items"). `small`'s validation text holds 224,892 bytes; a smaller one is cut at its end.
# Measured: 14.1 s per run for a `small` bytes model on one thread (3.5 s at 200 cuts), about a
# tenth of its training time.
CONTINUATION_BYTES = 100_000
CONTINUATION = {"cuts": 1000, "context": 64, "k": 8}  # cuts, prompt bytes, bytes that must match


def last_eval(run: RunLike, key: str) -> float | None:
    """`key` of the run's last eval row in metrics.jsonl (None when it was not logged)."""
    rows = [r for r in read_metrics(run.run_dir, "eval") if key in r]
    return float(rows[-1][key]) if rows else None


def first_train_loss(run: RunLike) -> float | None:
    """The step-0 model's loss on its first batch: the train row of step 1 (logged before
    any update lands)."""
    rows = read_metrics(run.run_dir, "train")
    return float(rows[0]["loss"]) if rows and rows[0]["step"] == 1 else None


_continuations: dict[Path, dict] = {}


def _continuation(run: RunLike) -> dict:
    if run.run_dir not in _continuations:
        data = run.data()
        tokenizer = data.tokenizer()
        text = b"".join(byte_span(data, tokenizer, CONTINUATION_BYTES)).decode(
            "utf-8", errors="replace"
        )
        _continuations[run.run_dir] = continuation_table(
            run.model, tokenizer, text.replace("\ufffd", ""), (0, 1), **CONTINUATION
        )
    return _continuations[run.run_dir]


def continuation_hits(run: RunLike) -> list[float]:
    """Per cut, 1.0 when the next 8 bytes were generated without healing
    (their mean: continuation_acc)."""
    return [float(hit) for hit in _continuation(run)[0].hits]


def continuation_healing_gains(run: RunLike) -> list[float]:
    """Per cut, the healed hit minus the plain one (-1, 0 or 1;
    their mean: continuation_healing_gain)."""
    table = _continuation(run)
    return [
        float(healed) - float(plain)
        for plain, healed in zip(table[0].hits, table[1].hits, strict=True)
    ]


def embed_drift(run: RunLike) -> tuple[float | None, float | None]:
    """(mean drift of rare rows, of frequent rows) of the token embedding from
    step 0 (lab/measures/drift.py)."""

    def compute() -> tuple[float | None, float | None]:
        initial = load_initial_weights(run.run_dir)
        if initial is None:
            raise ValueError(
                f"{run.run_dir} has no step-0 weights (initial/): embedding drift needs a run "
                "trained with --checkpoint.keep_initial true"
            )
        final_path = latest_checkpoint(run.run_dir)
        final = load_weights(final_path)["embed_tokens.weight"]
        t = run.config["train"]
        counts = drift.seen_counts(
            run.data(),
            int(t["seed"]),
            int(final_path.name.split("_")[1]),
            int(t["data"]["batch_size"]),
            run.block_size,
            int(t["optimizer"]["grad_accum"]),
            final.shape[0],
        )
        return drift.drift_by_count(drift.row_drift(initial["embed_tokens.weight"], final), counts)

    return run.memo("drift", compute)


def embed_drift_ratio(run: RunLike) -> float | None:
    rare, frequent = embed_drift(run)
    return None if rare is None or not frequent else rare / frequent


def max_embed_row_norm_series(run_dir: Path) -> list[tuple[int, float]]:
    """(step, largest L2 norm of an embedding row) for every checkpoint the run kept."""
    out = []
    for path in list_checkpoints(run_dir):
        weight = load_weights(path)["embed_tokens.weight"].float()
        out.append((int(path.name.split("_")[1]), float(weight.norm(dim=1).max())))
    return out


def max_embed_row_growth(run: RunLike) -> float | None:
    """Largest growth of one embedding row's norm from the first kept checkpoint to the last: the
    rows a sign-based optimizer keeps pushing (rare tokens) grow while the init still dominates
    the largest norm."""
    paths = list_checkpoints(run.run_dir)
    if len(paths) < 2:
        return None
    first, last = (
        load_weights(p)["embed_tokens.weight"].float().norm(dim=1) for p in (paths[0], paths[-1])
    )
    return float((last - first).max())

"""The lab's speed claims, timed as the lab times them: fresh models, interleaved A/B
pairs, log ratios.

1. block: a training step (forward + backward + AdamW) of serial vs fused parallel blocks at the
   `small` lab shape (llama preset, d_model 128, 4 layers, 4 heads, batch 16 x 128), and the fusion
   alone (parallel with `parallel_fused=False` vs fused).
2. norm-type: RMSNorm vs LayerNorm, forward + backward of the op alone on (2048, d), d in {128, 512,
   2048}, built alike (both composite formulas under autograd; both under torch.compile) and as the
   model builds them (`module`: a hand-written RMSNorm backward against torch's native LayerNorm
   kernel); and the step effect, share x (1 - 1 / speedup), with the norms' share of the `small`
   step from the op's time.
3. heads: one-token decode steps of MHA vs GQA (2 KV heads) vs MQA at a 1024- and a 2048-token
   cache, batch 8, llama preset at d_model 256 (6 layers, 8 heads; d_ff not re-matched).
Each comparison: `archlab.lab.measures.timing.time_pairs` (A/B order balanced and shuffled per pair,
warm-up dropped), then the median of log(t_A / t_B) over the pairs and the mean's 95% t interval,
printed as ratios t_A / t_B (below 1: A is faster).

    .venv/bin/python benchmarks/bench_lab_timings.py         # the figures in docs/performance.md
    .venv/bin/python benchmarks/bench_lab_timings.py --tiny  # seconds: tiny shapes, 3 pairs (tests)

CPU threads default to 1 (the lab's jobs run one thread each); the machine's load before and after
is printed, since on a shared machine only the ratios of interleaved pairs mean anything.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import time
from pathlib import Path

import torch

from archlab.lab.measures.timing import (
    NORM_DIMS,
    PairedTimes,
    log_ratio_summary,
    norm_step_effect,
    time_pairs,
)
from archlab.nn.presets import build_preset

# the lab's `small` budget
SMALL = dict(d_model=128, n_layers=4, n_heads=4, max_seq_len=128, vocab_size=256)
DECODE = dict(d_model=256, n_layers=6, n_heads=8, max_seq_len=4096, vocab_size=256)
TINY = dict(d_model=32, n_layers=1, n_heads=2, max_seq_len=64, vocab_size=64)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--pairs",
        type=int,
        default=24,
        help="interleaved A/B pairs per comparison (the lab uses 20-30)",
    )
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--cache-lens", default="1024,2048", help="comma-separated decode cache lengths")
    p.add_argument("--builds", default="composite,compiled,module", help="norm builds to time")
    p.add_argument(
        "--out", type=Path, default=None, help="also write the figures as JSON to this file"
    )
    p.add_argument(
        "--tiny",
        action="store_true",
        help="tiny shapes, 3 pairs, no compile: checks the script runs",
    )
    return p.parse_args(argv)


def row(label: str, times: PairedTimes, confidence: float = 0.95) -> dict:
    """One comparison's figures: per-arm median ms, median ratio, mean ratio and its interval."""
    s = log_ratio_summary(times, confidence)
    return {
        "comparison": label,
        "pairs": s.n,
        "a_ms": 1e3 * statistics.median(times.a),
        "b_ms": 1e3 * statistics.median(times.b),
        "median_ratio": math.exp(s.median),
        "mean_ratio": s.ratio,
        "ci95": list(s.ratio_ci),
    }


def print_rows(title: str, rows: list[dict]) -> None:
    print(
        f"\n{title}\n| comparison (A vs B) | pairs | A ms | B ms | median t_A/t_B | mean t_A/t_B "
        "[95% CI] |"
    )
    print("|---|---|---|---|---|---|")
    for r in rows:
        lo, hi = r["ci95"]
        print(
            f"| {r['comparison']} | {r['pairs']} | {r['a_ms']:.3f} | {r['b_ms']:.3f} | "
            f"{r['median_ratio']:.3f} | {r['mean_ratio']:.3f} [{lo:.3f}, {hi:.3f}] |"
        )


def block_rows(args: argparse.Namespace) -> list[dict]:
    shape, batch, block = (TINY, 2, 16) if args.tiny else (SMALL, 16, 128)
    serial = build_preset("llama", "tiny", **shape)
    fused = build_preset("llama", "tiny", block="parallel", **shape)
    apart = build_preset("llama", "tiny", block="parallel", parallel_fused=False, **shape)
    opts = dict(kind="train_step", pairs=args.pairs, threads=args.threads, batch=batch, block=block)
    return [
        row("fused parallel vs serial (train step)", time_pairs(fused, serial, **opts)),
        row("fused parallel vs unfused parallel (train step)", time_pairs(fused, apart, **opts)),
    ]


def norm_rows(args: argparse.Namespace) -> tuple[list[dict], dict]:
    """The op at each width and build, and the step effect at the `small` width (d 128)."""
    shape = TINY if args.tiny else SMALL
    rms = build_preset("llama", "tiny", **shape)
    ln = build_preset("llama", "tiny", norm="layernorm", **shape)
    rows_n = 64 if args.tiny else 16 * 128
    dims = (32,) if args.tiny else NORM_DIMS
    rows, by_key = [], {}
    for build in args.builds.split(","):
        for d in dims:
            times = time_pairs(
                rms,
                ln,
                kind="norm_op",
                pairs=args.pairs,
                threads=args.threads,
                number=5,
                d=d,
                rows=rows_n,
                build=build,
            )
            rows.append(row(f"RMSNorm vs LayerNorm, {build}, d {d}", times))
            by_key[(build, d)] = rows[-1]
    return rows, by_key


def norm_effect(args: argparse.Namespace, by_key: dict) -> tuple[dict, list[dict]]:
    """The step claim itself (RMSNorm vs LayerNorm training steps, the model's modules) and, per
    build, the step saving the op's speedup buys: share x (1 - t_RMS / t_LN), share = the LayerNorm
    step's time in its norms (2 per layer + the final one, each costing the op alone at the step's
    rows and width)."""
    shape, batch, block = (TINY, 2, 16) if args.tiny else (SMALL, 16, 128)
    step = time_pairs(
        build_preset("llama", "tiny", **shape),
        build_preset("llama", "tiny", norm="layernorm", **shape),
        kind="train_step",
        pairs=args.pairs,
        threads=args.threads,
        batch=batch,
        block=block,
    )
    ln_step_ms = 1e3 * statistics.median(step.b)
    n_norms = 2 * shape["n_layers"] + 1
    effects = []
    for build in args.builds.split(","):
        r = by_key.get((build, shape["d_model"]))
        if r is not None:
            share = min(1.0, n_norms * r["b_ms"] / ln_step_ms)
            speedup = 1.0 / r["median_ratio"]  # t_LN / t_RMS of the op alone
            effects.append(
                {
                    "build": build,
                    "ln_step_ms": ln_step_ms,
                    "norm_share": share,
                    "op_speedup": speedup,
                    "step_effect": norm_step_effect(share, speedup),
                }
            )
    return row("RMSNorm vs LayerNorm (train step, the model's modules)", step), effects


def decode_rows(args: argparse.Namespace) -> list[dict]:
    shape, batch = (TINY, 2) if args.tiny else (DECODE, 8)
    lens = (16,) if args.tiny else tuple(int(x) for x in args.cache_lens.split(","))
    heads = shape["n_heads"]
    configs = {
        name: build_preset("llama", "tiny", n_kv_heads=k, **shape)
        for name, k in (("MHA", heads), ("GQA", max(1, heads // 4)), ("MQA", 1))
    }
    rows = []
    for cache_len in lens:
        for arm in ("GQA", "MQA"):
            times = time_pairs(
                configs[arm],
                configs["MHA"],
                kind="decode",
                pairs=args.pairs,
                threads=args.threads,
                number=5,
                cache_len=cache_len,
                batch=batch,
            )
            rows.append(row(f"{arm} vs MHA, cache {cache_len}, batch {batch} (decode step)", times))
    return rows


def load() -> float:
    return os.getloadavg()[0]


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.tiny:
        args.pairs, args.builds = min(args.pairs, 3), "composite,module"
    start, load_before = time.perf_counter(), load()
    result: dict = {
        "threads": args.threads,
        "pairs": args.pairs,
        "torch": torch.__version__,
        "tiny": args.tiny,
        "load_before": load_before,
    }
    result["block"] = block_rows(args)
    print_rows("BLOCK: training step, small lab shape", result["block"])
    result["norm"], by_key = norm_rows(args)
    print_rows("NORM: forward + backward of the op alone on (rows, d)", result["norm"])
    result["norm_step"], result["norm_step_effect"] = norm_effect(args, by_key)
    print_rows("NORM: the training step", [result["norm_step"]])
    print(
        "\n| build | LayerNorm step ms | norms' share of it | op speedup t_LN/t_RMS | step saving "
        "= share x (1 - t_RMS/t_LN) |\n|---|---|---|---|---|"
    )
    for e in result["norm_step_effect"]:
        print(
            f"| {e['build']} | {e['ln_step_ms']:.1f} | {e['norm_share']:.3f} | "
            f"{e['op_speedup']:.3f} | {e['step_effect']:+.4f} |"
        )
    result["decode"] = decode_rows(args)
    print_rows("HEADS: one-token decode step", result["decode"])
    result["load_after"], result["seconds"] = load(), time.perf_counter() - start
    print(
        f"\n{result['seconds']:.0f} s; load average {load_before:.2f} before, "
        f"{result['load_after']:.2f} after ({os.cpu_count()} CPUs, {args.threads} thread(s) used)"
    )
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=1))
    return result


if __name__ == "__main__":
    main()

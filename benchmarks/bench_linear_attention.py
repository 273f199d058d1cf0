"""Linear attention against softmax: training time and memory vs length, decode cost,
FAVOR+'s approximation error.

One attention layer's kernel, alone (q, k, v of B=1, H heads, head_dim 64, fp32, the
projections left out):
- softmax: F.scaled_dot_product_attention(is_causal=True), archlab's softmax path;
- favor: FAVOR+ (positive, orthogonal) with M = Dh = 64 and M = round(Dh ln Dh) =
  266 features (FEATURES);
- vq: Transformer-VQ (hard, STE) with C codes and blocks of L = 64 (VQ_SHAPES).
1. Forward + backward time per length (256 ... 16k), the kernels timed in interleaved
   rounds (A B C A B C ..., best of the rounds, since other load only adds time), and
   the memory autograd keeps for the backward (bytes of the tensors saved for backward,
   `torch.autograd.graph.saved_tensors_hooks`): the training-memory term that grows with length. The
   crossover is the first length at which a kernel's time is below softmax's.
2. One decode step against a context of S tokens: softmax reads a KV cache of S tokens, the
   linear kernels their fixed state; time per step and the bytes each holds (the formulas of
   archlab.costs, which tests/test_costs.py checks against `KVCache.nbytes()`), at 1k / 8k / 32k for
   a 12-layer d_model-768 model.
3. FAVOR+'s approximation error vs feature count m (d = 64, q and k with |x| ~ 1 after the d^-1/4
   scale): the relative RMS error of the kernel estimate phi(q).phi(k) against exp(q.k / sqrt(d))
   over all pairs and over the quarter of pairs with the smallest kernel values, for positive /
   hyperbolic / trigonometric features, iid and orthogonal; and the attention output's mean absolute
   error against softmax attention.
4. Orthogonal against iid features, controlled (`orthogonal_gain`): the paper's gain shrinks with
   d (about 2/(d+2) of the variance), so at d = 64 and a few dozen draws it hides in the noise of
   table 3. Here d = 16, eight fixed (q, k) pairs (|q|, |k| ~ 0.8 after the scale), thousands of
   independent draws per feature count, positive features: the relative MSE of the kernel estimate
   for iid and orthogonal projections, each with its standard error over draws, and the ratio with
   its z-score (independent draws: the SEs add in quadrature).

    # lengths to 16k, 3 rounds (~10 min on 2 cores)
    python benchmarks/bench_linear_attention.py
    # lengths to 4k, fewer draws (~3 min)
    python benchmarks/bench_linear_attention.py --quick
    # table 4 only (about a minute on a busy 2-core VM)
    python benchmarks/bench_linear_attention.py --orthogonal

Writes benchmarks/results/linear_attention.json and linear_attention.md. The machine may be shared:
quote the ratios, not the seconds.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from archlab import ModelConfig
from archlab.costs import kv_cache_bytes
from archlab.nn.attention.linear.codebook import hard_assign
from archlab.nn.attention.linear.favor import (
    FavorState,
    draw_projection,
    favor_attention,
    hyperbolic_features,
    positive_features,
    trigonometric_features,
)
from archlab.nn.attention.linear.vq import VQState, vq_attention

RESULTS = Path(__file__).resolve().parent / "results"
H, DH = 4, 64
FEATURES = (64, 266)  # favor: M = Dh, and the default round(Dh ln Dh)
VQ_SHAPES = ((64, 64), (512, 64))  # vq: (codes, block)
# a GPT-2-small-sized model
DECODE_MODEL = dict(d_model=768, n_layers=12, n_heads=12, vocab_size=32000)
GAIN_DRAWS = 4000  # projections per cell of the orthogonal-vs-iid table: SEs of a few % of the MSE


def kernels(
    t: int,
) -> dict[str, Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]]:
    """name -> f(q, k, v) -> o for the training comparison."""
    g = torch.Generator().manual_seed(0)
    runs: dict[str, Callable] = {
        "softmax": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)
    }
    for m in FEATURES:
        w = draw_projection(m, DH, True, g, torch.float32)
        runs[f"favor m={m}"] = lambda q, k, v, w=w: favor_attention(q, k, v, w, DH**-0.5)[0]
    for c, block in VQ_SHAPES:
        codebook = torch.randn(H, c, DH, generator=g)

        def vq(q, k, v, codebook=codebook, block=block):
            assign, k_hat, _ = hard_assign(k, codebook)
            return vq_attention(q * DH**-0.5, v, assign, codebook, block, k_hat, with_state=False)[
                0
            ]

        runs[f"vq c={c} L={block}"] = vq
    return runs


def step(fn: Callable, t: int) -> tuple[float, int]:
    """One forward + backward at length t: (seconds, bytes saved for the backward)."""
    q, k, v = (torch.randn(1, H, t, DH, requires_grad=True) for _ in range(3))
    saved = [0]

    def pack(x: torch.Tensor) -> torch.Tensor:
        saved[0] += x.numel() * x.element_size()
        return x

    start = time.perf_counter()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
        o = fn(q, k, v)
    o.square().mean().backward()
    return time.perf_counter() - start, saved[0]


def training_table(lengths: list[int], rounds: int) -> list[dict]:
    rows = []
    for t in lengths:
        runs = kernels(t)
        best: dict[str, float] = {}
        memory: dict[str, int] = {}
        for name, fn in runs.items():
            step(fn, min(t, 256))  # warm-up
        for _ in range(rounds):
            for name, fn in runs.items():
                seconds, saved = step(fn, t)
                best[name] = min(best.get(name, math.inf), seconds)
                memory[name] = saved
        for name in runs:
            rows.append(
                dict(
                    length=t,
                    kernel=name,
                    seconds=best[name],
                    saved_mib=memory[name] / 2**20,
                    vs_softmax=best[name] / best["softmax"],
                )
            )
        print(f"  T={t}: " + ", ".join(f"{n} {best[n] * 1e3:.0f} ms" for n in runs), flush=True)
    return rows


def crossover(rows: list[dict]) -> dict[str, int | None]:
    """The first length from which on a kernel stays faster than softmax (None: never
    within the lengths)."""
    out = {}
    for name in dict.fromkeys(r["kernel"] for r in rows if r["kernel"] != "softmax"):
        ratios = [(r["length"], r["vs_softmax"]) for r in rows if r["kernel"] == name]
        out[name] = next(
            (t for i, (t, _) in enumerate(ratios) if all(x < 1 for _, x in ratios[i:])), None
        )
    return out


def decode_table(contexts: list[int], rounds: int) -> list[dict]:
    """One decode step per kernel against a context of S tokens (one layer, B=1), and the
    whole model's cache."""
    g = torch.Generator().manual_seed(1)
    rows = []
    for s in contexts:
        q = torch.randn(1, H, 1, DH)
        kv = (torch.randn(1, H, s, DH), torch.randn(1, H, s, DH))
        w = draw_projection(FEATURES[-1], DH, True, g, torch.float32)
        fstate = FavorState(torch.rand(1, H, FEATURES[-1], DH + 1))
        c, block = VQ_SHAPES[-1]
        codebook = torch.randn(H, c, DH, generator=g)
        tail = torch.nn.functional.one_hot(
            torch.randint(c, (1, H, block + 7), generator=g), c
        ).float()
        vstate = VQState(tail, torch.randn(1, H, block + 7, DH), torch.rand(1, H, c, DH + 1))
        one_hot, k_hat, _ = hard_assign(q, codebook)
        runs = {
            "softmax": lambda: F.scaled_dot_product_attention(q, *kv),
            f"favor m={FEATURES[-1]}": lambda: favor_attention(
                q, q, q, w, DH**-0.5, state=fstate.kv
            ),
            f"vq c={c} L={block}": lambda: vq_attention(
                q, q, one_hot, codebook, block, k_hat, vstate
            ),
        }
        best = {name: math.inf for name in runs}
        with torch.inference_mode():
            for _ in range(rounds * 20):
                for name, run in runs.items():
                    start = time.perf_counter()
                    run()
                    best[name] = min(best[name], time.perf_counter() - start)
        for name in runs:
            rows.append(dict(context=s, kernel=name, step_us=best[name] * 1e6))
    return rows


def cache_bytes(contexts: list[int]) -> list[dict]:
    """Decode memory of a whole model per context: the KV cache in bf16, the linear kernels' states
    in float32 (they run in float32 whatever the weights' dtype)."""
    configs = {
        "softmax": ModelConfig(**DECODE_MODEL),
        "favor m=266": ModelConfig(**DECODE_MODEL, attn_kernel="favor"),
        "vq c=512 L=64": ModelConfig(**DECODE_MODEL, attn_kernel="vq"),
    }
    return [
        dict(context=s, kernel=name, mib=kv_cache_bytes(cfg, s, "bf16")["context"] / 2**20)
        for s in contexts
        for name, cfg in configs.items()
    ]


def favor_error(ms: list[int], draws: int) -> list[dict]:
    """Kernel-estimate and output errors of FAVOR-style features against exact softmax (float64)."""
    g = torch.Generator().manual_seed(2)
    d, t = DH, 128
    # |x| ~ 1.5 after the d^-1/4 scale
    q = torch.randn(t, d, generator=g, dtype=torch.float64) * d**-0.5 * 1.5
    k = torch.randn(t, d, generator=g, dtype=torch.float64) * d**-0.5 * 1.5
    v = torch.randn(1, 1, t, d, generator=g, dtype=torch.float64)
    exact = torch.exp(q @ k.T)  # the scale is already in q and k
    small = exact <= exact.flatten().quantile(0.25)
    mask = torch.ones(t, t, dtype=torch.bool).tril()
    reference = torch.softmax((q @ k.T).masked_fill(~mask, float("-inf")), -1) @ v[0, 0]
    maps = {
        "positive": lambda x, w: positive_features(x, w, False),
        "hyperbolic": lambda x, w: hyperbolic_features(x, w, False),
        "trigonometric": trigonometric_features,
    }
    rows = []
    for m in ms:
        for kind, phi in maps.items():
            rows_per = m if kind == "positive" else m // 2
            for orthogonal in (False, True):
                sq, sq_small, out_err = 0.0, 0.0, 0.0
                for _ in range(draws):
                    w = draw_projection(rows_per, d, orthogonal, g)
                    est = phi(q, w) @ phi(k, w).T
                    rel = ((est - exact) / exact).square()
                    sq += rel.mean().item()
                    sq_small += rel[small].mean().item()
                    if kind != "trigonometric":  # negative estimates: no valid normaliser
                        o = favor_attention(
                            q[None, None] * d**0.25, k[None, None] * d**0.25, v, w, d**-0.5, kind
                        )[0]
                        out_err += (o[0, 0] - reference).abs().mean().item()
                rows.append(
                    dict(
                        m=m,
                        feature=kind,
                        orthogonal=orthogonal,
                        rel_rmse=math.sqrt(sq / draws),
                        rel_rmse_small=math.sqrt(sq_small / draws),
                        output_mae=None if kind == "trigonometric" else out_err / draws,
                    )
                )
    return rows


def orthogonal_gain(ms: list[int], draws: int, d: int = 16, pairs: int = 8) -> list[dict]:
    """Relative MSE of the positive-feature estimate of exp(q.k) over `draws` independent
    projections, iid and orthogonal, per feature count m, each with its standard error (float64)."""
    g = torch.Generator().manual_seed(3)
    q = torch.randn(pairs, d, generator=g, dtype=torch.float64) * 0.2  # |q| ~ 0.8
    k = torch.randn(pairs, d, generator=g, dtype=torch.float64) * 0.2
    exact = torch.exp((q * k).sum(-1))  # (pairs,)
    rows = []
    for m in ms:
        stats = {}
        for orthogonal in (False, True):
            w = draw_projection(m, d, orthogonal, g, draws=draws)  # (draws, m, d)
            # (draws, pairs)
            est = (positive_features(q, w, False) * positive_features(k, w, False)).sum(-1)
            # (draws,): the pairs' mean squared rel. error
            per_draw = ((est - exact) / exact).square().mean(-1)
            stats[orthogonal] = (per_draw.mean().item(), per_draw.std().item() / math.sqrt(draws))
        (iid, se_iid), (orth, se_orth) = stats[False], stats[True]
        rows.append(
            dict(
                m=m,
                d=d,
                draws=draws,
                iid_mse=iid,
                iid_se=se_iid,
                orth_mse=orth,
                orth_se=se_orth,
                ratio=orth / iid,
                z=(iid - orth) / math.sqrt(se_iid**2 + se_orth**2),
            )
        )
    return rows


def gain_markdown(rows: list[dict]) -> list[str]:
    lines = [
        "",
        f"## Orthogonal vs iid features (positive, d={rows[0]['d']}, {rows[0]['draws']} draws "
        "per cell, float64)",
        "",
        "| m | rel. MSE iid | rel. MSE orthogonal | orthogonal / iid | z (iid - orth.) |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['m']} | {r['iid_mse']:.4g} ± {r['iid_se']:.2g} | {r['orth_mse']:.4g} ± "
        f"{r['orth_se']:.2g} | {r['ratio']:.3f} | {r['z']:.1f} |"
        for r in rows
    ]
    return lines


def markdown(res: dict) -> str:
    lines = [
        f"# Linear attention vs softmax ({res['machine']})",
        "",
        f"`{res['command']}`",
        "",
        "## Forward + backward of one attention layer (B=1, H=4, Dh=64, fp32; best of the rounds)",
        "",
        "| T | kernel | ms | x softmax | saved for backward (MiB) |",
        "|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['length']} | {r['kernel']} | {r['seconds'] * 1e3:.1f} | {r['vs_softmax']:.2f} "
        f"| {r['saved_mib']:.1f} |"
        for r in res["training"]
    ]
    lines += [
        "",
        "Crossover (first length from which on the kernel is faster than softmax): "
        + ", ".join(
            f"{k}: {v if v is not None else 'none up to ' + str(res['lengths'][-1])}"
            for k, v in res["crossover"].items()
        ),
        "",
        "## One decode step against a context of S tokens (one layer, B=1)",
        "",
        "| S | kernel | us per step |",
        "|---|---|---|",
    ]
    lines += [f"| {r['context']} | {r['kernel']} | {r['step_us']:.0f} |" for r in res["decode"]]
    lines += [
        "",
        "## Decode memory of a 12-layer, d_model-768 model (B=1; KV cache in bf16, the linear "
        "kernels' states fp32)",
        "",
        "| context | kernel | MiB |",
        "|---|---|---|",
    ]
    lines += [f"| {r['context']} | {r['kernel']} | {r['mib']:.2f} |" for r in res["memory"]]
    lines += [
        "",
        f"## FAVOR approximation error (d=64, T=128, {res['draws']} draws per row, float64)",
        "",
        "| m | feature | orthogonal | rel. RMSE of exp(q.k) | same, smallest 25% | output MAE "
        "vs softmax |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['m']} | {r['feature']} | {r['orthogonal']} | "
        f"{r['rel_rmse']:.3g} | {r['rel_rmse_small']:.3g} "
        f"| {'-' if r['output_mae'] is None else format(r['output_mae'], '.3g')} |"
        for r in res["favor_error"]
    ]
    if res.get("orthogonal_gain"):
        lines += gain_markdown(res["orthogonal_gain"])
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--quick", action="store_true", help="lengths to 4k, 16 error draws")
    p.add_argument(
        "--lengths",
        help="comma-separated lengths: only the training table, to linear_attention_at.md",
    )
    p.add_argument(
        "--orthogonal",
        action="store_true",
        help="only the orthogonal-vs-iid table (4), to linear_attention_orthogonal.md",
    )
    args = p.parse_args()
    if args.orthogonal:
        rows = orthogonal_gain([16, 64, 256], GAIN_DRAWS)
        text = (
            "\n".join(
                [
                    f"# FAVOR+: orthogonal vs iid features (torch {torch.__version__})",
                    "",
                    "`python benchmarks/bench_linear_attention.py --orthogonal`",
                    *gain_markdown(rows),
                ]
            )
            + "\n"
        )
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "linear_attention_orthogonal.json").write_text(json.dumps(rows, indent=2))
        (RESULTS / "linear_attention_orthogonal.md").write_text(text)
        print(text)
        return
    if args.lengths:
        training = training_table([int(t) for t in args.lengths.split(",")], 2)
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "linear_attention_at.json").write_text(json.dumps(training, indent=2))
        return
    torch.manual_seed(0)
    lengths = (
        [256, 512, 1024, 2048, 4096] if args.quick else [256, 512, 1024, 2048, 4096, 8192, 16384]
    )
    rounds, draws = (3, 16) if args.quick else (3, 32)
    print("training step per length:", flush=True)
    training = training_table(lengths, rounds)
    res = dict(
        machine=f"{torch.get_num_threads()} threads, torch {torch.__version__}",
        command="python benchmarks/bench_linear_attention.py" + (" --quick" if args.quick else ""),
        lengths=lengths,
        training=training,
        crossover=crossover(training),
        decode=decode_table([1024, 8192] if args.quick else [1024, 8192, 32768], rounds),
        memory=cache_bytes([1024, 8192, 32768]),
        draws=draws,
        favor_error=favor_error([16, 64, 256, 1024], draws),
        orthogonal_gain=orthogonal_gain([16, 64, 256], GAIN_DRAWS),
    )
    RESULTS.mkdir(exist_ok=True)
    name = "linear_attention_quick" if args.quick else "linear_attention"
    (RESULTS / f"{name}.json").write_text(json.dumps(res, indent=2))
    (RESULTS / f"{name}.md").write_text(markdown(res))
    print(markdown(res))


if __name__ == "__main__":
    main()

"""A/B micro-benchmarks of the training fast paths, in one process: A and B alternate (A B, then
B A) so that drift and other load hit both; each side takes its best of `--reps` calls, and
the speed-up A/B of every alternation is summarised as min / median / max (> 1: B is faster).
docs/performance.md quotes these.

    # attention projection: split + apply_rope vs rope_qkv
    python benchmarks/bench_fast_paths.py rope_qkv
    # the whole Llama-shape forward + backward, plain vs fast
    python benchmarks/bench_fast_paths.py step --batch 2
    # logits + cross entropy vs the chunked fused head
    python benchmarks/bench_fast_paths.py head_loss --batch 8
    # the model eager vs torch.compile, forward + backward
    python benchmarks/bench_fast_paths.py compile
    # bf16 step: flash backward vs causal_attention
    python benchmarks/bench_fast_paths.py bf16_attention --threads 2
    # fp32 vs bf16 autocast by model size
    python benchmarks/bench_fast_paths.py precision --threads 2

Shapes are the Llama shape of bench_step.py (vocab 8192, d_model 512, 8 layers, 8 heads, d_ff
1408, T 256).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from archlab import TransformerLM, build_preset
from archlab.nn.fast import attention as fused_attention
from archlab.nn.fast import install as fused
from archlab.nn.functional import cross_entropy

LLAMA = dict(vocab_size=8192, d_model=512, n_layers=8, n_heads=8, d_ff=1408)
# the lab's small-budget size
SMALL = dict(vocab_size=512, d_model=128, n_layers=4, n_heads=4, d_ff=352)
BLOCK = 256


def best_of(fn: Callable[[], object], reps: int, clock: Callable[[], float]) -> float:
    times = []
    for _ in range(reps):
        start = clock()
        fn()
        times.append(clock() - start)
    return min(times)


def alternate(
    a: Callable[[], object], b: Callable[[], object], alternations: int, reps: int
) -> dict:
    """Best times of a and b per alternation (order flipped every other one) and the A/B ratios.
    With one thread the clock is this thread's CPU time: time spent descheduled while other
    processes hold the core does not count, which on a loaded machine is most of the noise
    of wall time."""
    clock = time.thread_time if torch.get_num_threads() == 1 else time.perf_counter
    for fn in (a, b, a, b):  # warm-up: allocator, compile, caches
        fn()
    ta, tb = [], []
    for i in range(alternations):
        first, second = (a, b) if i % 2 == 0 else (b, a)
        t1, t2 = best_of(first, reps, clock), best_of(second, reps, clock)
        ta.append(t1 if i % 2 == 0 else t2)
        tb.append(t2 if i % 2 == 0 else t1)
    ratios = sorted(x / y for x, y in zip(ta, tb))
    return {
        "a_ms": 1e3 * min(ta),
        "b_ms": 1e3 * min(tb),
        "ratio": (ratios[0], statistics.median(ratios), ratios[-1]),
    }


def model_step(
    model: TransformerLM, x: torch.Tensor, y: torch.Tensor, logits: bool = False
) -> Callable[[], None]:
    """Forward + backward as the trainer runs it (the model computes its loss), or through
    the full logits."""

    def step() -> None:
        loss = cross_entropy(model(x), y) if logits else model(x, targets=y).loss
        loss.backward()
        for p in model.parameters():
            p.grad = None

    return step


def pair(
    batch: int, **fields: object
) -> tuple[TransformerLM, TransformerLM, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    config = build_preset("llama", "tiny", **{**LLAMA, **fields})
    a, b = TransformerLM(config), TransformerLM(config)
    b.load_state_dict(a.state_dict())
    fused.install(b)  # a: the plain formulas, b: as the trainer runs it
    x, y = (torch.randint(0, config.vocab_size, (batch, BLOCK)) for _ in range(2))
    return a, b, x, y


def case_rope_qkv(args: argparse.Namespace) -> dict:
    """One attention layer forward + backward: A = split, slice and apply_rope;
    B = fused.rope_qkv."""
    plain, fast, _, _ = pair(args.batch, n_layers=1)
    x = torch.randn(args.batch, BLOCK, LLAMA["d_model"], requires_grad=True)
    inputs = fast.attention_inputs(torch.arange(BLOCK).expand(args.batch, BLOCK), None, BLOCK - 1)[
        0
    ]

    def run(attn: torch.nn.Module) -> Callable[[], None]:
        return lambda: attn(x, inputs).sum().backward()

    return alternate(
        run(plain.layers[0].attn), run(fast.layers[0].attn), args.alternations, args.reps
    )


def case_step(args: argparse.Namespace) -> dict:
    """The whole model's forward + backward: A = the plain formulas, B = as the trainer
    runs it (fused.install)."""
    plain, fast, x, y = pair(args.batch)
    return alternate(model_step(plain, x, y), model_step(fast, x, y), args.alternations, args.reps)


def case_head_loss(args: argparse.Namespace) -> dict:
    """The whole model's forward + backward: A = (B, T, V) logits + fused cross entropy, B = the
    chunked head and loss of `TransformerLM.forward(targets=...)`; plus each one's peak memory, in a
    fresh process each."""
    _, b, x, y = pair(args.batch)
    result = alternate(
        model_step(b, x, y, logits=True), model_step(b, x, y), args.alternations, args.reps
    )
    for side in ("logits", "chunked"):
        # every block over 128 KB mapped and unmapped at once, so the peak RSS is the peak of live
        # tensors rather than of what glibc keeps cached (its default threshold adapts, up to 32 MB)
        env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072"}
        out = subprocess.run(
            [sys.executable, __file__, "_peak", side, "--batch", str(args.batch)],
            capture_output=True,
            text=True,
            check=True,
            env=env,
        )
        result[f"{side}_peak_mb"] = float(out.stdout)
    return result


def peak_step_mb(side: str, batch: int) -> float:
    """Peak RSS growth (MB) over two forward + backward steps, after the model and batch exist."""
    _, model, x, y = pair(batch)
    before = _status_mb("VmRSS")
    for _ in range(2):
        model_step(model, x, y, logits=side == "logits")()
    return _status_mb("VmHWM") - before


def _status_mb(field: str) -> float:
    """A memory line of /proc/self/status in MB. VmHWM, unlike ru_maxrss, starts afresh at exec:
    ru_maxrss would still hold the peak of the process that spawned this one."""
    line = next(
        l for l in Path("/proc/self/status").read_text().splitlines() if l.startswith(field + ":")
    )
    return int(line.split()[1]) / 1024


def case_compile(args: argparse.Namespace) -> dict:
    """A = eager, B = the model compiled in place (as --precision.compile true)."""
    _, eager, x, y = pair(args.batch)
    _, compiled, _, _ = pair(args.batch)
    compiled.compile()
    return alternate(
        model_step(eager, x, y), model_step(compiled, x, y), args.alternations, args.reps
    )


def case_bf16_attention(args: argparse.Namespace) -> dict:
    """The whole model's forward + backward under bf16 autocast: A = SDPA's flash backward, B =
    as shipped (`fused.causal_attention`'s GEMM backward). `--small`: the lab's d_model 128 model
    at T 128."""
    torch.manual_seed(0)
    fields, block = (SMALL, 128) if args.small else (LLAMA, BLOCK)
    model = TransformerLM(build_preset("llama", "tiny", max_seq_len=block, **fields))
    fused.install(model)
    x, y = (torch.randint(0, fields["vocab_size"], (args.batch, block)) for _ in range(2))
    shipped = fused_attention.CAUSAL_ATTENTION_MAX_LEN

    def run(max_len: int) -> Callable[[], None]:
        def step() -> None:
            fused_attention.CAUSAL_ATTENTION_MAX_LEN = max_len
            with torch.autocast("cpu", dtype=torch.bfloat16):
                model_step(model, x, y)()

        return step

    result = alternate(run(0), run(shipped), args.alternations, args.reps)
    fused_attention.CAUSAL_ATTENTION_MAX_LEN = shipped
    return result


PRECISION_SIZES = [
    (64, 2, 4, 64),
    (64, 2, 16, 128),
    (96, 3, 16, 128),
    (128, 4, 16, 128),
    (256, 4, 8, 256),
    (384, 6, 8, 256),
]  # (d_model, n_layers, batch, tokens)


def case_precision(args: argparse.Namespace) -> dict:
    """bf16 autocast against fp32 by model size (llama preset `tiny` with d_model, n_layers; batch
    x T), forward
    + backward: A = fp32, B = bf16. Decides `hardware.BF16_STEP_FLOPS`, from which
      `archlab train` recommends
    bf16. Prints a markdown row per size (GFLOP, fp32 ms, bf16 ms, bf16 speed-up min /
    median / max)."""
    from archlab.costs import flops_per_token

    print(
        "| model (d_model, layers, batch x tokens) | step GFLOP | fp32 (ms) | bf16 (ms) | "
        "bf16 speed-up |"
    )
    print("|---|---|---|---|---|")
    for d_model, n_layers, batch, block in PRECISION_SIZES:
        torch.manual_seed(0)
        config = build_preset(
            "llama", "tiny", d_model=d_model, n_layers=n_layers, max_seq_len=block
        )
        model = TransformerLM(config)
        x, y = (torch.randint(0, config.vocab_size, (batch, block)) for _ in range(2))
        fp32 = model_step(model, x, y)

        def bf16(fp32: Callable[[], None] = fp32) -> None:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                fp32()

        result = alternate(fp32, bf16, args.alternations, args.reps)
        gflop = flops_per_token(config, block)["training"] * batch * block / 1e9
        gflop_text = f"{gflop:.2g}" if gflop < 100 else f"{gflop:.0f}"
        lo, mid, hi = result["ratio"]
        print(
            f"| d {d_model}, {n_layers} layers, {batch} x {block} | {gflop_text} | "
            f"{result['a_ms']:.1f} | {result['b_ms']:.1f} | {lo:.2f} / {mid:.2f} / {hi:.2f} |",
            flush=True,
        )
    return {}


CASES = {
    "rope_qkv": case_rope_qkv,
    "step": case_step,
    "head_loss": case_head_loss,
    "compile": case_compile,
    "bf16_attention": case_bf16_attention,
    "precision": case_precision,
}


def main() -> None:
    if sys.argv[1:2] == ["_peak"]:  # the child process of case_head_loss
        print(peak_step_mb(sys.argv[2], int(sys.argv[4])))
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("case", choices=sorted(CASES))
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--alternations", type=int, default=7)
    p.add_argument(
        "--reps", type=int, default=3, help="calls per side per alternation; the best counts"
    )
    p.add_argument("--threads", type=int, default=1)
    p.add_argument(
        "--small", action="store_true", help="bf16_attention: the d_model 128 model at T 128"
    )
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    r = CASES[args.case](args)
    if not r:  # the case printed its own table
        return
    lo, mid, hi = r["ratio"]
    block = 128 if args.small else BLOCK
    print(
        f"{args.case} (batch {args.batch} x {block}, {args.threads} thread(s), {args.alternations} "
        f"alternations): A {r['a_ms']:.1f} ms, B {r['b_ms']:.1f} ms best; speed-up A/B min / "
        f"median / max {lo:.2f} / {mid:.2f} / {hi:.2f}"
    )
    if "logits_peak_mb" in r:
        print(
            f"peak step memory: logits {r['logits_peak_mb']:.0f} MB, "
            f"chunked {r['chunked_peak_mb']:.0f} MB"
        )


if __name__ == "__main__":
    main()

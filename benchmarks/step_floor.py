"""How close a lab run's training step is to what its own kernels allow, and what the
candidate levers buy.

For one arm of a suite at a budget (default: norm-type's rmsnorm at `small`, the run
profile_lab_run.py profiles), on one thread as under `--jobs 2`:
- the eager step (forward, backward, clipping, AdamW), its median over interleaved rounds;
- the floor of its kernels: every matrix product the step runs (recorded with their
  shapes and strides in one forward + backward) timed alone, and every attention call
  (`F.scaled_dot_product_attention`, same shapes) timed alone forward + backward, with CPU flash
  attention and with the math backend;
- the fp32 GEMM ceiling of one thread at the FFN's projection shape (the figure the
  lab-engine issue states);
- `torch.compile` of the model: its compile seconds and its step, interleaved with the eager step;
- stacking seeds (one batched product over 2 seeds' weights, what `vmap` over stacked modules would
  run) against the same products run one seed at a time.

    python benchmarks/step_floor.py [--suite norm-type] [--budget small] [--arm rmsnorm] \\
        [--rounds 6]

Writes benchmarks/results/step_floor.md and .json. Run it alone on the machine; compare ratios
within one run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections import Counter
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils._python_dispatch import TorchDispatchMode

REPO = Path(__file__).resolve().parents[1]
GEMMS = (torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default)
ATTENTION = (torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,)


class Recorder(TorchDispatchMode):
    """Records the shape and strides of every matrix product and attention call a forward
    + backward runs."""

    def __init__(self) -> None:
        super().__init__()
        self.gemms: Counter = Counter()
        self.attention: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in GEMMS:
            a, b = args[-2], args[-1]
            self.gemms[(tuple(a.shape), a.stride(), tuple(b.shape), b.stride())] += 1
        elif func in ATTENTION:
            q, k = args[0], args[1]
            self.attention[(tuple(q.shape), tuple(k.shape))] += 1
        return func(*args, **(kwargs or {}))


def seconds(fn, repeats: int = 20) -> float:
    """Best of 5 means over `repeats` calls (after 3 warm-up calls): a kernel's time alone."""
    for _ in range(3):
        fn()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(repeats):
            fn()
        best = min(best, (time.perf_counter() - start) / repeats)
    return best


def strided(shape: tuple, stride: tuple) -> torch.Tensor:
    return torch.empty_strided(shape, stride).normal_()


def gemm_floor(gemms: Counter) -> dict:
    """Each recorded product alone (batched ones as torch.bmm), and the same products stacked
    over 2 seeds."""
    alone = stacked = one_by_one = flops = 0.0
    rows = []
    for (sa, ta, sb, tb), n in gemms.items():
        a, b = strided(sa, ta), strided(sb, tb)
        op = torch.bmm if len(sa) == 3 else torch.mm
        t = seconds(lambda: op(a, b))
        f = 2 * sa[-2] * sa[-1] * sb[-1] * (sa[0] if len(sa) == 3 else 1)
        alone, flops = alone + n * t, flops + n * f
        rows.append(
            {
                "a": sa,
                "b": sb,
                "b_transposed": tb[-2] == 1 and tb[-1] != 1,
                "calls": n,
                "ms": t * 1e3,
                "gflops": f / t / 1e9,
            }
        )
        if len(sa) == 2:  # two seeds' weights: one bmm of 2 against 2 mm
            a2, b2 = torch.stack([a, a]), torch.stack([b, b])
            stacked += n * seconds(lambda: torch.bmm(a2, b2))
            one_by_one += n * seconds(lambda: (torch.mm(a2[0], b2[0]), torch.mm(a2[1], b2[1])))
    return {
        "seconds": alone,
        "gflop": flops / 1e9,
        "rows": rows,
        "stacked_2_seeds_s": stacked,
        "two_seeds_in_turn_s": one_by_one,
    }


def attention_floor(attention: Counter) -> dict:
    """Each recorded causal attention call alone, forward + backward, per backend."""
    out = {}
    for backend in (SDPBackend.FLASH_ATTENTION, SDPBackend.MATH):
        total = 0.0
        for (sq, sk), n in attention.items():
            q = torch.randn(sq, requires_grad=True)
            k = torch.randn(sk, requires_grad=True)
            v = torch.randn(sk, requires_grad=True)
            g = torch.randn(sq)

            def call():
                with sdpa_kernel(backend):
                    F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(g)

            total += n * seconds(call, repeats=5)
        out[backend.name.lower()] = total
    return out


def gemm_ceiling(m: int, k: int, n: int) -> float:
    a, b = torch.randn(m, k), torch.randn(k, n)
    return 2 * m * k * n / seconds(lambda: a @ b, repeats=10) / 1e9


def make_step(model: torch.nn.Module, params: list, x: torch.Tensor, y: torch.Tensor):
    optimizer = torch.optim.AdamW(params, lr=1e-3, foreach=True)

    def step() -> None:
        model(x, targets=y).loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def measure(suite_name: str, budget_name: str, arm: str, rounds: int) -> dict:
    from archlab.costs import flops_per_token
    from archlab.lab.spec.arms import resolve_arm
    from archlab.lab.spec.budgets import BUDGETS
    from archlab.lab.spec.suite_file import load_suite
    from archlab.nn.model import TransformerLM
    from archlab.train.hardware import describe_machine

    torch.set_num_threads(1)
    suite = load_suite(suite_name)
    train, model_cfg = resolve_arm(suite, suite.arm(arm), BUDGETS[budget_name])
    batch, block = train.data.batch_size, train.data.block_size
    torch.manual_seed(0)
    eager = TransformerLM(model_cfg)
    x = torch.randint(0, model_cfg.vocab_size, (batch, block))
    y = torch.randint(0, model_cfg.vocab_size, (batch, block))
    recorder = Recorder()
    with recorder:
        eager(x, targets=y).loss.backward()
    eager.zero_grad(set_to_none=True)
    compiled_model = TransformerLM(model_cfg)
    compiled_model.load_state_dict(eager.state_dict())
    steps = {
        "eager": make_step(eager, list(eager.parameters()), x, y),
        "compiled": make_step(
            torch.compile(compiled_model), list(compiled_model.parameters()), x, y
        ),
    }
    start = time.perf_counter()
    steps["compiled"]()
    compile_s = time.perf_counter() - start
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(rounds):  # interleaved, so a change of the machine's load reaches both alike
        for name, step in steps.items():
            step()  # not timed: the first step after the other's
            for _ in range(4):
                start = time.perf_counter()
                step()
                times[name].append(time.perf_counter() - start)
    step_s = {name: statistics.median(ts) for name, ts in times.items()}
    tokens = batch * block
    step_gflop = flops_per_token(model_cfg, block)["training"] * tokens / 1e9
    gemm = gemm_floor(recorder.gemms)
    attn = attention_floor(recorder.attention)
    ceiling = gemm_ceiling(tokens, model_cfg.d_model, model_cfg.d_ff)
    return {
        "suite": suite_name,
        "budget": budget_name,
        "arm": arm,
        "machine": describe_machine(),
        "torch": torch.__version__,
        "tokens_per_step": tokens,
        "step_gflop": step_gflop,
        "step_s": step_s,
        "compile_s": compile_s,
        "gemm": gemm,
        "attention_s": attn,
        "gemm_ceiling_gflops": ceiling,
    }


def table(r: dict) -> str:
    eager, gemm, attn = (
        r["step_s"]["eager"],
        r["gemm"]["seconds"],
        r["attention_s"]["flash_attention"],
    )
    ms = lambda s: f"{s * 1e3:.1f}"  # noqa: E731
    ceiling_s = r["step_gflop"] / r["gemm_ceiling_gflops"]
    lines = [
        f"Suite {r['suite']}, budget {r['budget']}, arm {r['arm']}: one thread, "
        f"{r['tokens_per_step']} tokens per step, {r['step_gflop']:.2f} GFLOP "
        f"per step. {r['machine']}.",
        "",
        "| per training step | ms | share of the eager step |",
        "|---|---:|---:|",
        f"| the eager step (forward, backward, clipping, AdamW), median | {ms(eager)} | 100% |",
        f"| its matrix products alone ({r['gemm']['gflop']:.2f} GFLOP, "
        f"{r['gemm']['gflop'] / gemm:.1f} GFLOP/s) | {ms(gemm)} | {gemm / eager:.0%} |",
        f"| its attention calls alone, CPU flash (math backend: {ms(r['attention_s']['math'])}) | "
        f"{ms(attn)} | {attn / eager:.0%} |",
        "| the rest: elementwise ops, norms, RoPE, loss, optimizer, dispatch | "
        f"{ms(eager - gemm - attn)} | {(eager - gemm - attn) / eager:.0%} |",
        f"| the step's FLOPs at the FFN-shape GEMM ceiling ({r['gemm_ceiling_gflops']:.1f} "
        f"GFLOP/s) | {ms(ceiling_s)} | {ceiling_s / eager:.0%} |",
        f"| `torch.compile(model)`, median (compiling took {r['compile_s']:.1f} s) | "
        f"{ms(r['step_s']['compiled'])} | {r['step_s']['compiled'] / eager:.0%} |",
        "| the 1-D products of 2 seeds stacked (one bmm each) vs in turn | "
        f"{ms(r['gemm']['stacked_2_seeds_s'])} vs {ms(r['gemm']['two_seeds_in_turn_s'])} "
        f"| {r['gemm']['stacked_2_seeds_s'] / r['gemm']['two_seeds_in_turn_s']:.2f}x |",
        "",
        f"The step runs at {ceiling_s / eager:.0%} of the FFN-shape ceiling and at "
        f"{(gemm + attn) / eager:.0%} of its own kernels' floor (products + attention alone).",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", default="norm-type")
    parser.add_argument("--budget", default="small")
    parser.add_argument("--arm", default="rmsnorm")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = parser.parse_args()
    result = measure(args.suite, args.budget, args.arm, args.rounds)
    text = table(result)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "step_floor.md").write_text(text, encoding="utf-8")
    (args.out / "step_floor.json").write_text(
        json.dumps(result, indent=1, default=str) + "\n", encoding="utf-8"
    )


if __name__ == "__main__":
    main()

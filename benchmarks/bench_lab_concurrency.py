"""How the lab should use a machine's cores at a budget's shape: one run at a time on 1 or N
threads, or N runs at once on one thread each (what `archlab ablate --jobs N` does), measured
as training steps per second of the machine, plus the fp32 GEMM ceiling at the step's FFN shape
for one thread.

Each configuration trains the budget's model (the suite's first arm) on random tokens for
`--steps` timed steps after 3 warm-up steps, in fresh processes started together, alternating the
configurations `--repeats` times so a slow spell of the machine hits each alike; the best repeat of
each is kept.

    python benchmarks/bench_lab_concurrency.py [--suite norm-type] [--budget small] [--steps 30] \\
        [--repeats 2]

Writes benchmarks/results/lab_concurrency.md and .json. Run it alone on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def child(
    suite_name: str, budget_name: str, steps: int, threads: int, compiled: bool = False
) -> None:
    """Train `steps` timed steps of the budget's model on `threads` threads (`compiled`: the lab's
    `--mode compiled`, torch.compile of the model, compiled in the untimed warm-up); print the
    seconds per step."""
    import torch

    from archlab.lab.spec.arms import resolve_arm
    from archlab.lab.spec.budgets import BUDGETS
    from archlab.lab.spec.suite_file import load_suite
    from archlab.nn.fast import install as fast_paths
    from archlab.nn.model import TransformerLM
    from archlab.train.optim import build_optimizer, clip_gradients
    from archlab.train.sections import OptimizerConfig

    torch.set_num_threads(threads)
    suite = load_suite(suite_name)
    train, model_cfg = resolve_arm(suite, suite.arms[0], BUDGETS[budget_name])
    torch.manual_seed(0)
    model = TransformerLM(model_cfg)
    fast_paths.install(model)
    optimizer = build_optimizer(model, OptimizerConfig(lr=1e-3))
    if compiled:
        model.compile()  # in place, as train/distributed.py parallelize does for precision.compile
    gen = torch.Generator().manual_seed(0)
    shape = (train.data.batch_size, train.data.block_size)
    x, y = (torch.randint(0, model_cfg.vocab_size, shape, generator=gen) for _ in range(2))
    times = []
    for i in range(3 + steps):
        start = time.perf_counter()
        model(x, targets=y).loss.backward()
        clip_gradients(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if i >= 3:
            times.append(time.perf_counter() - start)
    print(json.dumps({"step_s": sum(times) / len(times)}))


def ceiling(suite_name: str, budget_name: str) -> dict:
    import torch

    from archlab.costs import flops_per_token
    from archlab.lab.spec.arms import resolve_arm
    from archlab.lab.spec.budgets import BUDGETS
    from archlab.lab.spec.suite_file import load_suite

    torch.set_num_threads(1)
    suite = load_suite(suite_name)
    train, model = resolve_arm(suite, suite.arms[0], BUDGETS[budget_name])
    tokens = train.data.batch_size * train.data.block_size
    a, b = torch.randn(tokens, model.d_model), torch.randn(model.d_model, model.d_ff)
    a @ b
    best = float("inf")
    for _ in range(9):
        start = time.perf_counter()
        for _ in range(10):
            a @ b
        best = min(best, (time.perf_counter() - start) / 10)
    return {
        "gemm_gflops_1_thread": 2 * tokens * model.d_model * model.d_ff / best / 1e9,
        "step_gflop": flops_per_token(model, train.data.block_size)["training"] * tokens / 1e9,
    }


def together(
    args: argparse.Namespace, processes: int, threads: int, compiled: bool = False
) -> list[float]:
    """Seconds per step of each of `processes` processes started together with
    `threads` threads each."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    cmd = [
        sys.executable,
        __file__,
        "--child",
        args.suite,
        args.budget,
        str(args.steps),
        str(threads),
        str(int(compiled)),
    ]
    procs = [
        subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True) for _ in range(processes)
    ]
    return [json.loads(p.communicate()[0].strip().splitlines()[-1])["step_s"] for p in procs]


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6] == "1")
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", default="norm-type")
    parser.add_argument("--budget", default="small")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--results", type=Path, default=REPO / "benchmarks" / "results")
    args = parser.parse_args()
    from archlab.train.hardware import describe_machine

    configs = {
        "1 run x 1 thread": (1, 1, False),
        f"1 run x {args.cores} threads": (1, args.cores, False),
        f"{args.cores} runs x 1 thread": (args.cores, 1, False),
        "1 run x 1 thread, --mode compiled": (1, 1, True),
        f"{args.cores} runs x 1 thread, --mode compiled": (args.cores, 1, True),
    }
    best: dict[str, list[float]] = {}
    for _ in range(args.repeats):
        for name, (processes, threads, compiled) in configs.items():
            times = together(args, processes, threads, compiled)
            if name not in best or max(times) < max(best[name]):
                best[name] = times
    limit = ceiling(args.suite, args.budget)
    rows = []
    for name, times in best.items():
        per_run = sum(times) / len(times)
        rows.append(
            {
                "config": name,
                "step_s": per_run,
                "machine_steps_per_s": sum(1 / t for t in times),
                "gflops_per_run": limit["step_gflop"] / per_run,
            }
        )
    lines = [
        f"{args.suite} at {args.budget}: {limit['step_gflop']:.2f} GFLOP per step; fp32 "
        f"GEMM ceiling at the FFN shape, 1 thread: {limit['gemm_gflops_1_thread']:.1f} "
        f"GFLOP/s. {describe_machine()}. Best of {args.repeats} alternating repeats, "
        f"{args.steps} steps each.",
        "",
        "| configuration | s per step (each run) | steps/s of the machine | GFLOP/s per run | of "
        "one thread's ceiling |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['config']} | {r['step_s']:.3f} | "
            f"{r['machine_steps_per_s']:.2f} | {r['gflops_per_run']:.1f} "
            f"| {100 * r['gflops_per_run'] / limit['gemm_gflops_1_thread']:.0f}% |"
        )
    text = "\n".join(lines) + "\n"
    print(text)
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "lab_concurrency.md").write_text(text, encoding="utf-8")
    (args.results / "lab_concurrency.json").write_text(
        json.dumps({"rows": rows, **limit}, indent=1), encoding="utf-8"
    )


if __name__ == "__main__":
    main()

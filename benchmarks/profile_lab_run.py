"""Where a lab run's wall time goes: one run of a suite at a budget, from process start
to its measures.

The run is trained as the lab trains it (`archlab train` in a process of its own, one thread as
under `--jobs 2`), inside a child that times, with wrappers around the library's own functions:
- process start and imports (the interpreter alone, then torch and archlab);
- data: opening the prepared folder, and drawing batches;
- the training step, split into forward, backward, the optimizer (clipping + step) and the rest
  of the step;
- evaluation during training, samples, checkpoint and metrics writing, setup (model, optimizer);
then, in this process, the lab's measures of the finished run (each on its own: loss windows,
4x-context windows, ...) and the suite's timing pairs (per suite, shown per run). Data preparation
is per suite and shown apart.

    python benchmarks/profile_lab_run.py [--suite norm-type] [--budget small] [--arm ARM] \\
        [--out DIR]

Writes benchmarks/results/lab_run_profile.md and .json (with the machine line). Run it alone
on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STARTED = time.time()  # the child's first line (after the interpreter started)


# ---------------------------------------------------------------------------------------- the child
def child(args: list[str], report: Path) -> None:
    """Train one run (`archlab train ARGS`) with timers around the library's functions; write
    them to `report`."""
    import torch
    from torch.optim.optimizer import (
        register_optimizer_step_post_hook,
        register_optimizer_step_pre_hook,
    )

    imported_torch = time.time()
    from archlab.cli import main
    from archlab.data.tokens import TokenData
    from archlab.nn.model import TransformerLM
    from archlab.train import preflight, state, trainer

    imported = time.time()
    spent: dict[str, float] = defaultdict(float)
    inside: list[str] = []  # the phase being timed (nested calls count to the outermost)

    def timed(owner: object, name: str, phase: str) -> None:
        inner = getattr(owner, name)

        def wrapper(*a, **k):
            if inside:
                return inner(*a, **k)
            inside.append(phase)
            start = time.perf_counter()
            try:
                return inner(*a, **k)
            finally:
                spent[phase] += time.perf_counter() - start
                inside.pop()

        setattr(owner, name, wrapper)

    timed(TokenData, "get_batch", "data: batches")
    timed(preflight, "check_run", "checks, opening the prepared data")
    timed(TransformerLM, "forward", "step: forward")
    timed(torch.Tensor, "backward", "step: backward")
    timed(trainer, "clip_gradients", "step: optimizer (clip + update)")
    timed(trainer.Trainer, "evaluate", "evaluation during training")
    timed(trainer.Trainer, "samples", "samples during training")
    timed(state.RunState, "save", "writing: checkpoints")
    timed(state.RunState, "__init__", "setup: model, optimizer, run folder")
    opt_start: list[float] = []

    def pre(optimizer, a, k):
        opt_start.append(time.perf_counter())

    def post(optimizer, a, k):
        spent["step: optimizer (clip + update)"] += time.perf_counter() - opt_start.pop()

    register_optimizer_step_pre_hook(pre)
    register_optimizer_step_post_hook(post)
    steps: list[float] = []
    inner_step = trainer.Trainer.train_step

    def train_step(self):
        start = time.perf_counter()
        try:
            return inner_step(self)
        finally:
            steps.append(time.perf_counter() - start)

    trainer.Trainer.train_step = train_step
    trained = time.time()
    code = main(["train", *args])
    ended = time.time()
    report.write_text(
        json.dumps(
            {
                "code": code,
                "started": STARTED,
                "imported_torch": imported_torch,
                "imported": imported,
                "trained": trained,
                "ended": ended,
                "spent": spent,
                "steps": steps,
                "threads": torch.get_num_threads(),
            }
        ),
        encoding="utf-8",
    )


# --------------------------------------------------------------------------------------- the parent
def matmul_ceiling(m: int, k: int, n: int, repeats: int = 9) -> float:
    """Best fp32 GFLOP/s of (m, k) @ (k, n) in this process: the step's FFN projection shape."""
    import torch

    a, b = torch.randn(m, k), torch.randn(k, n)
    a @ b
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(10):
            a @ b
        best = min(best, (time.perf_counter() - start) / 10)
    return 2 * m * k * n / best / 1e9


def best_of(cmd: list[str], n: int = 3) -> float:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        times.append(time.perf_counter() - start)
    return min(times)


def profile(suite_name: str, budget_name: str, arm: str | None, out: Path) -> dict:
    import torch

    from archlab.costs import flops_per_token
    from archlab.lab.measures.measure import MEASURES, measure_run
    from archlab.lab.runs.collect import measure_timings
    from archlab.lab.runs.plan import plan_suite, prepare
    from archlab.lab.spec.arms import resolve_arm
    from archlab.lab.spec.budgets import BUDGETS
    from archlab.lab.spec.suite_file import load_suite
    from archlab.train.hardware import describe_machine

    rows: dict[str, float] = {}
    rows["interpreter start (python -c pass)"] = best_of([sys.executable, "-c", "pass"])
    plan = plan_suite(
        load_suite(suite_name), BUDGETS[budget_name], out / "suite", seeds=2, store=out / "store"
    )
    start = time.perf_counter()
    prepare(plan)
    per_suite = {"data preparation (once per suite)": time.perf_counter() - start}
    run = next(r for r in plan.runs if arm is None or r.arm == arm)
    report = out / "child.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    launched = time.time()
    done = subprocess.run(
        [sys.executable, __file__, "--child", str(report), "--", *run.command()[2:]],
        env=env,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        sys.exit(f"the profiled run failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    exited = time.time()
    child_ = json.loads(report.read_text(encoding="utf-8"))
    spent = child_["spent"]
    steps = child_["steps"]
    rows["imports: torch"] = child_["imported_torch"] - child_["started"]
    rows["imports: archlab"] = child_["imported"] - child_["imported_torch"]
    rows["interpreter start (python -c pass)"] = min(
        rows["interpreter start (python -c pass)"], child_["started"] - launched
    )
    step_parts = (
        "step: forward",
        "step: backward",
        "step: optimizer (clip + update)",
        "data: batches",
    )
    rows.update({k: spent.get(k, 0.0) for k in step_parts})
    rows["step: the rest (lr, loss reduce, metrics rows)"] = sum(steps) - sum(
        spent.get(k, 0.0) for k in step_parts
    )
    for k in (
        "checks, opening the prepared data",
        "setup: model, optimizer, run folder",
        "evaluation during training",
        "samples during training",
        "writing: checkpoints",
    ):
        rows[k] = spent.get(k, 0.0)
    run_total = child_["ended"] - child_["trained"]
    accounted = sum(steps) + sum(
        spent.get(k, 0.0)
        for k in (
            "checks, opening the prepared data",
            "setup: model, optimizer, run folder",
            "evaluation during training",
            "samples during training",
            "writing: checkpoints",
        )
    )
    rows["train(): the rest (config, checks, logs, progress)"] = run_total - accounted
    rows["process exit"] = exited - child_["ended"]
    process_wall = exited - launched
    measures = {}
    for name in plan.suite.measures + [m for m in ("loss_at_4x",) if m not in plan.suite.measures]:
        start = time.perf_counter()
        measure_run(run.run_dir, [name], plan.budget.measure_windows)
        measures[f"measure: {name}" + (" (timed x3 rounds)" if MEASURES[name].timing else "")] = (
            time.perf_counter() - start
        ) * (3 if MEASURES[name].timing else 1)
    start = time.perf_counter()
    measure_timings(plan)
    pairs = time.perf_counter() - start
    train, model = resolve_arm(plan.suite, plan.suite.arm(run.arm), plan.budget)
    tokens = train.data.batch_size * train.data.block_size
    step_flops = flops_per_token(model, train.data.block_size)["training"] * tokens
    torch.set_num_threads(1)
    ceiling = {"fp32": matmul_ceiling(tokens, model.d_model, model.d_ff, repeats=9)}
    unique_runs = len({r.run_dir for r in plan.runs})
    per_suite["timing pairs (once per suite)"] = pairs
    return {
        "suite": suite_name,
        "budget": budget_name,
        "arm": run.arm,
        "machine": describe_machine(),
        "threads": child_["threads"],
        "steps": len(steps),
        "step_median_s": sorted(steps)[len(steps) // 2],
        "process_wall_s": process_wall,
        "rows": rows,
        "measures": measures,
        "per_suite": per_suite,
        "runs_in_suite_at_2_seeds": unique_runs,
        "tokens_per_step": tokens,
        "step_gflop": step_flops / 1e9,
        "gemm_ceiling_gflops_1_thread": ceiling,
        "step_gflops_median": step_flops / 1e9 / sorted(steps)[len(steps) // 2],
    }


def table(result: dict) -> str:
    total_run = result["process_wall_s"]
    measures = sum(result["measures"].values())
    suite_share = {
        k: v / result["runs_in_suite_at_2_seeds"] for k, v in result["per_suite"].items()
    }
    total = total_run + measures + sum(suite_share.values())
    ceiling = result["gemm_ceiling_gflops_1_thread"]["fp32"]
    lines = [
        f"Suite {result['suite']}, budget {result['budget']}, arm {result['arm']}: "
        f"{result['steps']} steps at {result['threads']} thread(s), median step "
        f"{result['step_median_s'] * 1e3:.0f} ms. {result['machine']}.",
        f"The step does {result['step_gflop']:.2f} GFLOP ({result['tokens_per_step']} "
        f"tokens): {result['step_gflops_median']:.1f} GFLOP/s at the median step, "
        f"{100 * result['step_gflops_median'] / ceiling:.0f}% of the fp32 GEMM ceiling at the "
        f"FFN shape on one thread ({ceiling:.1f} GFLOP/s).",
        "",
        "| where the time goes | seconds | share |",
        "|---|---:|---:|",
    ]
    for k, v in result["rows"].items():
        lines.append(f"| {k} | {v:.2f} | {100 * v / total:.1f}% |")
    lines.append(
        f"| **the run's process, start to exit** | **{total_run:.2f}** "
        f"| **{100 * total_run / total:.1f}%** |"
    )
    for k, v in result["measures"].items():
        lines.append(f"| {k} | {v:.2f} | {100 * v / total:.1f}% |")
    for k, v in suite_share.items():
        lines.append(
            f"| {k}, per run of {result['runs_in_suite_at_2_seeds']} | {v:.2f} "
            f"| {100 * v / total:.1f}% |"
        )
    lines.append(f"| **in all, per run** | **{total:.2f}** | 100% |")
    return "\n".join(lines) + "\n"


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        child(sys.argv[4:], Path(sys.argv[2]))
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--suite", default="norm-type")
    parser.add_argument("--budget", default="small")
    parser.add_argument(
        "--arm", default=None, help="the arm to profile (default: the suite's first)"
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="keep the runs here (default: a temp folder)"
    )
    parser.add_argument("--results", type=Path, default=REPO / "benchmarks" / "results")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp)
        result = profile(args.suite, args.budget, args.arm, out)
    text = table(result)
    print(text)
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "lab_run_profile.json").write_text(
        json.dumps(result, indent=1), encoding="utf-8"
    )
    (args.results / "lab_run_profile.md").write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()

"""What a run costs at each budget on this CPU, measured: `small`, `medium`, and `medium` trained
to ~20 tokens per parameter (Hoffmann et al. 2022, "Training Compute-Optimal Large Language
Models", arXiv 2203.15556).

In one process, the training step (forward, backward, clipping, AdamW) of each budget's base model
(the llama preset, as norm-type's base) is timed in interleaved rounds, on one thread and on two,
and so is one forward pass of an evaluation batch. A run's cost is then its steps x the step, plus
its evaluations during training (`eval_every`, `eval_batches`), plus the lab's fixed evaluation set
and 4x-context windows (`measure_windows`), each read once at the forward's speed. Small's figure
can be checked against a real run (profile_lab_run.py), so the medium figures are scaled from the
same measurement, not guessed from FLOPs.

    python benchmarks/budget_cost.py [--rounds 3]

Writes benchmarks/results/budget_cost.md and .json. Run it alone on the machine.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
EVAL_SET_TOKENS = 65_536  # lab/eval_set.py: the fixed evaluation set is at least 64k tokens
TOKENS_PER_PARAM = 20


def shapes() -> dict[str, tuple]:
    """Budget name -> (model config, batch, block, steps,
    eval_every, eval_batches, measure_windows)."""
    from archlab.lab.spec.arms import resolve_arm
    from archlab.lab.spec.budgets import BUDGETS
    from archlab.lab.spec.suite_file import load_suite

    suite = load_suite("norm-type")
    out = {}
    for name in ("small", "medium"):
        budget = BUDGETS[name]
        train, model = resolve_arm(suite, suite.arm("rmsnorm"), budget)
        log = train.logging
        out[name] = (
            model,
            train.data.batch_size,
            train.data.block_size,
            train.steps,
            log.eval_every,
            log.eval_batches,
            budget.measure_windows,
        )
    return out


def timers(model_cfg, batch: int, block: int):
    from archlab.nn.model import TransformerLM

    torch.manual_seed(0)
    model = TransformerLM(model_cfg)
    params = list(model.parameters())
    optimizer = torch.optim.AdamW(params, lr=1e-3, foreach=True)
    x = torch.randint(0, model_cfg.vocab_size, (batch, block))
    y = torch.randint(0, model_cfg.vocab_size, (batch, block))

    def step() -> None:
        model(x, targets=y).loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    @torch.inference_mode()
    def forward() -> None:
        model(x, targets=y)

    return step, forward, sum(p.numel() for p in params)


def measure(rounds: int) -> dict:
    from archlab.train.hardware import describe_machine

    budgets = shapes()
    result = {"machine": describe_machine(), "torch": torch.__version__, "budgets": {}}
    for threads in (1, 2):
        torch.set_num_threads(threads)
        fns = {name: timers(*spec[:3]) for name, spec in budgets.items()}
        times = {name: {"step": [], "forward": []} for name in fns}
        for _ in range(rounds):  # interleaved: a change of load reaches every budget alike
            for name, (step, forward, _) in fns.items():
                step()
                forward()
                for kind, fn in (("step", step), ("forward", forward)):
                    for _ in range(3):
                        start = time.perf_counter()
                        fn()
                        times[name][kind].append(time.perf_counter() - start)
        for name, (
            model,
            batch,
            block,
            steps,
            eval_every,
            eval_batches,
            windows,
        ) in budgets.items():
            step_s = statistics.median(times[name]["step"])
            forward_s = statistics.median(times[name]["forward"])
            params = fns[name][2]
            tokens = batch * block
            row = result["budgets"].setdefault(
                name,
                {
                    "d_model": model.d_model,
                    "n_layers": model.n_layers,
                    "params": params,
                    "batch": batch,
                    "block": block,
                    "steps": steps,
                    "tokens": steps * tokens,
                    "steps_at_20_tokens_per_param": math.ceil(TOKENS_PER_PARAM * params / tokens),
                },
            )
            evals = steps // eval_every * eval_batches * forward_s
            measures = (EVAL_SET_TOKENS + 2 * windows * 4 * block) / tokens * forward_s
            row[f"threads_{threads}"] = {
                "step_s": step_s,
                "forward_s": forward_s,
                "train_s": steps * step_s,
                "evals_s": evals,
                "measures_s": measures,
                "run_s": steps * step_s + evals + measures,
                "run_s_at_20_tokens_per_param": row["steps_at_20_tokens_per_param"] * step_s
                + row["steps_at_20_tokens_per_param"] // eval_every * eval_batches * forward_s
                + measures,
            }
    return result


def table(r: dict) -> str:
    hours = lambda s: f"{s / 3600:.1f} h" if s >= 3600 else f"{s / 60:.1f} min"  # noqa: E731
    lines = [
        f"{r['machine']}. The training step and an evaluation forward, median of "
        "interleaved rounds; a run = steps x step + evaluations + the lab's measures.",
        "",
        "| budget | model | params | tokens per run (per param) | threads | step | run | at "
        "20 tokens/param |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, b in r["budgets"].items():
        for threads in (1, 2):
            t = b[f"threads_{threads}"]
            lines.append(
                f"| `{name}` | d_model {b['d_model']}, {b['n_layers']} layers "
                f"| {b['params'] / 1e6:.2f}M | {b['tokens'] / 1e6:.2f}M "
                f"({b['tokens'] / b['params']:.1f}) | {threads} | {t['step_s'] * 1e3:.0f} "
                f"ms | {hours(t['run_s'])} | {hours(t['run_s_at_20_tokens_per_param'])} "
                f"({b['steps_at_20_tokens_per_param']:,} steps) |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    args = parser.parse_args()
    result = measure(args.rounds)
    text = table(result)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "budget_cost.md").write_text(text, encoding="utf-8")
    (args.out / "budget_cost.json").write_text(
        json.dumps(result, indent=1) + "\n", encoding="utf-8"
    )


if __name__ == "__main__":
    main()

"""What one run of a plan costs in wall seconds, for `archlab ablate --plan`: measured at the
budget asked for, or scaled to it from a measurement at another budget, and always with where the
figure came from.

A run costs a fixed start (RUN_START_S: Python and torch, the data, the evaluations and the
checkpoints, about the same at any size) plus time in proportion to its training compute
    C = steps x batch_size x block_size x training FLOPs per token (costs.flops_per_token at
        the block).
The figure is the first of:
  1. this suite's finished runs at this budget: their median wall, as measured;
  2. other suites' finished runs at this budget in the same store (their plan.json beside this
     suite's folder): the median of their rates (wall - start) / C, times this suite's mean C;
  3. this suite's published page (docs/results/SUITE) at whatever budget it ran: its median run,
     less the start, times this suite's mean C at the plan's budget over its mean C at the page's;
  4. the budget's own figure (`Budget.run_s`), not measured.
Before, `--plan` at `tiny` read the `small` page's 355 s per run as it was and said "about 18 min"
for a suite that ran in 42 s: tiny's runs are 1/363 of small's compute for that suite.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass
from pathlib import Path

from archlab.costs import flops_per_token
from archlab.lab.runs.plan import PLAN, Plan
from archlab.lab.runs.runner import is_done, run_wall_s
from archlab.lab.spec.arms import match_parameters, resolve_arm
from archlab.lab.spec.budgets import BUDGETS, Budget
from archlab.lab.spec.suite import Suite, at_budget
from archlab.lab.spec.suite_file import load_suite
from archlab.nn.config import ModelConfig
from archlab.train.config import TrainConfig

# a tiny-budget run of 1 step took 6.3 s and one of 24 steps 7.2 s (the 2-core machine at load 6,
# 2026-12-05): starting Python and torch, reading the data, evaluating and checkpointing cost about
# this at any size
RUN_START_S = 6.0


@dataclass(frozen=True)
class RunCost:
    seconds: float  # wall seconds per run
    source: str  # where the figure came from, for the printout


def run_compute(steps: int, batch_size: int, block_size: int, model: ModelConfig) -> float:
    """Training FLOPs of one run: tokens trained on times the training FLOPs per token
    at the block."""
    return float(steps * batch_size * block_size * flops_per_token(model, block_size)["training"])


def _config_compute(train: TrainConfig, model: ModelConfig) -> float:
    return run_compute(train.steps, train.data.batch_size, train.data.block_size, model)


def suite_compute(suite: Suite, budget: Budget) -> float:
    """The mean training compute of a run of `suite` (as loaded, not yet at a
    budget) at `budget`."""
    at = at_budget(match_parameters(suite, budget), budget)
    return statistics.fmean(_config_compute(*resolve_arm(at, arm, budget)) for arm in at.arms)


def plan_compute(plan: Plan) -> float:
    """The mean training compute of the plan's runs (each arm weighted by its runs)."""
    per_arm = {
        arm.name: _config_compute(*resolve_arm(plan.suite, arm, plan.budget))
        for arm in plan.suite.arms
    }
    return statistics.fmean(per_arm[r.arm] for r in plan.runs)


def stored_compute(run_dir: Path) -> float | None:
    """A finished run's training compute from its config.json (None when it has none)."""
    path = run_dir / "config.json"
    if not path.is_file():
        return None
    config = json.loads(path.read_text(encoding="utf-8"))
    train, model = config["train"], ModelConfig.from_dict(config["model"])
    block = train["data"]["block_size"] or model.max_seq_len
    return run_compute(train["steps"], train["data"]["batch_size"], block, model)


def scaled(seconds: float, source: float, target: float, start: float = RUN_START_S) -> float:
    """A run measured at `seconds` for compute `source`, scaled to compute `target`: the start
    stays, the rest grows with the compute."""
    return start + max(0.0, seconds - start) * target / source


def run_cost(plan: Plan, docs: Path) -> RunCost:
    """The wall seconds of one of the plan's runs, from the first source of the module
    doc that exists."""
    walls = sorted(w for r in plan.runs if is_done(r) and (w := run_wall_s(r.run_dir)) > 0)
    if walls:
        return RunCost(
            statistics.median(walls),
            f"the median of this suite's {len(walls)} stored runs at budget {plan.budget.name}",
        )
    target = plan_compute(plan)
    if neighbours := _store_rates(plan):
        rate = statistics.median(neighbours)
        return RunCost(
            RUN_START_S + rate * target,
            f"{len(neighbours)} runs of other suites at budget {plan.budget.name} in {plan.store}: "
            f"their median {rate:.3g} s per training FLOP past a {RUN_START_S:g} s start, times "
            f"this suite's {target:.3g} FLOPs per run",
        )
    page = docs / plan.suite.name / "provenance.json"
    record = json.loads(page.read_text(encoding="utf-8")) if page.is_file() else {}
    median, at = record.get("training", {}).get("median_run_s"), record.get("budget")
    if median and at in BUDGETS:
        source = (
            target
            if at == plan.budget.name
            else suite_compute(load_suite(plan.suite.path), BUDGETS[at])
        )
        seconds = scaled(float(median), source, target)
        how = (
            "as measured"
            if at == plan.budget.name
            else (
                f"scaled by training FLOPs per run (budget {plan.budget.name}'s {target:.3g} are "
                f"{target / source:.3g}x {at}'s {source:.3g}) past a {RUN_START_S:g} s start"
            )
        )
        return RunCost(
            seconds,
            f"the published page {page.parent}: {float(median):.0f} s per run at "
            f"budget {at}, {how}",
        )
    return RunCost(
        plan.budget.run_s,
        f"budget {plan.budget.name}'s figure (an estimate for a quiet machine; no run "
        "of this suite or at this budget is stored or published)",
    )


def _store_rates(plan: Plan) -> list[float]:
    """(wall - start) / C of the finished runs of other suites at the plan's budget that
    share its store."""
    rates = []
    for record_path in sorted(plan.out.parent.glob(f"*/{PLAN}")):
        if record_path.parent.resolve() == plan.out.resolve():
            continue
        record = json.loads(record_path.read_text(encoding="utf-8"))
        if (
            record.get("budget") != plan.budget.name
            or Path(record.get("store", "")).resolve() != plan.store.resolve()
        ):
            continue
        for run in record.get("runs", []):
            run_dir = Path(run["dir"])
            wall, compute = run_wall_s(run_dir), stored_compute(run_dir)
            if wall > 0 and compute:
                rates.append(max(0.0, wall - RUN_START_S) / compute)
    return rates

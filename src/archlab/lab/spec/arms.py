"""A suite's arms as runs: each arm's dotted keys (the lab's defaults < budget < base <
budget_keys < arm), its configs resolved as `archlab train` would, and its parameters matched to
the base's (d_ff).
"""

from __future__ import annotations

import dataclasses
import json

from archlab.costs import parameter_counts
from archlab.lab.spec.budgets import Budget
from archlab.lab.spec.suite import Arm, Suite, SuiteError
from archlab.nn.config import ModelConfig
from archlab.train.config import TrainConfig, resolve_config

# an arm more than 2% off the base's parameter count is flagged (or d_ff is matched)
PARAM_TOLERANCE = 0.02
# what lab runs default to: no TensorBoard, samples or progress bar (the lab shows its own),
# one final checkpoint
LAB_KEYS = {
    "logging.tensorboard": False,
    "logging.samples": 0,
    "logging.progress": False,
    "checkpoint.save_every": 0,
}


def flag_value(value: object) -> str:
    """A YAML value as the text an `archlab train --key VALUE` flag takes."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "none"
    if isinstance(value, (list, tuple)):
        return ",".join(flag_value(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value)
    return str(value)


def arm_keys(suite: Suite, arm: Arm, budget: Budget) -> dict[str, str]:
    """The arm's dotted keys as flag strings: the lab's defaults < budget < base < the base's keys
    at this budget (`budget_keys:`) < arm."""
    merged = {
        **LAB_KEYS,
        **budget.keys,
        **suite.base,
        **suite.budget_keys.get(budget.name, {}),
        **arm.overrides,
    }
    # a rung of a compute ladder: the same recipe (warmup share alike) over more steps
    if arm.steps_scale != 1.0:
        merged["steps"] = max(1, round(int(merged["steps"]) * arm.steps_scale))
        if "schedule.warmup_steps" in merged:
            merged["schedule.warmup_steps"] = round(
                int(merged["schedule.warmup_steps"]) * arm.steps_scale
            )
    if suite.checkpoints > 1:  # evenly spaced over the run, all kept
        merged["checkpoint.save_every"] = max(1, int(merged["steps"]) // suite.checkpoints)
        merged["checkpoint.keep_last"] = suite.checkpoints + 1
    return {k: flag_value(v) for k, v in merged.items()}


def resolve_arm(suite: Suite, arm: Arm, budget: Budget) -> tuple[TrainConfig, ModelConfig]:
    """The arm's configs, resolved exactly as `archlab train` would; errors name the
    suite and arm."""
    try:
        return resolve_config([arm_keys(suite, arm, budget)])
    except ValueError as err:
        raise SuiteError(f"suite {suite.name} arm {arm.name}: {err}") from None


def _total(model: ModelConfig, **changes: object) -> int:
    return parameter_counts(model.replace(**changes) if changes else model)["total"]


def match_parameters(suite: Suite, budget: Budget) -> Suite:
    """The suite with every arm's parameters counted, d_ff adjusted for arms > 2% off the base
    (match_params: d_ff), the rest flagged: new Arm values in a new Suite; `suite` is left as it
    was. A screening suite matches every run to its `base:` alone (no factor's level set), whichever
    row comes first."""
    reference = Arm("base", {}) if suite.screening else suite.base_arm
    base_total = _total(resolve_arm(suite, reference, budget)[1])
    arms = []
    for arm in suite.arms:
        model = resolve_arm(suite, arm, budget)[1]
        arm = dataclasses.replace(
            arm, overrides=dict(arm.overrides), params=_total(model), matched=""
        )
        adjustable = (
            suite.match_params == "d_ff"
            and arm.name not in suite.unmatched
            and "model.d_ff" not in arm.overrides
            and "model.d_ff" not in suite.base
        )
        if abs(arm.params - base_total) > PARAM_TOLERANCE * base_total and adjustable:
            slope = _total(model, d_ff=model.d_ff + 1) - arm.params  # parameters per unit of d_ff
            d_ff = max(1, model.d_ff + round((base_total - arm.params) / slope))
            arm.overrides["model.d_ff"] = d_ff
            arm.params = _total(resolve_arm(suite, arm, budget)[1])
            arm.matched = f"d_ff {model.d_ff} -> {d_ff} to match the base's parameters"
        arm.flagged = abs(arm.params - base_total) > PARAM_TOLERANCE * base_total
        arms.append(arm)
    return dataclasses.replace(suite, arms=arms)


def param_note(suite: Suite, arm: Arm, params: int, base_params: int) -> str:
    """The note a table shows for an arm: its d_ff matching, and its size when more than 2%
    off the base."""
    off = (params - base_params) / base_params
    parts = [arm.matched] if arm.matched else []
    if abs(off) > PARAM_TOLERANCE:
        why = (
            "by design"
            if arm.name in suite.unmatched or suite.match_params == "none"
            else "not matched"
        )
        parts.insert(0, f"{off:+.1%} parameters vs the base ({why})")
    return "; ".join(parts)

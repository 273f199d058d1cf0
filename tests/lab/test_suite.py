"""Every built-in suite loads, every arm resolves and builds (meta device), parameters follow the
2% rule; the plumbing's boundaries (d_ff matching, checkpoint keys, margins) against hand counts.
Reading a suite file: test_suite_file.py; its plan: test_plan.py."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from archlab.lab.runs.plan import plan_suite
from archlab.lab.spec.arms import (
    PARAM_TOLERANCE,
    arm_keys,
    match_parameters,
    param_note,
    resolve_arm,
)
from archlab.lab.spec.budgets import BUDGETS
from archlab.lab.spec.suite import Arm, SuiteError
from archlab.lab.spec.suite_file import list_suites, load_suite
from archlab.nn.model import TransformerLM
from tests.lab.test_suite_file import ARMS, _suite

# the suites are the YAML files of the package folder, read from the source tree
# (not through list_suites)
SUITES = sorted(
    p.stem for p in (Path(__file__).resolve().parents[2] / "src/archlab/lab/suites").glob("*.yaml")
)


def test_every_suite_file_ships_and_is_listed() -> None:
    # the lecture's claims; a lost folder would make every test below vacuous
    assert len(SUITES) >= 13
    assert sorted(s.name for s in list_suites()) == SUITES


@pytest.mark.parametrize("budget", ["tiny", "small"])
@pytest.mark.parametrize("name", SUITES)
def test_every_arm_builds_and_parameters_match(name: str, budget: str, tmp_path: Path) -> None:
    plan = plan_suite(load_suite(name), BUDGETS[budget], tmp_path)
    suite = plan.suite  # the parameter-matched suite the plan holds
    # a screening suite matches to its base
    reference = Arm("base", {}) if suite.screening else suite.base_arm
    with torch.device("meta"):
        base = sum(
            p.numel()
            for p in TransformerLM(resolve_arm(suite, reference, BUDGETS[budget])[1]).parameters()
        )
    for arm in suite.arms:
        train, model_config = resolve_arm(suite, arm, BUDGETS[budget])
        with torch.device("meta"):
            model = TransformerLM(model_config)
        built = sum(p.numel() for p in model.parameters())
        assert built == arm.params, (
            f"{name}/{arm.name}: parameter_counts disagrees with the built model"
        )
        off = abs(built - base) / base
        if suite.match_params == "d_ff" and arm.name not in suite.unmatched:
            assert off <= PARAM_TOLERANCE, f"{name}/{arm.name} is {off:.1%} off the base"
        assert arm.flagged == (off > PARAM_TOLERANCE)
        note = param_note(suite, arm, built, base)
        assert arm.flagged == ("parameters vs the base" in note)
        assert ("model.d_ff" in arm.overrides) == ("d_ff" in note and arm.matched != "")
        steps = {**BUDGETS[budget].keys, **suite.budget_keys.get(budget, {})}["steps"]
        # equal steps, or a compute ladder's rung
        assert train.steps == max(1, round(steps * arm.steps_scale))
    # fair by construction: every run of an arm differs from the base's only in the arm's own keys
    base_keys = arm_keys(suite, reference, BUDGETS[budget])
    for run in plan.runs:
        arm = suite.arm(run.arm)
        differ = {k for k in set(base_keys) | set(run.keys) if base_keys.get(k) != run.keys.get(k)}
        ladder = {"steps", "schedule.warmup_steps"} if arm.steps_scale != 1.0 else set()
        assert differ <= set(arm.overrides) | {"seed", "out", "data.source"} | ladder, (
            run.arm,
            differ,
        )
    # paired by construction: every arm, the base included, runs seeds 0..n-1
    n = suite.seeds or BUDGETS[budget].seeds
    assert all([r.seed for r in plan.runs_of(a.name)] == list(range(n)) for a in suite.arms)
    assert suite.design, f"{name}: the page must say why its design can show its claims (design:)"
    # every equivalence has a margin at the budget, unless it is arithmetic
    for claim in plan.suite.claims:
        assert claim.expect == "better" or claim.margin is not None or name == "heads"


def test_small_runs_three_seeds_per_arm_and_no_noise_seeds() -> None:
    assert BUDGETS["small"].seeds == 3
    assert not hasattr(BUDGETS["small"], "noise_seeds")


# ---------------------------------------------------------------------------- d_ff matching by hand
# the `tiny` size, llama preset: SwiGLU, 8/3 * 64 -> 192
D, LAYERS, VOCAB, HEADS, D_FF = 64, 2, 256, 4, 192


def _llama_params(
    d_ff: int = D_FF, kv_heads: int = HEADS, head_dim: int = D // HEADS, tied: bool = False
) -> int:
    """Llama's parameters by hand: embeddings (+ an untied head), q/k/v/o, two RMSNorm gains per
    layer, the SwiGLU's three matrices, the final norm."""
    attn = D * HEADS * head_dim * 2 + 2 * D * kv_heads * head_dim  # q and o; k and v
    layer = attn + 2 * D + 3 * D * d_ff
    return VOCAB * D * (1 if tied else 2) + LAYERS * layer + D


def _nearest_d_ff(**arm: object) -> int:
    """The d_ff whose parameter count is nearest the base's (the rule: match
    the base's parameters)."""
    base = _llama_params()
    return min(range(1, 1000), key=lambda f: abs(_llama_params(d_ff=f, **arm) - base))


MATCHING = """
base: {preset: llama}
unmatched: [wide]
arms:
  base: {}
  gqa: {model.n_kv_heads: 2}
  tied: {model.tie_embeddings: true}
  big-heads: {model.head_dim: 32}
  own-d-ff: {model.n_kv_heads: 1, model.d_ff: 150}
  wide: {model.n_kv_heads: 1}
claims: [{text: x, metric: val_loss, arm: gqa, versus: base}]
"""


def test_d_ff_is_matched_to_the_nearest_parameter_count_by_hand(tmp_path: Path) -> None:
    (tmp_path / "m.yaml").write_text(MATCHING)
    loaded = load_suite(tmp_path / "m.yaml")
    before = [(a.name, dict(a.overrides), a.params) for a in loaded.arms]
    suite = match_parameters(loaded, BUDGETS["tiny"])
    # the input is untouched
    assert [(a.name, a.overrides, a.params) for a in loaded.arms] == before
    # by hand: 8192 fewer parameters (k, v) / 384 per unit of d_ff = 21.33 -> 213 (ceil would give
    # 214); 16384 fewer (the head) / 384 = 42.67 -> 235 (truncating would give 234); 32768 more /
    # 384 = -85.33 -> 107 (floor would give 106)
    expected = {"gqa": 213, "tied": 235, "big-heads": 107}
    assert expected == {
        "gqa": _nearest_d_ff(kv_heads=2),
        "tied": _nearest_d_ff(tied=True),
        "big-heads": _nearest_d_ff(head_dim=32),
    }
    for name, d_ff in expected.items():
        arm = suite.arm(name)
        assert (
            arm.overrides["model.d_ff"] == d_ff
            and arm.matched == f"d_ff 192 -> {d_ff} to match the base's parameters"
        )
        assert not arm.flagged
    assert suite.arm("gqa").params == _llama_params(d_ff=213, kv_heads=2)
    # an arm that sets its own d_ff keeps it; an arm in `unmatched` keeps the default
    # d_ff: both flagged
    assert (
        suite.arm("own-d-ff").overrides["model.d_ff"] == 150 and suite.arm("own-d-ff").matched == ""
    )
    assert "model.d_ff" not in suite.arm("wide").overrides and suite.arm("wide").matched == ""
    assert suite.arm("wide").params == _llama_params(kv_heads=1) and suite.arm("wide").flagged
    assert "(by design)" in param_note(
        suite, suite.arm("wide"), suite.arm("wide").params, _llama_params()
    )


def test_a_d_ff_set_in_the_base_is_left_alone(tmp_path: Path) -> None:
    (tmp_path / "m.yaml").write_text(
        MATCHING.replace(
            "base: {preset: llama}", "base: {preset: llama, model: {d_ff: 160}}"
        ).replace("unmatched: [wide]\n", "")
    )
    loaded = load_suite(tmp_path / "m.yaml")
    before = [(a.name, dict(a.overrides), a.params) for a in loaded.arms]
    suite = match_parameters(loaded, BUDGETS["tiny"])
    # the input is untouched
    assert [(a.name, a.overrides, a.params) for a in loaded.arms] == before
    for arm in suite.arms:
        assert arm.matched == "" and arm.overrides.get("model.d_ff", 160) in (160, 150)
        assert resolve_arm(suite, arm, BUDGETS["tiny"])[1].d_ff == arm.overrides.get(
            "model.d_ff", 160
        )
    assert (
        suite.arm("gqa").params == _llama_params(d_ff=160, kv_heads=2) and suite.arm("gqa").flagged
    )


@pytest.mark.parametrize(
    ("budget", "checkpoints", "every", "keep"),
    [("tiny", 8, 3, 9), ("small", 8, 37, 9), ("tiny", 5, 4, 6), ("tiny", 1, 0, None)],
)
def test_checkpoint_keys_keep_every_evenly_spaced_checkpoint(
    budget: str, checkpoints: int, every: int, keep: int | None, tmp_path: Path
) -> None:
    (tmp_path / "c.yaml").write_text(MATCHING + f"checkpoints: {checkpoints}\n")
    suite = load_suite(tmp_path / "c.yaml")
    keys = arm_keys(suite, suite.base_arm, BUDGETS[budget])
    assert keys["checkpoint.save_every"] == str(every) and keys.get("checkpoint.keep_last") == (
        None if keep is None else str(keep)
    )
    if keep is not None:  # the saves (every `every` steps, and the last step) all fit in keep_last
        steps = int(BUDGETS[budget].keys["steps"])
        saves = len({s for s in range(every, steps + 1, every)} | {steps})
        assert checkpoints <= saves <= keep


def test_margins_come_from_the_claim_the_suite_or_the_budget(tmp_path: Path) -> None:
    same = "claims:\n  - {text: x, metric: val_loss, arm: a, versus: b, expect: same%s}\n"
    bare = _suite(tmp_path, ARMS + same % "")
    assert bare.claims[0].margin is None  # the budget's, once planned at one
    for name, budget in BUDGETS.items():
        planned = plan_suite(bare, budget, tmp_path / name).suite.claims[0]
        assert planned.margin == budget.margin > 0 and budget.margin_source
    # 7% more base compute on the compute ladder at small: 0.4198 nats per e-fold (its published
    # slope) x ln 1.07
    assert BUDGETS["small"].margin == 0.03 and 0.4198 * math.log(1.07) == pytest.approx(
        0.0284, abs=1e-4
    )
    assert BUDGETS["small"].margin <= 0.4198 * math.log(1.075)  # worth at most 1.075x compute
    planned = plan_suite(bare, BUDGETS["small"], tmp_path / "smallest").suite.claims[0]
    assert planned.smallest_effect == planned.margin  # a `same` claim is planned at its margin
    assert (
        _suite(tmp_path, ARMS + "margins: {val_loss: 0.05}\n" + same % "").claims[0].margin == 0.05
    )
    assert (
        _suite(tmp_path, ARMS + "margins: {val_loss: 0.05}\n" + same % ", margin: 0.01")
        .claims[0]
        .margin
        == 0.01
    )
    with pytest.raises(
        SuiteError, match="expect: same needs margin: .*only val_loss, train_loss, loss_at_1x take"
    ):
        _suite(tmp_path, ARMS + same.replace("val_loss", "spikes") % "")
    with pytest.raises(SuiteError, match="margin=-0.1; a number > 0"):
        _suite(tmp_path, ARMS + same % ", margin: -0.1")
    with pytest.raises(SuiteError, match="min_effect=-1; a number >= 0"):
        _suite(
            tmp_path,
            ARMS + "claims:\n  - {text: x, metric: val_loss, arm: a, versus: b, min_effect: -1}\n",
        )
    better = _suite(
        tmp_path, ARMS + "claims:\n  - {text: x, metric: val_loss, arm: a, versus: b}\n"
    ).claims[0]
    assert better.margin is None and better.min_effect == 0.0 and better.better == "lower"
    higher = _suite(
        tmp_path,
        ARMS + "claims:\n  - {text: x, metric: val_loss, arm: a, versus: b, direction: higher}\n",
    )
    assert higher.claims[0].better == "higher"


def test_bad_arm_fails_with_the_trainers_error(tmp_path: Path) -> None:
    bad = _suite(
        tmp_path,
        "arms: {a: {}, b: {model.norm: batchnorm}}\nclaims:\n"
        "  - {text: x, metric: val_loss, arm: a, versus: b}\n",
    )
    with pytest.raises(
        SuiteError, match=r"arm b: .*norm='batchnorm' is not allowed: one of rmsnorm, layernorm"
    ):
        plan_suite(bad, BUDGETS["tiny"], tmp_path)

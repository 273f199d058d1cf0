"""Reading a suite file: claims must name arms and measures (one-line errors), factors make every
combination an arm, and the torch-free index lists what load_suite loads."""

from __future__ import annotations

from pathlib import Path

import pytest

from archlab.lab.spec import suite_file
from archlab.lab.spec.suite import SuiteError
from archlab.lab.spec.suite_file import list_suites, load_suite, suite_index


def _suite(tmp_path: Path, text: str):
    (tmp_path / "s.yaml").write_text(text)
    return load_suite(tmp_path / "s.yaml")


ARMS = "arms: {a: {}, b: {model.norm: layernorm}}\nmeasure: [val_loss, spikes]\n"


FACTORIAL = """
measure: [val_loss]
factors:
  norm: {pre: {}, post: {model.norm_position: post}}
  warmup: {"on": {}, "off": {schedule.warmup_steps: 0}}
  lr: {normal: {}, high: {optimizer.lr: 0.02}}
claims:
  - {text: post needs warmup, metric: val_loss, factor: warmup, arm: "on", versus: "off", within: {norm: post}}
  - {text: pre beats post, metric: val_loss, factor: norm, arm: pre, versus: post}
"""  # noqa: E501


def test_claims_name_arms_and_measures(tmp_path: Path) -> None:
    with pytest.raises(SuiteError, match="versus='c' is not an arm"):
        _suite(tmp_path, ARMS + "claims:\n  - {text: x, metric: val_loss, arm: a, versus: c}\n")
    with pytest.raises(SuiteError, match="no such suite"):
        load_suite("no-such-suite")
    with pytest.raises(SuiteError, match="regimes name arms that do not exist: \\['z'\\]"):
        _suite(
            tmp_path,
            ARMS + "regimes: {hot: [a, z]}\nclaims:\n  - {text: x, metric: val_loss, arm: "
            "a, versus: b}\n",
        )
    with pytest.raises(SuiteError, match="kind=.gpu.; one of train_step"):
        _suite(
            tmp_path,
            ARMS + "timings: [{metric: step_ms, kind: gpu, arms: [a, b]}]\nclaims:\n"
            "  - {text: x, metric: step_ms, arm: a, versus: b}\n",
        )
    timed = _suite(
        tmp_path,
        ARMS + "timings: [{metric: step_ms, kind: train_step, arms: [a, b], pairs: 20}]\n"
        "claims:\n  - {text: x, metric: step_ms, arm: b, versus: a}\n",
    )
    assert timed.timing(timed.claims[0]).pairs == 20 and timed.claims[0].better == "lower"


CLAIM = "claims:\n  - {text: x, metric: val_loss, arm: a, versus: b}\n"


@pytest.mark.parametrize(
    ("line", "refused", "allowed"),
    [
        ("seeds: {}", "seeds=1; an integer >= 2", 2),
        ("checkpoints: {}", "checkpoints=0; an integer >= 1", 1),
        ("budget_keys: {{{}: {{}}}}", "budget_keys names budgets \\['huge'\\]", "small"),
        ("unmatched: [{}]", "unmatched names arms that do not exist: \\['z'\\]", "b"),
        ("regimes: {{hot: [a], cold: [{}]}}", "an arm may sit in one regime only", "b"),
    ],
)
def test_each_run_and_arm_list_key_is_refused_on_one_side_of_its_bound(
    tmp_path: Path, line: str, refused: str, allowed
) -> None:
    """The value just outside what a key allows stops the load with one line naming it; the value
    just inside loads."""
    outside = {"seeds": 1, "checkpoints": 0, "budget_keys": "huge", "unmatched": "z"}
    bad = outside.get(line.split(":")[0], "a")
    with pytest.raises(SuiteError, match=refused):
        _suite(tmp_path, ARMS + line.format(bad) + "\n" + CLAIM)
    assert _suite(tmp_path, ARMS + line.format(allowed) + "\n" + CLAIM).claims


def test_factors_make_every_combination_an_arm(tmp_path: Path) -> None:
    suite = _suite(tmp_path, FACTORIAL)
    assert [a.name for a in suite.arms] == [
        "pre-on-normal",
        "pre-on-high",
        "pre-off-normal",
        "pre-off-high",
        "post-on-normal",
        "post-on-high",
        "post-off-normal",
        "post-off-high",
    ]
    assert suite.arm("post-off-high").overrides == {
        "model.norm_position": "post",
        "schedule.warmup_steps": 0,
        "optimizer.lr": 0.02,
    }
    assert suite.arm("pre-on-normal").overrides == {} and suite.base_arm.name == "pre-on-normal"
    warmup, norm = suite.claims
    assert suite.cells(warmup, "on") == ["post-on-normal", "post-on-high"]
    assert suite.cells(warmup, "off") == ["post-off-normal", "post-off-high"]
    assert suite.cells(norm, "post") == [a.name for a in suite.arms[4:]]
    with pytest.raises(SuiteError, match="arm='mid' is not a level of lr"):
        _suite(
            tmp_path,
            FACTORIAL + "  - {text: x, metric: val_loss, factor: lr, arm: mid, versus: high}\n",
        )


def test_the_torch_free_index_lists_what_load_suite_loads() -> None:
    assert suite_index() == [(s.name, len(s.arms), s.title) for s in list_suites()]


# ---------------------------------------------------------------------------- a new user's mistakes
def test_a_yaml_mistake_is_one_line_naming_the_file_line_and_column(tmp_path: Path) -> None:
    """The same mistake as in `train --config` (one line there too), not PyYAML's traceback: where
    the parser saw it and where the unclosed construct began."""
    with pytest.raises(SuiteError) as caught:
        _suite(tmp_path, "arms:\n  a: {}\n  b: {model.norm: layernorm\nclaims: []\n")
    assert str(caught.value) == (
        f"suite file {tmp_path / 's.yaml'} is not valid YAML (line 4, column 7): expected ',' "
        "or '}', but got ':' (while parsing a flow mapping that starts at line 3, column 6)"
    )
    with pytest.raises(SuiteError, match="^suite file .*s.yaml is not UTF-8 text"):
        (tmp_path / "s.yaml").write_bytes(b"name: caf\xe9\n")
        load_suite(tmp_path / "s.yaml")
    (tmp_path / "dir.yaml").mkdir()
    with pytest.raises(
        SuiteError, match=f"^suite file {tmp_path / 'dir.yaml'} is a folder, not a YAML file$"
    ):
        load_suite(tmp_path / "dir.yaml")
    with pytest.raises(SuiteError, match="^suite file .*gone.yaml does not exist$"):
        load_suite(tmp_path / "gone.yaml")


def test_two_arms_of_one_name_are_refused_not_merged(tmp_path: Path) -> None:
    """YAML keeps the last of two equal keys without a word: the suite would run one arm where
    it lists two."""
    claim = "claims:\n  - {text: x, metric: val_loss, arm: a, versus: b}\n"
    with pytest.raises(SuiteError) as caught:
        _suite(
            tmp_path,
            "arms:\n  a: {}\n  b: {model.norm: layernorm}\n  b: {model.norm: rmsnorm}\n" + claim,
        )
    assert str(caught.value) == (
        f"{tmp_path / 's.yaml'}: arm 'b' is named twice (lines 3 and 4): the second would "
        "replace the first; give each its own name"
    )
    with pytest.raises(
        SuiteError,
        match=r": factor norm names level 'pre' twice \(lines 5 and 6\); give each its own",
    ):
        _suite(
            tmp_path,
            FACTORIAL.replace(
                "  norm: {pre: {}, post: {model.norm_position: post}}",
                "  norm:\n    pre: {}\n    pre: {model.norm_position: post}",
            ),
        )
    with pytest.raises(
        SuiteError, match=r"the levels \['a-b', 'c'\] and \['a', 'b-c'\] both make arm 'a-b-c'"
    ):
        _suite(
            tmp_path,
            "factors:\n  f: {a-b: {}, a: {model.norm: layernorm}}\n"
            "  g: {c: {}, b-c: {optimizer.lr: 0.01}}\n"
            + claim.replace("arm: a, versus: b", "factor: f, arm: a, versus: a-b"),
        )
    # distinct names: read as before
    assert [a.name for a in _suite(tmp_path, ARMS + claim).arms] == ["a", "b"]


@pytest.mark.parametrize(
    ("metric", "extra", "limit", "units"),
    [
        (
            "val_loss",
            "",
            0.3688,
            "val_loss is in nats per token, not percent, and a margin must be below 0.37 nats "
            "(what doubling the base's compute buys at the tiny budget; the budgets' own margins "
            "are 0.02 to 0.036)",
        ),
        (
            "continuation_acc",
            "",
            0.5,
            "continuation_acc is in a share from 0 to 1, not percent, and a margin must be "
            "below 0.50 (half the share's range)",
        ),
        (
            "step_ms",
            "timings: [{metric: step_ms, kind: train_step, arms: [a, b]}]\n",
            0.6931,
            "step_ms is in log time ratio, not percent, and a margin must be below 0.69 (ln 2, a "
            "2x speed difference; 5% is 0.049)",
        ),
    ],
)
def test_a_margin_past_what_a_suite_can_see_is_refused_with_its_units(
    tmp_path: Path, metric: str, extra: str, limit: float, units: str
) -> None:
    """`margin: 3` meant as 3%: refused, saying the units and the bound, for a claim's margin
    and the suite's `margins:`; just under the bound is read, at it refused (the bound
    computed independently here)."""
    base = (
        ARMS.replace("[val_loss, spikes]", f"[val_loss, {metric}]") if metric != "step_ms" else ARMS
    ) + extra
    claim = (
        base + f"claims:\n  - {{text: as good, metric: {metric}, arm: a, versus: b, expect: "
        "same, margin: M}\n"
    )
    with pytest.raises(SuiteError) as caught:
        _suite(tmp_path, claim.replace("M", "3"))
    assert (
        str(caught.value)
        == f"{tmp_path / 's.yaml'}: claim 'as good': margin=3 is not allowed: {units}, or any "
        "two arms would count as alike"
    )
    suite_wide = (
        base
        + f"margins: {{{metric}: 3}}\nclaims:\n  - {{text: x, metric: {metric}, arm: a, versus: "
        "b, expect: same}\n"
    )
    with pytest.raises(SuiteError, match=f": margins.{metric}=3 is not allowed: "):
        _suite(tmp_path, suite_wide)
    under, at = round(limit - 0.001, 4), round(limit + 0.0001, 4)
    assert _suite(tmp_path, claim.replace("M", str(under))).claims[0].margin == under
    with pytest.raises(SuiteError, match=f"margin={at} is not allowed"):
        _suite(tmp_path, claim.replace("M", str(at)))


def test_the_margin_limits_are_what_the_docs_say() -> None:
    """Independent arithmetic: tiny's margin 0.036 is what 7% more compute buys, b ln 1.07, so
    doubling buys 0.036 ln 2 / ln 1.07; every built-in suite's margins sit under the limits
    (list_suites loads them all)."""
    import math

    from archlab.lab.spec.budgets import BUDGETS, MARGIN_LIMITS

    assert BUDGETS["tiny"].margin == max(b.margin for b in BUDGETS.values()) == 0.036
    assert MARGIN_LIMITS["nats"] == pytest.approx(0.036 * math.log(2) / math.log(1.07), rel=1e-12)
    assert round(MARGIN_LIMITS["nats"], 3) == 0.369
    assert all(c.margin is None or c.margin < 0.5 for s in list_suites() for c in s.claims)


def test_the_index_refuses_a_suite_naming_an_arm_twice_as_loading_it_does(
    tmp_path: Path, monkeypatch
) -> None:
    """`archlab ablate --list` reads the built-in suites as `load_suite` does: an arm given twice
    (YAML would keep the second silently) is one line naming the file and both lines, not a listing
    with one arm fewer."""
    (tmp_path / "twice.yaml").write_text(
        "name: twice\narms:\n  a: {}\n  b: {model.norm: layernorm}\n  a: {}\n"
    )
    monkeypatch.setattr(suite_file, "suites_dir", lambda: tmp_path)
    with pytest.raises(SuiteError, match=r"twice.yaml: arm 'a' is named twice \(lines 3 and 5\)"):
        suite_index()
    with pytest.raises(SuiteError, match=r"twice.yaml: arm 'a' is named twice \(lines 3 and 5\)"):
        load_suite(tmp_path / "twice.yaml")


TIMING = "timings: [{}]\nclaims:\n  - {{text: x, metric: step_ms, arm: a, versus: b}}\n"
TIMED = "{metric: step_ms, kind: train_step, arms: [a, b]"


@pytest.mark.parametrize(
    ("text", "refused"),
    [
        ("claims: [x]", "s.yaml: a claim must be a mapping, got 'x'"),
        (
            "claims:\n  - {text: x, metric: val_loss, arm: a, versus: b, arms: [a]}",
            "claim keys \\['arms'\\] unknown; allowed: \\[",
        ),
        (TIMING.format("step_ms"), "s.yaml: a timing must be a mapping, got 'step_ms'"),
        (TIMING.format(TIMED + ", seeds: 3}"), "timing keys \\['seeds'\\] unknown; allowed: \\["),
    ],
)
def test_a_claim_or_timing_is_a_mapping_of_its_own_keys(
    tmp_path: Path, text: str, refused: str
) -> None:
    """A claim or timing that is no mapping, or names a key its kind does not have, stops the load
    with one line naming it; the same entry without the stray key loads."""
    with pytest.raises(SuiteError, match=refused):
        _suite(tmp_path, ARMS + text + "\n")
    timed = _suite(tmp_path, ARMS + TIMING.format(TIMED + "}") + "\n")
    claimed = _suite(tmp_path, ARMS + CLAIM)
    assert timed.timings[0].metric == "step_ms" and claimed.claims[0].text == "x"

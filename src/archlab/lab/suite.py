"""A suite: a base config, arms (sets of dotted overrides), what to measure and the claims, read from YAML.

    name: norm-type                       # the suite's name (the file name without .yaml for built-ins)
    title: LayerNorm vs RMSNorm
    source: the CS336 lecture notes ...   # where the claims come from
    narang: RMSNorm improved ...          # Narang et al. 2021's finding on the same switch, one line (optional)
    base: {preset: llama, model.norm: rmsnorm}   # train keys and model.* keys, dotted or nested (archlab.overrides)
    match_params: d_ff                    # d_ff: arms off the base by > 2% get d_ff adjusted; none: only flagged
    unmatched: [wide]                     # arms that differ in size on purpose (flagged, never adjusted)
    checkpoints: 8                        # keep this many evenly spaced checkpoints (default: the final one)
    arms: {rmsnorm: {}, layernorm: {model.norm: layernorm}}   # the first arm is the base (noise floor)
    measure: [val_loss, step_ms]          # archlab.lab.measure.MEASURES
    claims:
      - {text: ..., metric: val_loss, arm: rmsnorm, versus: layernorm, expect: same, narang: better}

A run's config is layered defaults < budget < base < arm < the lab's per-run keys (seed, out, data), each
arm resolved through `archlab.train.config.resolve_config`, so a bad arm fails with the trainer's own error.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import yaml

from archlab.costs import parameter_counts
from archlab.lab.measure import MEASURES
from archlab.nn.config import ModelConfig
from archlab.overrides import flatten
from archlab.train.config import TrainConfig, resolve_config

PARAM_TOLERANCE = 0.02  # an arm more than 2% off the base's parameter count is flagged (or d_ff is matched)
MATCH_MODES = ("d_ff", "none")
EXPECTS = ("better", "same")
NARANG_FINDINGS = ("better", "same", "worse")
# what lab runs default to: no TensorBoard, samples or progress bar (the lab shows its own), one final checkpoint
LAB_KEYS = {"logging.tensorboard": False, "logging.samples": 0, "logging.progress": False, "checkpoint.save_every": 0}


class SuiteError(ValueError):
    """A malformed suite file: the message names the file, the key and what is allowed."""


@dataclass(frozen=True)
class Budget:
    """How much compute a suite gets: the train keys below the suite's base, seeds, and the data slice."""

    name: str
    keys: dict[str, object]  # dotted train / model keys, below the suite's base
    seeds: int  # seeds per arm
    noise_seeds: int  # seeds of the base arm, whose spread is the noise floor (>= seeds)
    max_files: int | None  # files of the corpus tokenized (the stdlib corpus sorted by path); None = all
    measure_windows: int  # the lab's loss measures read this many 4x-context windows of validation text


# warmup is ~10% of the steps in every budget, so "no warmup" arms (schedule.warmup_steps: 0) mean the same
_SHARED = {"data.source": "stdlib", "data.tokenizer": "byte", "optimizer.lr": 3e-3, "schedule.name": "cosine"}
BUDGETS: dict[str, Budget] = {
    # seconds per run on a laptop: tests and a first look
    "tiny": Budget("tiny", {
        **_SHARED, "size": "tiny", "steps": 24, "schedule.warmup_steps": 3, "data.batch_size": 8,
        "data.block_size": 64, "logging.eval_every": 12, "logging.eval_batches": 4, "logging.log_every": 2},
        seeds=2, noise_seeds=2, max_files=40, measure_windows=8),
    # ~2 CPU-minutes per run (measured: 0.4 s per step on one core); 5-40 min per suite with --jobs 2 on 2 cores
    # (norm-position, 34 runs, is the longest): docs/results
    "small": Budget("small", {
        **_SHARED, "size": "tiny", "model.d_model": 128, "model.n_layers": 4, "model.n_heads": 4, "steps": 300,
        "schedule.warmup_steps": 30, "data.batch_size": 16, "data.block_size": 128, "logging.eval_every": 50,
        "logging.eval_batches": 10, "logging.log_every": 5},
        seeds=2, noise_seeds=4, max_files=400, measure_windows=32),
    # the `small` size (width 256, 6 layers): ~5e14 training FLOPs per run, hours per run on one CPU core
    # (estimated from FLOPs, not measured); meant for a GPU (runs take cuda when available)
    "medium": Budget("medium", {
        **_SHARED, "size": "small", "steps": 2000, "schedule.warmup_steps": 200, "data.batch_size": 32,
        "data.block_size": 256, "optimizer.lr": 1e-3, "logging.eval_every": 200, "logging.eval_batches": 20,
        "logging.log_every": 10},
        seeds=3, noise_seeds=5, max_files=None, measure_windows=64),
}


@dataclass(frozen=True)
class Claim:
    text: str  # the claim as the source states it
    metric: str  # a measure name
    arm: str  # the arm claimed better (or as good)
    versus: str  # the arm it is compared with (the same arm when two metrics are compared)
    expect: str = "better"  # better | same ("as good as")
    versus_metric: str | None = None  # compare `metric` of arm with this metric of versus; None = the same metric
    direction: str | None = None  # higher | lower: the way the claim says arm moves; None = the measure's better
    narang: str | None = None  # Narang et al. 2021 on the same comparison: better | same | worse


@dataclass
class Arm:
    name: str
    overrides: dict[str, object]  # dotted keys the arm sets over the base (after d_ff matching)
    params: int = 0  # total parameters of the arm's model
    matched: str = ""  # what the lab changed to match parameters ("d_ff 192 -> 171 ...")
    flagged: bool = False  # more than PARAM_TOLERANCE off the base's parameters


@dataclass
class Suite:
    name: str
    title: str
    source: str
    narang: str
    base: dict[str, object]
    arms: list[Arm]
    measures: list[str]
    claims: list[Claim]
    match_params: str = "d_ff"
    unmatched: list[str] = field(default_factory=list)
    checkpoints: int = 1  # evenly spaced checkpoints kept per run (measures over steps read them)
    path: str = ""

    @property
    def base_arm(self) -> Arm:
        return self.arms[0]

    def arm(self, name: str) -> Arm:
        return next(a for a in self.arms if a.name == name)


# ------------------------------------------------------------------------------------------ reading
def suites_dir() -> Path:
    return Path(str(resources.files("archlab.lab") / "suites"))


def list_suites() -> list[Suite]:
    """Every built-in suite, by name."""
    return [load_suite(p) for p in sorted(suites_dir().glob("*.yaml"))]


def _require(ok: bool, where: str, message: str) -> None:
    if not ok:
        raise SuiteError(f"{where}: {message}")


def load_suite(spec: str | Path) -> Suite:
    """A built-in suite by name or a suite YAML file by path, checked for shape (arms are resolved later)."""
    path = Path(spec)
    if not path.suffix:
        path = suites_dir() / f"{spec}.yaml"
        known = ", ".join(p.stem for p in sorted(suites_dir().glob("*.yaml")))
        _require(path.is_file(), f"suite {spec!r}", f"no such suite; built-in suites: {known} (or a .yaml path)")
    _require(path.is_file(), f"suite {spec}", "file does not exist")
    tree = yaml.safe_load(path.read_text(encoding="utf-8"))
    where = str(path)
    _require(isinstance(tree, dict), where, "must hold a mapping")
    allowed = {"name", "title", "source", "narang", "base", "arms", "measure", "claims", "match_params", "unmatched",
               "checkpoints"}
    _require(not set(tree) - allowed, where, f"unknown keys {sorted(set(tree) - allowed)}; allowed: {sorted(allowed)}")
    arms = tree.get("arms") or {}
    _require(isinstance(arms, dict) and len(arms) >= 2, where, "arms must map at least two arm names to overrides")
    measures = list(tree.get("measure") or ["val_loss"])
    bad = [m for m in measures if m not in MEASURES]
    _require(not bad, where, f"measure {bad} unknown; one of {', '.join(MEASURES)}")
    match = tree.get("match_params", "d_ff")
    _require(match in MATCH_MODES, where, f"match_params={match!r}; one of {', '.join(MATCH_MODES)}")
    suite = Suite(name=str(tree.get("name") or path.stem), title=str(tree.get("title", "")),
                  source=str(tree.get("source", "")), narang=str(tree.get("narang", "") or ""),
                  base=flatten(tree.get("base") or {}), measures=measures, match_params=match,
                  arms=[Arm(str(n), flatten(o or {})) for n, o in arms.items()],
                  claims=[_claim(c, where, set(map(str, arms)), measures) for c in tree.get("claims") or []],
                  unmatched=[str(a) for a in tree.get("unmatched") or []], checkpoints=tree.get("checkpoints", 1),
                  path=str(path))
    _require(isinstance(suite.checkpoints, int) and suite.checkpoints >= 1, where,
             f"checkpoints={suite.checkpoints!r}; an integer >= 1")
    _require(bool(suite.claims), where, "needs at least one claim")
    stray = set(suite.unmatched) - set(map(str, arms))
    _require(not stray, where, f"unmatched names arms that do not exist: {sorted(stray)}")
    return suite


def _claim(raw: dict, where: str, arms: set[str], measures: list[str]) -> Claim:
    _require(isinstance(raw, dict), where, f"a claim must be a mapping, got {raw!r}")
    names = {f.name for f in dataclasses.fields(Claim)}
    _require(not set(raw) - names, where, f"claim keys {sorted(set(raw) - names)} unknown; allowed: {sorted(names)}")
    try:
        claim = Claim(**raw)
    except TypeError as err:
        raise SuiteError(f"{where}: claim {raw!r}: {err}") from None
    for key in ("arm", "versus"):
        _require(getattr(claim, key) in arms, where, f"claim {claim.text!r}: {key}={getattr(claim, key)!r} "
                 f"is not an arm ({', '.join(sorted(arms))})")
    for key in ("metric", "versus_metric"):
        value = getattr(claim, key)
        _require(value is None or value in measures, where, f"claim {claim.text!r}: {key} {value!r} is not measured")
    _require(claim.direction in (None, "higher", "lower"), where,
             f"claim {claim.text!r}: direction={claim.direction!r}; higher, lower or absent")
    _require(claim.expect in EXPECTS, where, f"claim {claim.text!r}: expect={claim.expect!r}; one of {EXPECTS}")
    _require(claim.narang in (None, *NARANG_FINDINGS), where,
             f"claim {claim.text!r}: narang={claim.narang!r}; one of {NARANG_FINDINGS} or absent")
    return claim


# --------------------------------------------------------------------------------------- resolution
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
    """The arm's dotted keys as flag strings: the lab's defaults < budget < base < arm."""
    merged = {**LAB_KEYS, **budget.keys, **suite.base, **arm.overrides}
    if suite.checkpoints > 1:  # evenly spaced over the run, all kept
        merged["checkpoint.save_every"] = max(1, int(merged["steps"]) // suite.checkpoints)
        merged["checkpoint.keep_last"] = suite.checkpoints + 1
    return {k: flag_value(v) for k, v in merged.items()}


def resolve_arm(suite: Suite, arm: Arm, budget: Budget) -> tuple[TrainConfig, ModelConfig]:
    """The arm's configs, resolved exactly as `archlab train` would; errors name the suite and arm."""
    try:
        return resolve_config([arm_keys(suite, arm, budget)])
    except ValueError as err:
        raise SuiteError(f"suite {suite.name} arm {arm.name}: {err}") from None


def _total(model: ModelConfig, **changes: object) -> int:
    return parameter_counts(model.replace(**changes) if changes else model)["total"]


def match_parameters(suite: Suite, budget: Budget) -> None:
    """Count every arm's parameters; adjust d_ff of arms > 2% off the base (match_params: d_ff), flag the rest."""
    base_total = _total(resolve_arm(suite, suite.base_arm, budget)[1])
    for arm in suite.arms:
        model = resolve_arm(suite, arm, budget)[1]
        arm.params = _total(model)
        adjustable = (suite.match_params == "d_ff" and arm.name not in suite.unmatched
                      and "model.d_ff" not in arm.overrides and "model.d_ff" not in suite.base)
        if abs(arm.params - base_total) > PARAM_TOLERANCE * base_total and adjustable:
            slope = _total(model, d_ff=model.d_ff + 1) - arm.params  # parameters per unit of d_ff
            d_ff = max(1, model.d_ff + round((base_total - arm.params) / slope))
            arm.overrides["model.d_ff"] = d_ff
            arm.params = _total(resolve_arm(suite, arm, budget)[1])
            arm.matched = f"d_ff {model.d_ff} -> {d_ff} to match the base's parameters"
        arm.flagged = abs(arm.params - base_total) > PARAM_TOLERANCE * base_total


def param_note(suite: Suite, arm: Arm, params: int, base_params: int) -> str:
    """The note a table shows for an arm: its d_ff matching, and its size when more than 2% off the base."""
    off = (params - base_params) / base_params
    parts = [arm.matched] if arm.matched else []
    if abs(off) > PARAM_TOLERANCE:
        why = "by design" if arm.name in suite.unmatched or suite.match_params == "none" else "not matched"
        parts.insert(0, f"{off:+.1%} parameters vs the base ({why})")
    return "; ".join(parts)

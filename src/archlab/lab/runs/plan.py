"""A suite's plan: one `archlab train` command per arm and seed, the data folders
they share, plan.json.

Every run is a subprocess of `archlab train`, so a suite can as well be printed (`--print-commands`)
and run by any scheduler (`lab/runs/executor.py` submits them to Slurm), then collected. Runs
share one prepared data folder per tokenizer, the token budget, batch, schedule and seeds 0..n-1
(every arm alike); only the arm's overrides differ. A run's folder is named by a hash of its
resolved config, in a store that several suites may share (`--store`): an arm that two suites
both run (the base, post-norm, tied embeddings) trains once, and the suite's folder links to it
(SUITE/runs/ARM/seedN). lab/runs/runner.py runs the plan, lab/runs/collect.py measures it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from archlab.data.prepare import prepare_data
from archlab.lab.runs.store import link_legacy, run_key
from archlab.lab.spec.arms import arm_keys, flag_value, match_parameters, resolve_arm
from archlab.lab.spec.budgets import Budget
from archlab.lab.spec.suite import Suite, SuiteError, at_budget
from archlab.lab.spec.variants import MODES
from archlab.nn.config import ModelConfig
from archlab.train.config import TrainConfig, resolve_config

# written in the suite's folder: which suite, budget, seeds and run folders it holds
PLAN = "plan.json"


@dataclass(frozen=True)
class DataSpec:
    """One prepared data folder the suite's runs share."""

    source: str
    tokenizer: str
    vocab_size: int
    val_fraction: float
    max_files: int | None
    out: Path
    prepared: bool = False  # the source already is a prepared folder: used as it is
    # the train split encoded with BPE-dropout: a folder of its own (val stays plain)
    bpe_dropout: float = 0.0

    def command(self) -> list[str]:
        cmd = [
            "archlab",
            "data",
            "prepare",
            "--data",
            self.source,
            "--tokenizer",
            self.tokenizer,
            "--vocab-size",
            str(self.vocab_size),
            "--val-fraction",
            str(self.val_fraction),
        ]
        cmd += ["--max-files", str(self.max_files)] if self.max_files else []
        return (
            cmd
            + (["--bpe-dropout", f"{self.bpe_dropout:g}"] if self.bpe_dropout else [])
            + ["--out", str(self.out)]
        )


@dataclass(frozen=True, eq=False)  # compared and hashed by identity: a plan holds each run once
class RunSpec:
    """One arm at one seed, resolved once: its flags, its configs as `archlab train` resolves them,
    its folder in the store (named by the configs' key) and its length. The store, the runner, the
    measures and the report read these; nothing resolves the run's keys again."""

    arm: str
    seed: int
    run_dir: Path
    keys: dict[str, str]  # every dotted key the run sets, as flag text
    steps: int
    # the resolved configs (None: resolved from `keys` when first asked)
    train: TrainConfig | None = None
    model: ModelConfig | None = None

    def configs(self) -> tuple[TrainConfig, ModelConfig]:
        """The run's resolved configs (its folder aside: `out` is where the store put it)."""
        if self.train is None or self.model is None:
            train, model = resolve_config([{k: v for k, v in self.keys.items() if k != "out"}])
            object.__setattr__(self, "train", train)
            object.__setattr__(self, "model", model)
        return self.train, self.model

    def command(self, resume: bool = False) -> list[str]:
        flags = [part for key, value in self.keys.items() for part in (f"--{key}", value)]
        return ["archlab", "train", *flags] + (["--resume"] if resume else [])


@dataclass
class Plan:
    suite: Suite
    budget: Budget
    seeds: int
    out: Path
    data: list[DataSpec] = field(default_factory=list)
    runs: list[RunSpec] = field(default_factory=list)

    # where run folders live (default OUT/../store): shared by the suites beside OUT
    store: Path | None = None
    # arm -> seeds beyond `seeds` (--sequential's later looks)
    extra: dict[str, int] = field(default_factory=dict)
    # how every run trains (spec/variants.py MODES): its keys sit above every arm's
    mode: str = "default"

    def runs_of(self, arm: str) -> list[RunSpec]:
        return [r for r in self.runs if r.arm == arm]

    def seeds_of(self, arm: str) -> int:
        return self.seeds + self.extra.get(arm, 0)

    def commands(self) -> list[str]:
        """Every command of the suite as shell lines: data preparation first, then one
        line per run."""
        data = [shlex.join(d.command()) for d in self.data if not d.prepared]
        unique = {r.run_dir: r for r in self.runs}.values()  # arms that resolve alike share one run
        return data + [shlex.join(r.command()) for r in unique]


def _data_spec(arm_train: TrainConfig, budget: Budget, out: Path) -> DataSpec:
    """The data folder an arm (its resolved train config) trains on: STORE/data/<tokenizer>-<hash of
    the request>, or a prepared source."""
    d = arm_train.data
    if (Path(d.source) / "meta.json").is_file():
        return DataSpec(
            d.source, d.tokenizer, d.vocab_size, d.val_fraction, None, Path(d.source), prepared=True
        )
    tok = {"byte": "byte", "bpe": f"bpe{d.vocab_size}"}.get(d.tokenizer, "file")
    # bpe_dropout enters the request only when set, so the folders prepared before it
    # keep their names
    request = json.dumps(
        [d.source, d.tokenizer, d.vocab_size, d.val_fraction, budget.max_files]
        + ([d.bpe_dropout] if d.bpe_dropout else [])
    )
    # arms with other data never share a folder
    name = f"{tok}-{hashlib.sha1(request.encode()).hexdigest()[:8]}"
    return DataSpec(
        d.source,
        d.tokenizer,
        d.vocab_size,
        d.val_fraction,
        budget.max_files,
        out / "data" / name,
        bpe_dropout=d.bpe_dropout,
    )


def plan_suite(
    suite: Suite,
    budget: Budget,
    out: str | Path,
    seeds: int | None = None,
    store: str | Path | None = None,
    extra: dict[str, int] | None = None,
    mode: str = "default",
) -> Plan:
    """Resolve every arm (failing on the first bad one), match parameters, and lay out the runs:
    every arm at seeds 0..seeds-1 (plus `extra` seeds per arm), with `mode`'s train keys above the
    arm's, each in STORE/<run_hash>."""
    if mode not in MODES:
        raise SuiteError(f"--mode {mode!r} is not allowed: one of {', '.join(MODES)}")
    seeds = seeds if seeds is not None else suite.seeds or budget.seeds
    if seeds < 2:
        raise SuiteError(
            f"--seeds {seeds} is not allowed: at least 2 seeds per arm (a verdict needs a spread)"
        )
    suite = at_budget(match_parameters(suite, budget), budget)
    plan = Plan(
        suite,
        budget,
        seeds,
        Path(out),
        store=Path(store) if store else Path(out).parent / "store",
        extra=dict(extra or {}),
        mode=mode,
    )
    mode_keys = {k: flag_value(v) for k, v in MODES[mode].items()}
    for arm in suite.arms:
        data = _data_spec(resolve_arm(suite, arm, budget)[0], budget, plan.store)
        if data not in plan.data:
            plan.data.append(data)
        for seed in range(plan.seeds_of(arm.name)):
            keys = {
                **arm_keys(suite, arm, budget),
                **mode_keys,
                "data.source": str(data.out),
                "seed": str(seed),
            }
            try:
                train, model = resolve_config([keys])
            except ValueError as err:
                raise SuiteError(f"suite {suite.name} arm {arm.name} seed {seed}: {err}") from None
            run_dir = plan.store / run_key(train, model, budget, plan.store)
            link_legacy(run_dir, train, model, budget)
            train = dataclasses.replace(train, out=str(run_dir))
            plan.runs.append(
                RunSpec(
                    arm.name,
                    seed,
                    run_dir,
                    {**keys, "out": str(run_dir)},
                    train.steps,
                    train,
                    model,
                )
            )
    return plan


def write_plan(plan: Plan) -> None:
    """plan.json (the suite, budget, seeds and each run's folder) and SUITE/runs/ARM/seedN links
    to the runs."""
    plan.out.mkdir(parents=True, exist_ok=True)
    record = {
        "suite": plan.suite.path,
        "budget": plan.budget.name,
        "seeds": plan.seeds,
        "extra": plan.extra,
        "mode": plan.mode,
        "fold_over": bool(plan.suite.screening.get("fold_over")),
        "store": str(plan.store),
        "arms": {a.name: a.overrides for a in plan.suite.arms},
        "runs": [{"arm": r.arm, "seed": r.seed, "dir": str(r.run_dir)} for r in plan.runs],
    }
    (plan.out / PLAN).write_text(json.dumps(record, indent=2, default=str), encoding="utf-8")
    for run in plan.runs:
        link = plan.out / "runs" / run.arm / f"seed{run.seed}"
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            if link.is_symlink() and Path(os.readlink(link)) == run.run_dir.resolve():
                continue
            if not link.is_symlink():
                continue  # an older lab's run folder in its place: left as it was
            link.unlink()
        link.symlink_to(run.run_dir.resolve(), target_is_directory=True)


def read_plan(out: str | Path) -> dict:
    path = Path(out) / PLAN
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def prepare(plan: Plan) -> None:
    """Tokenize each data folder once (reused when already prepared with the same request)."""
    for d in (d for d in plan.data if not d.prepared):
        prepare_data(
            d.source,
            d.out,
            d.tokenizer,
            d.vocab_size,
            d.val_fraction,
            max_files=d.max_files,
            bpe_dropout=d.bpe_dropout,
        )

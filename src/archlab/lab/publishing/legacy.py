"""Pages published before the lab's rules: one published before the provenance rule,
re-judged from its files into a record (`scripts/publish_results.py --from-legacy NAME`);
one published before registrations, registered with what is known of when its margins were
set (`register_published`, scripts/register_published_pages.py).

Such a page has results.csv, timings.csv and claims.json. Its record gets the current suite file,
today's resolution of each arm's config (checked against the run ids in results.csv: version 1's
keys), the data folders' hashes, and the machine, wall times and command the old page states; its
old verdicts are kept in previous-rule.json. Nothing is retrained.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import yaml

from archlab.data.prepare import prepared_hash
from archlab.lab.analysis.ladder import LADDER_SUITE, describe, fit_ladder, ladder_values
from archlab.lab.analysis.table import Table
from archlab.lab.publishing.record import (
    CLAIMS,
    PREVIOUS_RULE,
    PROVENANCE,
    SUITE_FILE,
    config_hash,
    portable_config,
    read_record,
    scale,
    stamp,
)
from archlab.lab.runs.plan import Plan, plan_suite, prepare
from archlab.lab.runs.store import run_hash
from archlab.lab.spec import registration
from archlab.lab.spec.budgets import BUDGETS, Budget
from archlab.lab.spec.registration import REGISTRATION
from archlab.lab.spec.suite import Suite, at_budget
from archlab.lab.spec.suite_file import load_suite
from archlab.train.config import resolve_config

ROOT = Path(__file__).resolve().parents[4]  # a source checkout: the git history of its docs/results


def _old_page_facts(text: str) -> dict:
    """The machine, wall times and command a page of the previous rule states."""
    facts: dict = {}
    if m := re.search(r"Machine: (.+?)\. Training:", text) or re.search(
        r"Machine: (.+?)\.\s", text
    ):
        facts["machine"] = m.group(1)
    if m := re.search(
        r"Training: (\d+) runs, median (\d+) s per run \(process start to "
        r"exit\), ([\d.]+) run-minutes",
        text,
    ):
        facts["training"] = {
            "runs": int(m.group(1)),
            "median_run_s": float(m.group(2)),
            "run_minutes": float(m.group(3)),
        }
    if m := re.search(r"Suite wall time: ([\d.]+) min with --jobs (\d+)", text):
        facts.setdefault("training", {}).update(
            suite_wall_s=round(float(m.group(1)) * 60, 1), jobs=int(m.group(2))
        )
    if m := re.search(r"Command: `([^`]+)`", text):
        facts["command"] = m.group(1)
    return facts


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], capture_output=True, text=True
    ).stdout.strip()


def _ladder_pricing(docs: Path, margin: float) -> str:
    folder = docs / LADDER_SUITE
    if not (folder / "results.csv").is_file():
        return ""
    suite = load_suite(LADDER_SUITE)
    fit = fit_ladder(ladder_values(Table.read(folder, suite)))
    return "" if fit is None else describe(fit, margin)


def from_legacy(docs: Path, name: str, store: Path) -> Path:
    """Turn the page `name` of the previous rule in `docs` into a record (module doc); `store`: the
    store whose data folders it hashes and whose run ids it checks."""
    folder = docs / name
    _keep_previous_rule(folder)
    suite = load_suite(name)
    budget = BUDGETS["small"]
    old = Table.read(folder, suite)
    seeds = max(len(v) for v in old.runs.values())
    with tempfile.TemporaryDirectory() as tmp:
        plan = plan_suite(suite, budget, Path(tmp) / name, seeds, store=store)
    # the data folders whose hashes the page records (reused where the store has them)
    prepare(plan)
    mismatched = _mismatched_ids(old, plan)
    configs = _arm_configs(plan)
    shutil.copyfile(suite.path, folder / SUITE_FILE)
    table = _table_with_configs(folder, suite, configs)
    provenance = _provenance(docs, name, suite, plan, mismatched, scale(table, configs))
    (folder / PROVENANCE).write_text(
        json.dumps(provenance, indent=1, default=str), encoding="utf-8"
    )
    (folder / "configs.yaml").write_text(
        yaml.safe_dump(
            {arm: {"config": config_hash(c), **c} for arm, c in configs.items()}, sort_keys=False
        ),
        encoding="utf-8",
    )
    return folder


def _keep_previous_rule(folder: Path) -> None:
    """The old verdicts, kept in previous-rule.json the first time a page of the previous rule (its
    claims.json without `p_holm_suite`) is re-judged."""
    old_claims = (
        json.loads((folder / CLAIMS).read_text(encoding="utf-8"))
        if (folder / CLAIMS).is_file()
        else []
    )
    if (
        old_claims
        and "p_holm_suite" not in old_claims[0]
        and not (folder / PREVIOUS_RULE).is_file()
    ):
        (folder / PREVIOUS_RULE).write_text(json.dumps(old_claims, indent=1), encoding="utf-8")


def _mismatched_ids(old: Table, plan: Plan) -> list[tuple[str, int]]:
    """(arm, seed) of the published runs whose id today's resolution does not give (the published
    ids are version 1's)."""
    planned = {(r.arm, r.seed): r for r in plan.runs}
    return [
        (r.arm, r.seed)
        for arm in old.runs.values()
        for r in arm
        if (r.arm, r.seed) in planned
        and run_hash(planned[r.arm, r.seed].keys, plan.budget, version=1) != r.run_id
    ]


def _arm_configs(plan: Plan) -> dict[str, dict]:
    """Each arm's resolved config (seed 0's, or its lowest seed's), portable."""
    configs = {}
    for arm in plan.suite.arms:
        run = min(plan.runs_of(arm.name), key=lambda r: r.seed)
        train, model = resolve_config([run.keys])
        configs[arm.name] = portable_config({"train": train.to_dict(), "model": model.to_dict()})
    return configs


def _table_with_configs(folder: Path, suite: Suite, configs: dict[str, dict]) -> Table:
    """The page's results.csv again, each run with its arm's config hash."""
    table = Table.read(folder, suite)
    for arm, runs in table.runs.items():
        table.runs[arm] = [
            type(r)(
                r.arm,
                r.seed,
                r.run_id,
                r.values,
                r.items,
                r.parameters,
                config_hash(configs[arm]) if arm in configs else "",
            )
            for r in runs
        ]
    table.write(folder, suite.measures)
    return table


def _provenance(
    docs: Path,
    name: str,
    suite: Suite,
    plan: Plan,
    mismatched: list[tuple[str, int]],
    sizes: dict,
) -> dict:
    """provenance.json of the re-judged page: what the old page states, today's data folders'
    hashes, and where its margins come from."""
    page = docs / f"{name}.md"
    facts = _old_page_facts(page.read_text(encoding="utf-8") if page.is_file() else "")
    budget = plan.budget
    data = {d.out.name: prepared_hash(d.out) for d in plan.data if (d.out / "meta.json").is_file()}
    return stamp(
        {
            "suite": name,
            "budget": budget.name,
            "seeds": plan.seeds,
            "extra": {},
            "command": facts.get("command", f"archlab ablate {name} --budget small --jobs 2"),
            "machine": facts.get("machine", "not recorded"),
            "trained_by": {},
            "trained_note": _trained_note(name, mismatched),
            "data": data,
            "data_note": "hashes of the folders today's code prepares from this machine's Python "
            "standard library (the runs' own folders were not hashed); re-judged from the "
            "published per-run values, no new run",
            "training": {
                **facts.get("training", {}),
                "note": "Re-judged on 3 December 2026 from the published per-run values "
                "(no run retrained).",
            },
            "scale": sizes,
            "arms": {
                a.name: {"overrides": a.overrides, "matched": a.matched, "params": a.params}
                for a in plan.suite.arms
            },
            "margins": _margin_pricing(docs, suite, budget),
        }
    )


def _trained_note(name: str, mismatched: list[tuple[str, int]]) -> str:
    """When the page's values were first published (the commit that added its results.csv, not the
    last that rewrote it), and whether today's code resolves its arms to the published run ids."""
    added = _git(
        "log", "--diff-filter=A", "--format=%H %cs", "--", f"docs/results/{name}/results.csv"
    ).splitlines()
    published = added[-1].split() if added else []
    return (
        f"not recorded by the page; its values were first published at commit "
        f"{published[0][:12]} on {published[1]}"
        if published
        else "not recorded"
    ) + (
        "; today's code resolves every arm to the run ids in results.csv, so the runs' "
        "non-default settings are those in configs.yaml"
        if not mismatched
        else f"; today's code resolves {len(mismatched)} runs to other ids: configs.yaml is today's"
    )


def _margin_pricing(docs: Path, suite: Suite, budget: Budget) -> str:
    """The budget's default loss margin with its source, and what the compute ladder prices the
    suite's smallest loss margin at, where the ladder's page is published."""
    margins = sorted(
        {
            c.margin
            for c in at_budget(suite, budget).claims
            if c.expect != "better"
            and c.margin
            and c.metric in ("val_loss", "train_loss", "loss_at_1x")
        }
    )
    pricing = (
        f"Budget {budget.name}'s default loss margin and smallest effect, "
        f"{budget.margin:g} nats: {budget.margin_source}."
    )
    if margins and (priced := _ladder_pricing(docs, margins[0])):
        pricing += " " + priced
    return pricing


def register_published(folder: Path, margins_set: str | None, effects_set: str, note: str) -> dict:
    """The registration of a page published before registrations existed (lab/spec/registration.py):
    its claims as judged now, registered now, after all its runs, with what is known of when
    its margins (`margins_set`; None where no claim is judged at a margin) and smallest effects
    (`effects_set`) were set, and the evidence (`note`, from git). A page that has a registration
    keeps it: this never replaces one."""
    path = folder / REGISTRATION
    if path.is_file():
        raise ValueError(f"{path} exists: a page's registrations are never replaced")
    record = read_record(folder)
    runs = sum(len(r) for r in record.table.runs.values())
    entry = {
        **registration.entry(record.suite, record.budget.name, record.table.seeds, runs, note),
        "margins_set": margins_set,
        "effects_set": effects_set,
    }
    record_file = {"format": registration.FORMAT, "registrations": [entry]}
    path.write_text(json.dumps(record_file, indent=1), encoding="utf-8")
    return entry

"""A suite's record: everything a page needs to be recomputed by one command, and where it came from.

The report writes, beside results.md in the suite's folder (and `scripts/publish_results.py` copies to
docs/results/SUITE/):

- results.csv, items.csv, timings.csv: the measured values (lab/analysis/table.py);
- suite.yaml: the suite file as judged (claims, margins, groups), so a later edit of the built-in suite does not
  change what the page's verdicts were computed from;
- configs.yaml: each arm's resolved config (train and model, seed 0's; the seed and the run folder aside) and its
  hash, the `config` column of results.csv;
- provenance.json: the git commit of the code that trained (and a dirty flag), archlab / torch / numpy / scipy /
  statsmodels / Python versions, the machine, a hash of each prepared data folder, the exact command, the budget
  and seeds, the scale (parameters, training tokens, tokens per parameter), the wall time, each arm's overrides and
  parameter matching, and what the loss margin is worth in compute;
- claims.json: every claim's verdict as computed, which `verify` recomputes from the files above.

`verify(folder)` (`archlab ablate --verify DIR`) re-judges a folder from its files alone and lists every claim
whose outcome, estimate or p-values differ from claims.json.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import math
import platform
import statistics
import subprocess
from dataclasses import dataclass
from pathlib import Path

import yaml

from archlab.lab.analysis.table import Run, Table
from archlab.lab.analysis.verdicts import ClaimResult, judge
from archlab.lab.spec.budgets import BUDGETS, Budget
from archlab.lab.spec.suite import Suite, at_budget
from archlab.lab.spec.suite_file import load_suite

SUITE_FILE, CONFIGS, PROVENANCE, CLAIMS = "suite.yaml", "configs.yaml", "provenance.json", "claims.json"
REL_TOL = 1e-9  # verify: estimates and p-values agree to this relative tolerance (float64 sums in another order)


@dataclass
class Record:
    """A suite's table with its budget, provenance and configs (module doc)."""

    table: Table
    budget: Budget
    folder: Path
    provenance: dict
    configs: dict[str, dict]

    @property
    def suite(self) -> Suite:
        return self.table.suite


# ------------------------------------------------------------------------------------------ provenance
def source_state(path: Path | None = None) -> dict:
    """The git commit of the checkout that holds archlab's source (or `path`) and whether it had local changes."""
    root = path or Path(__file__).resolve().parents[4]

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True,
                              timeout=30).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--", "src"))
    except (OSError, subprocess.SubprocessError):
        return {"commit": "unknown (archlab is not run from a git checkout)", "dirty": None}
    return {"commit": commit, "dirty": dirty}


def versions() -> dict:
    """The versions of what computed the numbers."""
    from importlib import metadata

    import numpy
    import scipy
    import statsmodels
    import torch

    return {"archlab": metadata.version("archlab"), "torch": torch.__version__, "numpy": numpy.__version__,
            "scipy": scipy.__version__, "statsmodels": statsmodels.__version__, "python": platform.python_version()}


def data_hash(folder: Path) -> str:
    """sha256 of a prepared data folder's token files, tokenizer and request (meta.json's request, not its dates)."""
    digest = hashlib.sha256()
    meta = json.loads((folder / "meta.json").read_text(encoding="utf-8")) if (folder / "meta.json").is_file() else {}
    digest.update(json.dumps(meta.get("request", {}), sort_keys=True).encode())
    for name in ("tokenizer.json", "train.bin", "val.bin"):
        path = folder / name
        if path.is_file():
            with path.open("rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    digest.update(chunk)
    return digest.hexdigest()


def config_hash(config: dict) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]


def portable_config(config: dict) -> dict:
    """A run's config.json without what differs between its seeds or machines: the seed, the run folder, and the
    data folder's location (its name stays)."""
    train = {k: v for k, v in config["train"].items() if k not in ("out", "seed")}
    data = dict(train.get("data", {}))
    if "source" in data:
        data["source"] = Path(str(data["source"])).name
    return {"train": {**train, "data": data}, "model": config["model"]}


def scale(table: Table, configs: dict[str, dict]) -> dict:
    """The base arm's parameters, training tokens and tokens per parameter, and a sentence a reader can weigh."""
    base = table.suite.base_arm.name
    params = next((r.parameters for r in table.runs.get(base, []) if r.parameters), None)
    train = configs.get(base, {}).get("train", {})
    data, optimizer = train.get("data", {}), train.get("optimizer", {})
    tokens = (int(train.get("steps", 0)) * int(data.get("batch_size", 0)) * int(data.get("block_size", 0))
              * int(optimizer.get("grad_accum", 1) or 1))
    if not params or not tokens:
        return {}
    ratio = tokens / params
    stage = ("early-training verdicts (far below the ~20 tokens per parameter of compute-optimal training)"
             if ratio < 5 else "verdicts below compute-optimal training" if ratio < 20 else "past compute-optimal")
    return {"parameters": params, "training_tokens": tokens, "tokens_per_parameter": round(ratio, 3),
            "text": f"the base arm has {params / 1e6:.2f}M parameters and trains on {tokens / 1e6:.2f}M tokens "
                    f"({ratio:.2f} tokens per parameter): {stage}"}


# ------------------------------------------------------------------------------------------ claims
def claim_key(table: Table, result: ClaimResult) -> str:
    """A comparison's identity across suites: the metric, the run folders on both sides, the test's kind."""
    c = result.claim
    if table.suite.timing(c) is not None:  # a timing is its own experiment, never another suite's
        return json.dumps([table.suite.name, c.metric, c.arm, c.versus])
    sides = [sorted(rid for arm in side.split(" + ") for rid in table.run_ids(arm)) if c.factor is None else
             sorted(rid for arm in table.suite.cells(c, level) for rid in table.run_ids(arm))
             for side, level in zip(result.arms, (c.arm, c.versus), strict=True)]
    return json.dumps([c.metric, c.versus_metric, *sides, c.expect, c.margin, c.better])


def claim_rows(table: Table, results: list[ClaimResult]) -> list[dict]:
    """claims.json: each claim, its verdict and the test it came from."""
    rows = []
    for r in results:
        c = r.claim
        rows.append({
            "suite": table.suite.name, "claim": c.text, "metric": c.metric, "arms": f"{r.arms[0]} vs {r.arms[1]}",
            "expect": c.expect, "margin": c.margin, "smallest_effect": c.smallest_effect,
            "min_effect": c.min_effect, "estimate": r.estimate, "ci": list(r.ci), "p": r.p,
            "p_holm_suite": r.p_adjusted, "p_holm": r.p_adjusted, "outcome": r.outcome, "statement": r.statement,
            "mde": r.mde, "seeds_needed": r.seeds_needed, "narang": r.narang, "note": r.note,
            "calibration": r.calibration, "shared_with": [], "key": claim_key(table, r),
            "test": dataclasses.asdict(r.test) if r.test is not None else None})
    return rows


# ------------------------------------------------------------------------------------------ files
def write_record(record: Record, results: list[ClaimResult], suite_path: str | Path | None = None) -> None:
    """The record's files (module doc) in its folder; `suite_path`: the suite file to snapshot (default the
    suite's own path)."""
    folder = record.folder
    folder.mkdir(parents=True, exist_ok=True)
    record.table.write(folder, record.suite.measures)
    source = Path(suite_path or record.suite.path)
    if source.is_file() and source.resolve() != (folder / SUITE_FILE).resolve():
        text = source.read_text(encoding="utf-8")
        tree = yaml.safe_load(text)
        if record.suite.screening.get("fold_over") and not tree["design"].get("fold_over"):
            tree["design"]["fold_over"] = True  # folded over from the command line: the snapshot says so
            text = yaml.safe_dump(tree, sort_keys=False)
        (folder / SUITE_FILE).write_text(text, encoding="utf-8")
    configs = {arm: {"config": config_hash(c), **c} for arm, c in record.configs.items()}
    (folder / CONFIGS).write_text(yaml.safe_dump(configs, sort_keys=False), encoding="utf-8")
    (folder / PROVENANCE).write_text(json.dumps(record.provenance, indent=1, default=str), encoding="utf-8")
    (folder / CLAIMS).write_text(json.dumps(claim_rows(record.table, results), indent=1), encoding="utf-8")


def read_record(folder: str | Path) -> Record:
    """A page's record from its files alone (module doc)."""
    folder = Path(folder)
    missing = [n for n in (SUITE_FILE, PROVENANCE, "results.csv") if not (folder / n).is_file()]
    if missing:
        raise ValueError(f"{folder} is not a lab record: it lacks {', '.join(missing)} (written by `archlab ablate` "
                         "since the provenance rule, and by scripts/publish_results.py)")
    provenance = json.loads((folder / PROVENANCE).read_text(encoding="utf-8"))
    budget = BUDGETS[provenance["budget"]]
    suite = at_budget(load_suite(folder / SUITE_FILE), budget)
    configs = yaml.safe_load((folder / CONFIGS).read_text(encoding="utf-8")) if (folder / CONFIGS).is_file() else {}
    table = Table.read(folder, suite, provenance.get("seeds"))
    return Record(table, budget, folder, provenance, configs or {})


def stamp(base: dict, **extra: object) -> dict:
    """Provenance fields every record carries, filled now: when, the code, the versions."""
    return {**base, **extra, "judged_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "judged_by": {**source_state(), **versions()}}


# ------------------------------------------------------------------------------------------ verify
def _close(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=1e-300)


def differences(expected: list[dict], actual: list[dict], alone: bool = True) -> list[str]:
    """Every claim whose outcome, estimate, p, Holm p or plan differs between two claims.json row lists. `alone`:
    `actual` was judged from one folder, so a comparison the page shares with another (`shared_with`) is checked
    on its own family's figures (p_holm_suite, seeds_needed_suite, mde_suite); its one verdict across pages is
    `archlab.lab.publishing.publish.check`'s to recompute."""
    out = []
    now = {r["claim"]: r for r in actual}
    for old in expected:
        new = now.get(old["claim"])
        if new is None:
            out.append(f"{old['claim']!r}: not in the recomputed claims")
            continue
        own = alone and bool(old.get("shared_with"))
        exact = {"seeds_needed": old.get("seeds_needed_suite", old.get("seeds_needed")) if own else
                 old.get("seeds_needed")}
        if not own:
            exact["outcome"] = old.get("outcome")
        close = {"estimate": old.get("estimate"), "p": old.get("p"), "p_holm_suite": old.get("p_holm_suite"),
                 "mde": old.get("mde_suite", old.get("mde")) if own else old.get("mde")}
        for key, value in exact.items():
            if value != new.get(key):
                out.append(f"{old['claim']!r}: {key} {value!r} recomputed as {new.get(key)!r}")
        for key, value in close.items():
            if not _close(_num(value), _num(new.get(key))):
                out.append(f"{old['claim']!r}: {key} {value!r} recomputed as {new.get(key)!r}")
    extra = set(now) - {r["claim"] for r in expected}
    out += [f"{name!r}: recomputed but not in claims.json" for name in sorted(extra)]
    return out


def _num(x: object) -> float | None:
    return None if x is None else float(x)  # type: ignore[arg-type]


def rejudge(folder: str | Path) -> tuple[Record, list[ClaimResult]]:
    record = read_record(folder)
    return record, judge(record.table)


def verify(folder: str | Path) -> list[str]:
    """The differences between a folder's claims.json and its verdicts recomputed from its files (none: [])."""
    record, results = rejudge(folder)
    path = Path(folder) / CLAIMS
    if not path.is_file():
        return [f"{path} does not exist"]
    return differences(json.loads(path.read_text(encoding="utf-8")), claim_rows(record.table, results))


def median_run_s(walls: list[float]) -> float | None:
    walls = sorted(w for w in walls if w > 0)
    return statistics.median(walls) if walls else None


def runs_of_table(table: Table) -> list[Run]:
    return [r for arm in table.suite.arms for r in table.runs.get(arm.name, [])]

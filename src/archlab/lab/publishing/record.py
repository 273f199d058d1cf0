"""A suite's record: everything a page needs to be recomputed by one command, and where
it came from.

The report writes, beside results.md in the suite's folder (and `scripts/publish_results.py`
copies to docs/results/SUITE/):

- results.csv, items.csv, timings.csv: the measured values (lab/analysis/table.py);
- suite.yaml: the suite file as judged (claims, margins, groups), so a later edit of the built-in
  suite does not change what the page's verdicts were computed from;
- configs.yaml: each arm's resolved config (train and model, seed 0's; the seed and the run folder
  aside) and its hash, the `config` column of results.csv;
- provenance.json: the git commit of the code that trained (and a dirty flag), archlab / torch /
  numpy / scipy / statsmodels / Python versions, the machine, a hash of each prepared data folder,
  the exact command, the budget and seeds, the scale (parameters, training tokens, tokens per
  parameter), the wall time, each arm's overrides and parameter matching, and what the loss margin
  is worth in compute;
- claims.json: every claim's verdict as computed, which the verifier recomputes from
  the files above;
- registration.json: the claims as registered before the plan's
  first run (lab/spec/registration.py);
- record.sha256: each of these files' sha256, and the plots' (`sha256sum -c
  record.sha256` reads it).

`differences` compares two claims.json row lists field by field (numbers to 1e-9 relative, every
word exactly), `registered_differences` the claims judged with the registration, `hash_differences`
the files with record.sha256; lab/publishing/verify.py (`archlab ablate --verify DIR`) puts them
together with the pages rendered again.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

import yaml

from archlab.lab.analysis.table import Run, Table
from archlab.lab.analysis.verdicts import ClaimResult, judge
from archlab.lab.spec import registration
from archlab.lab.spec.budgets import BUDGETS, Budget
from archlab.lab.spec.registration import REGISTRATION
from archlab.lab.spec.suite import Suite, at_budget
from archlab.lab.spec.suite_file import load_suite
from archlab.train import provenance as train_provenance

SUITE_FILE, CONFIGS, PROVENANCE, CLAIMS = (
    "suite.yaml",
    "configs.yaml",
    "provenance.json",
    "claims.json",
)
# a published page's reading of its numbers, by a person: kept across rebuilds
READING = "reading.md"
# the first lab's verdicts of a suite (Welch's test and a noise floor), kept
FIRST_RULE = "first-rule.json"
# the verdicts under the rule before this one (pooled residual, 0.09 nats)
PREVIOUS_RULE = "previous-rule.json"
# the verdicts of a page re-judged after its runs, kept when a registered re-run replaces it
REJUDGED = "rejudged.json"
# each record file's sha256, in `sha256sum` format (`sha256sum -c record.sha256`)
HASHES = "record.sha256"
# the files a record is, in the order record.sha256 lists them; then its plots (*.png)
RECORD_FILES = (
    "results.csv",
    "items.csv",
    "timings.csv",
    SUITE_FILE,
    CONFIGS,
    PROVENANCE,
    CLAIMS,
    REGISTRATION,
    READING,
    FIRST_RULE,
    PREVIOUS_RULE,
    REJUDGED,
)
# verify: estimates and p-values agree to this relative tolerance (float64 sums in another order)
REL_TOL = 1e-9


@dataclass
class Record:
    """A suite's table with its budget, provenance and configs (module doc)."""

    table: Table
    budget: Budget
    folder: Path
    provenance: dict
    configs: dict[str, dict]
    # registration.json (lab/spec/registration.py); None: made before registrations
    registration: dict | None = None

    @property
    def suite(self) -> Suite:
        return self.table.suite


# --------------------------------------------------------------------------------------- provenance
def versions() -> dict:
    """The versions of what computed the numbers: the training software's (train/provenance.py)
    and the statistics'."""
    import numpy
    import scipy
    import statsmodels

    return {
        **train_provenance.versions(),
        "numpy": numpy.__version__,
        "scipy": scipy.__version__,
        "statsmodels": statsmodels.__version__,
    }


def config_hash(config: dict) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:16]


def portable_config(config: dict) -> dict:
    """A run's config.json without what differs between its seeds or machines: the seed, the run
    folder, and the data folder's location (its name stays)."""
    train = {k: v for k, v in config["train"].items() if k not in ("out", "seed")}
    data = dict(train.get("data", {}))
    if "source" in data:
        data["source"] = Path(str(data["source"])).name
    return {"train": {**train, "data": data}, "model": config["model"]}


def scale(table: Table, configs: dict[str, dict]) -> dict:
    """The base arm's parameters, training tokens and tokens per parameter, and a sentence a
    reader can weigh."""
    base = table.suite.base_arm.name
    params = next((r.parameters for r in table.runs.get(base, []) if r.parameters), None)
    train = configs.get(base, {}).get("train", {})
    data, optimizer = train.get("data", {}), train.get("optimizer", {})
    tokens = (
        int(train.get("steps", 0))
        * int(data.get("batch_size", 0))
        * int(data.get("block_size", 0))
        * int(optimizer.get("grad_accum", 1) or 1)
    )
    if not params or not tokens:
        return {}
    ratio = tokens / params
    stage = (
        "early-training verdicts (far below the ~20 tokens per parameter "
        "of compute-optimal training)"
        if ratio < 5
        else "verdicts below compute-optimal training"
        if ratio < 20
        else "past compute-optimal"
    )
    return {
        "parameters": params,
        "training_tokens": tokens,
        "tokens_per_parameter": round(ratio, 3),
        "text": f"the base arm has {params / 1e6:.2f}M parameters and trains on "
        f"{tokens / 1e6:.2f}M tokens ({ratio:.2f} tokens per parameter): {stage}",
    }


# ------------------------------------------------------------------------------------------ claims
def claim_key(table: Table, result: ClaimResult) -> str:
    """A comparison's identity across suites: the metric, the run folders on both sides,
    the test's kind."""
    c = result.claim
    if table.suite.timing(c) is not None:  # a timing is its own experiment, never another suite's
        return json.dumps([table.suite.name, c.metric, c.arm, c.versus])
    sides = [
        sorted(rid for arm in side.split(" + ") for rid in table.run_ids(arm))
        if c.factor is None
        else sorted(rid for arm in table.suite.cells(c, level) for rid in table.run_ids(arm))
        for side, level in zip(result.arms, (c.arm, c.versus), strict=True)
    ]
    return json.dumps([c.metric, c.versus_metric, *sides, c.expect, c.margin, c.better])


def claim_rows(table: Table, results: list[ClaimResult]) -> list[dict]:
    """claims.json: each claim, its verdict and the test it came from."""
    rows = []
    for r in results:
        c = r.claim
        rows.append(
            {
                "suite": table.suite.name,
                "claim": c.text,
                "metric": c.metric,
                "arms": f"{r.arms[0]} vs {r.arms[1]}",
                "expect": c.expect,
                "margin": c.margin,
                "smallest_effect": c.smallest_effect,
                "min_effect": c.min_effect,
                "estimate": r.estimate,
                "ci": list(r.ci),
                "p": r.p,
                "p_holm_suite": r.p_adjusted,
                "p_holm": r.p_adjusted,
                "outcome": r.outcome,
                "statement": r.statement,
                "mde": r.mde,
                "seeds_needed": r.seeds_needed,
                "narang": r.narang,
                "note": r.note,
                "calibration": r.calibration,
                "shared_with": [],
                "key": claim_key(table, r),
                "test": dataclasses.asdict(r.test) if r.test is not None else None,
            }
        )
    return rows


# ------------------------------------------------------------------------------------------ files
def write_record(
    record: Record, results: list[ClaimResult], suite_path: str | Path | None = None
) -> None:
    """The record's files (module doc) in its folder; `suite_path`: the suite file to snapshot
    (default the suite's own path)."""
    folder = record.folder
    folder.mkdir(parents=True, exist_ok=True)
    record.table.write(folder, record.suite.measures)
    source = Path(suite_path or record.suite.path)
    if source.is_file() and source.resolve() != (folder / SUITE_FILE).resolve():
        text = source.read_text(encoding="utf-8")
        tree = yaml.safe_load(text)
        if record.suite.screening.get("fold_over") and not tree["design"].get("fold_over"):
            # folded over from the command line: the snapshot says so
            tree["design"]["fold_over"] = True
            text = yaml.safe_dump(tree, sort_keys=False)
        (folder / SUITE_FILE).write_text(text, encoding="utf-8")
    configs = {arm: {"config": config_hash(c), **c} for arm, c in record.configs.items()}
    (folder / CONFIGS).write_text(yaml.safe_dump(configs, sort_keys=False), encoding="utf-8")
    (folder / PROVENANCE).write_text(
        json.dumps(record.provenance, indent=1, default=str), encoding="utf-8"
    )
    (folder / CLAIMS).write_text(
        json.dumps(claim_rows(record.table, results), indent=1), encoding="utf-8"
    )
    if record.registration is not None:
        (folder / REGISTRATION).write_text(
            json.dumps(record.registration, indent=1), encoding="utf-8"
        )
    write_hashes(folder)


def read_record(folder: str | Path) -> Record:
    """A page's record from its files alone (module doc)."""
    folder = Path(folder)
    missing = [n for n in (SUITE_FILE, PROVENANCE, "results.csv") if not (folder / n).is_file()]
    if missing:
        raise ValueError(
            f"{folder} is not a lab record: it lacks {', '.join(missing)} (written by `archlab "
            "ablate` since the provenance rule, and by scripts/publish_results.py)"
        )
    provenance = json.loads((folder / PROVENANCE).read_text(encoding="utf-8"))
    budget = BUDGETS[provenance["budget"]]
    suite = at_budget(load_suite(folder / SUITE_FILE), budget)
    configs = (
        yaml.safe_load((folder / CONFIGS).read_text(encoding="utf-8"))
        if (folder / CONFIGS).is_file()
        else {}
    )
    table = Table.read(folder, suite, provenance.get("seeds"))
    return Record(
        table, budget, folder, provenance, configs or {}, registration.read(folder / REGISTRATION)
    )


def stamp(base: dict, **extra: object) -> dict:
    """Provenance fields every record carries, filled now: when, the code, the versions."""
    return {
        **base,
        **extra,
        "judged_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "judged_by": {**train_provenance.source_state(), **versions()},
    }


# -------------------------------------------------------------------------------- the record's hash
def record_files(folder: Path) -> list[str]:
    """The record's files in `folder` (RECORD_FILES that exist, then its plots)."""
    return [n for n in RECORD_FILES if (folder / n).is_file()] + sorted(
        p.name for p in folder.glob("*.png")
    )


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_hashes(folder: Path) -> str:
    """Write record.sha256 (each record file's sha256) into `folder`; returns its own
    sha256, the record's."""
    text = "".join(f"{_sha256(folder / name)}  {name}\n" for name in record_files(folder))
    (folder / HASHES).write_text(text, encoding="utf-8")
    return hashlib.sha256(text.encode()).hexdigest()


def record_digest(folder: Path) -> str | None:
    """The sha256 of the record's record.sha256 as it is on disk (None where it has none): one hash
    that moves with any byte of the record."""
    path = folder / HASHES
    return _sha256(path) if path.is_file() else None


def hash_differences(folder: Path) -> list[str]:
    """Each record file whose bytes are not the ones record.sha256 holds: changed, missing,
    or never hashed."""
    path = folder / HASHES
    if not path.is_file():
        return [f"{path} does not exist: the record was never hashed"]
    held = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        digest, _, name = line.partition("  ")
        held[name] = digest
    now = {name: _sha256(folder / name) for name in record_files(folder)}
    out = [
        f"{HASHES}: {name} changed since the record was hashed"
        for name in held
        if name in now and now[name] != held[name]
    ]
    out += [f"{HASHES}: {name} is missing" for name in held if name not in now]
    out += [f"{HASHES}: {name} was never hashed" for name in now if name not in held]
    return out


# ------------------------------------------------------------------------------------------ verify
def _close(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=1e-300)


# a claims.json row's fields that one verdict across pages sets (publishing/books.py `unify`):
# a folder verified alone checks a shared comparison on its own family's figures instead
# (the *_suite fields)
UNIFIED = ("outcome", "statement", "note", "p_holm", "seeds_needed", "mde", "shared_with", "test")
# the own family's figure -> its field alone
OWN = {"seeds_needed_suite": "seeds_needed", "mde_suite": "mde"}


def _diff(path: str, a: object, b: object) -> list[str]:
    """Where two JSON values differ: numbers to REL_TOL (float64 sums in another order),
    the rest exactly."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [
            d for k in dict.fromkeys([*a, *b]) for d in _diff(f"{path}.{k}", a.get(k), b.get(k))
        ]
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _diff(f"{path}[{i}]", x, y)]
    numbers = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (a, b))
    return (
        []
        if (_close(float(a), float(b)) if numbers else a == b)
        else [f"{path} {a!r} recomputed as {b!r}"]
    )


def differences(expected: list[dict], actual: list[dict], alone: bool = True) -> list[str]:
    """Every field of every claim that differs between two claims.json row lists: the verdict, its
    numbers, the statement and every other word a page shows. `alone`: `actual` was judged from
    one folder, so a comparison the page shares with another (`shared_with`) is checked on its own
    family's figures (p_holm_suite, seeds_needed_suite, mde_suite); its one verdict across pages is
    `archlab.lab.publishing.publish.check`'s to recompute."""
    out = []
    now = {r["claim"]: r for r in actual}
    for old in expected:
        new = now.get(old["claim"])
        if new is None:
            out.append(f"{old['claim']!r}: not in the recomputed claims")
            continue
        if alone and old.get("shared_with"):
            old = {k: v for k, v in old.items() if k not in UNIFIED and k not in OWN} | {
                field: old[own] for own, field in OWN.items() if own in old
            }
            new = {k: v for k, v in new.items() if k not in UNIFIED} | {
                field: new.get(field) for field in OWN.values()
            }
        out += [
            f"{old['claim']!r}: {line[1:]}"
            for key in dict.fromkeys([*old, *new])
            for line in _diff(f".{key}", old.get(key), new.get(key))
        ]
    extra = set(now) - {r["claim"] for r in expected}
    out += [f"{name!r}: recomputed but not in claims.json" for name in sorted(extra)]
    return out


def rejudge(folder: str | Path) -> tuple[Record, list[ClaimResult]]:
    record = read_record(folder)
    return record, judge(record.table)


def registered_differences(record: Record) -> list[str]:
    """Each claim the record judges that is not the one its last
    registration holds (lab/spec/registration.py)."""
    last = registration.latest(record.registration)
    if last is None:
        return []
    return [
        f"registration.json: {line}"
        for line in registration.differences(last["claims"], registration.claims_of(record.suite))
    ]


def median_run_s(walls: list[float]) -> float | None:
    walls = sorted(w for w in walls if w > 0)
    return statistics.median(walls) if walls else None


def runs_of_table(table: Table) -> list[Run]:
    return [r for arm in table.suite.arms for r in table.runs.get(arm.name, [])]

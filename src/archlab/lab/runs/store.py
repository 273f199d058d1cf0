"""The run store: where a run's folder is (a hash of what it trains) and when a stored run
may be reused.

A run's folder is STORE/<run_hash>: a content hash of its resolved config (train and model, seed
included, without its folder) over the fields that differ from the config classes' defaults, the
budget's measurement settings, and STORE_VERSION. A new field at its default changes no key; the
data folder enters by its name in the store, so the store can be moved or copied whole (version
2; version-1 stores keyed it by its absolute path, and `link_legacy` links their runs under
today's key). A finished run is reused only as the config it trained: `stale_reason` says when its
config.json resolves, under today's code, to another config (a changed default, a removed field),
and `set_aside` moves it to STORE/stale/ so it trains again; nothing is deleted.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Protocol

from archlab.lab.spec.budgets import Budget
from archlab.nn.config import ModelConfig
from archlab.train.config import TrainConfig, resolve_config


class StoredRun(Protocol):
    """What the store reads of a planned run (lab/runs/plan.py RunSpec)."""

    run_dir: Path
    keys: dict[str, str]

    def configs(self) -> tuple[TrainConfig, ModelConfig]: ...


# 2: the data folder enters by its name in the store, not its absolute path (a store can move)
STORE_VERSION = 2
# STORE/stale/: runs whose resolved config differs under today's code, moved aside, never deleted
STALE = "stale"


def _non_default(values: dict, defaults: dict) -> dict:
    """The entries of `values` that differ from `defaults`, nested dicts compared key by key."""
    out = {}
    for key, value in values.items():
        if isinstance(value, dict) and isinstance(defaults.get(key), dict):
            value = _non_default(value, defaults[key])
            if value:
                out[key] = value
        elif key not in defaults or value != defaults[key]:
            out[key] = value
    return out


def run_hash(
    keys: dict[str, str], budget: Budget, store: Path | None = None, version: int | None = None
) -> str:
    """`run_key` of the configs `keys` (a run's dotted keys, its folder aside) resolve to."""
    train, model = resolve_config([{k: v for k, v in keys.items() if k != "out"}])
    return run_key(train, model, budget, store, version)


def run_key(
    train: TrainConfig,
    model: ModelConfig,
    budget: Budget,
    store: Path | None = None,
    version: int | None = None,
) -> str:
    """A content hash of a run's resolved config (train and model, without its folder) and the
    budget's measurement settings: two suites that ask for the same run get the same folder. Only
    fields that differ from the config classes' defaults enter it, so a new field (default: off)
    keeps every stored run; a data folder inside `store` enters by its name there, so the store can
    be moved or copied whole. A changed default is caught when the run is reused (`stale_reason`).
    `version=1` is the key of stores written before (the data folder's absolute path), which
    `plan_suite` links to."""
    version = STORE_VERSION if version is None else version
    train_dict = {k: v for k, v in train.to_dict().items() if k != "out"}
    source = Path(str(train.data.source))
    if version >= 2 and store is not None and source.parent == Path(store) / "data":
        train_dict["data"] = {**train_dict["data"], "source": f"STORE/data/{source.name}"}
    record = {
        "train": _non_default(train_dict, TrainConfig().to_dict()),
        "model": _non_default(model.to_flat_dict(), ModelConfig().to_flat_dict()),
        "measure_windows": budget.measure_windows,
        "store_version": version,
    }
    return hashlib.sha256(json.dumps(record, sort_keys=True, default=str).encode()).hexdigest()[:16]


# what a run shows people, not what it trains or the lab measures: a changed default here never
# makes a run stale
REUSE_IGNORES = {
    "logging": (
        "samples",
        "sample_tokens",
        "sample_prompt",
        "temperature",
        "tensorboard",
        "progress",
    )
}


def _comparable(train: TrainConfig, model: ModelConfig) -> dict:
    """A resolved config as reuse compares it: the run folder aside, the data folder by
    name, REUSE_IGNORES out."""
    t = {k: v for k, v in train.to_dict().items() if k != "out"}
    t["data"] = {**t["data"], "source": Path(str(train.data.source)).name}
    for section, keys in REUSE_IGNORES.items():
        t[section] = {k: v for k, v in t[section].items() if k not in keys}
    return {"train": t, "model": model.to_dict()}


def stale_reason(run: StoredRun) -> str | None:
    """Why a stored run may not be reused for `run` (its config.json resolves, under today's code,
    to another config than `run` asks for: a changed default, a removed field), or None when it may
    (or has no config)."""
    path = run.run_dir / "config.json"
    if not path.is_file():
        return None
    stored = json.loads(path.read_text(encoding="utf-8"))
    try:
        old = _comparable(*resolve_config([{}], saved=stored))
    except (ValueError, KeyError, TypeError) as err:
        return f"its config.json no longer resolves ({err})"
    new = _comparable(*run.configs())
    for part in ("train", "model"):
        for key in sorted(set(old[part]) | set(new[part])):
            if old[part].get(key) != new[part].get(key):
                return (
                    f"{part}.{key} is {old[part].get(key)!r} in the stored "
                    f"run, {new[part].get(key)!r} now"
                )
    return None


def set_aside(run: StoredRun) -> Path:
    """Move a stale run to STORE/stale/ (nothing is deleted), so its folder trains anew; returns
    where it went."""
    target = run.run_dir.parent / STALE / f"{run.run_dir.name}-{time.strftime('%Y%m%dT%H%M%S')}"
    target.parent.mkdir(parents=True, exist_ok=True)
    os.rename(run.run_dir.resolve() if run.run_dir.is_symlink() else run.run_dir, target)
    if run.run_dir.is_symlink():
        run.run_dir.unlink()
    return target


def link_legacy(run_dir: Path, train: TrainConfig, model: ModelConfig, budget: Budget) -> None:
    """A run a store of STORE_VERSION 1 holds (keyed by the data folder's absolute path) under
    today's key: a relative symlink, so the store keeps its folders and its old suites their links.
    `train` and `model` are the run's resolved configs (its folder aside)."""
    if run_dir.exists() or run_dir.is_symlink():
        return
    legacy = run_dir.parent / run_key(train, model, budget, version=1)
    if legacy.is_dir() and not legacy.is_symlink():
        run_dir.symlink_to(legacy.name, target_is_directory=True)

"""The run store (archlab.lab.store): keys that survive a new default-off field and a moved store, version-1
stores linked under today's keys, and stored runs with another config set aside, never reused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from archlab.lab.budgets import BUDGETS
from archlab.lab.plan import plan_suite
from archlab.lab.suite_file import load_suite


def test_a_store_moves_whole_and_a_version_1_store_keeps_its_runs(tmp_path: Path) -> None:
    from archlab.lab import store

    suite = load_suite("heads")
    here = plan_suite(suite, BUDGETS["tiny"], tmp_path / "a", store=tmp_path / "store")
    there = plan_suite(suite, BUDGETS["tiny"], tmp_path / "b", store=tmp_path / "moved" / "elsewhere")
    assert [r.run_dir.name for r in here.runs] == [r.run_dir.name for r in there.runs]  # keyed by the data's name
    run = here.runs[0]
    v1 = store.run_hash(run.keys, BUDGETS["tiny"], version=1)  # the absolute data path: another key per store
    assert v1 != run.run_dir.name != store.run_hash(run.keys, BUDGETS["tiny"], tmp_path / "store", version=1)
    legacy = tmp_path / "store" / v1  # a run a version-1 store holds: linked under today's key, not moved
    legacy.mkdir(parents=True)
    (legacy / "metrics.jsonl").write_text("{}\n")
    again = plan_suite(suite, BUDGETS["tiny"], tmp_path / "c", store=tmp_path / "store").runs[0]
    assert again.run_dir.is_symlink() and again.run_dir.resolve() == legacy.resolve()
    assert (again.run_dir / "metrics.jsonl").read_text() == "{}\n"


def test_a_stored_run_with_another_config_is_set_aside_never_reused(tmp_path: Path) -> None:
    from archlab.lab import collect, runner, store
    from archlab.train.config import resolve_config

    plan = plan_suite(load_suite("heads"), BUDGETS["tiny"], tmp_path / "out", seeds=2)
    run = plan.runs[0]
    train, model = resolve_config([run.keys])
    run.run_dir.mkdir(parents=True)
    config = {"train": train.to_dict(), "model": model.to_dict()}
    (run.run_dir / "config.json").write_text(json.dumps(config))
    assert store.stale_reason(run) is None  # the same config: reused
    shown = {**config, "train": {**config["train"], "logging": {**config["train"]["logging"], "sample_tokens": 48,
                                                                 "tensorboard": True}}}
    (run.run_dir / "config.json").write_text(json.dumps(shown))
    assert store.stale_reason(run) is None  # what a run shows people (samples, TensorBoard) does not count
    old = {**config, "model": {**config["model"], "d_ff": config["model"]["d_ff"] + 8}}
    (run.run_dir / "config.json").write_text(json.dumps(old))  # as if a default had changed since it trained
    why = store.stale_reason(run)
    assert why == f"model.d_ff is {old['model']['d_ff']} in the stored run, {config['model']['d_ff']} now"
    (run.run_dir / "checkpoints" / f"step_{run.steps:07d}").mkdir(parents=True)
    (run.run_dir / "metrics.jsonl").write_text("{}\n")
    for other in plan.runs[1:]:
        other.run_dir.mkdir(parents=True, exist_ok=True)
        (other.run_dir / "checkpoints" / f"step_{other.steps:07d}").mkdir(parents=True, exist_ok=True)
        (other.run_dir / "metrics.jsonl").write_text("{}\n")
    with pytest.raises(runner.LabError, match=r"not reused: mha/seed0 \(model.d_ff is"):
        collect.measure_plan(plan)
    removed = {**config, "model": {**config["model"], "a_field_since_removed": 1}}
    (run.run_dir / "config.json").write_text(json.dumps(removed))
    assert store.stale_reason(run).startswith("its config.json no longer resolves")
    moved = store.set_aside(run)
    assert not run.run_dir.exists() and moved.parent == run.run_dir.parent / "stale"
    assert (moved / "metrics.jsonl").read_text() == "{}\n"  # nothing lost


def test_a_new_default_off_field_keeps_every_stored_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run folders hash only what differs from the config classes' defaults: a field added later (default off)
    leaves every stored run where it was, while the same field switched on is another run."""
    import dataclasses

    from archlab.lab import store
    from archlab.nn import config as nn_config

    suite = load_suite("heads")
    before = [r.run_dir for r in plan_suite(suite, BUDGETS["tiny"], tmp_path / "a").runs]
    real = nn_config.ModelConfig.to_dict

    def with_new_field(self):  # a future ModelConfig field, at its default on every config
        return {**real(self), "future_switch": getattr(self, "_future", False)}

    monkeypatch.setattr(nn_config.ModelConfig, "to_dict", with_new_field)
    after = [r.run_dir for r in plan_suite(suite, BUDGETS["tiny"], tmp_path / "b").runs]
    assert after == before
    on = dataclasses.replace(nn_config.ModelConfig())
    object.__setattr__(on, "_future", True)
    assert store._non_default(on.to_dict(), nn_config.ModelConfig().to_dict()) == {"future_switch": True}
    assert store._non_default({"a": {"b": 1, "c": 2}, "d": 3}, {"a": {"b": 1, "c": 0}, "d": 3}) == {"a": {"c": 2}}
    monkeypatch.setattr(store, "STORE_VERSION", store.STORE_VERSION + 1)  # a changed default moves every run
    moved = [r.run_dir for r in plan_suite(suite, BUDGETS["tiny"], tmp_path / "c").runs]
    assert not set(moved) & set(before)

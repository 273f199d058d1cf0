"""The run store (archlab.lab.runs.store): keys that survive a new default-off field and a moved
store, version-1 stores linked under today's keys, and stored runs with another config set
aside, never reused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from archlab.lab.runs.plan import plan_suite
from archlab.lab.spec.budgets import BUDGETS
from archlab.lab.spec.suite_file import load_suite


def test_a_store_moves_whole_and_a_version_1_store_keeps_its_runs(tmp_path: Path) -> None:
    from archlab.lab.runs import store

    suite = load_suite("heads")
    here = plan_suite(suite, BUDGETS["tiny"], tmp_path / "a", store=tmp_path / "store")
    there = plan_suite(
        suite, BUDGETS["tiny"], tmp_path / "b", store=tmp_path / "moved" / "elsewhere"
    )
    # keyed by the data's name
    assert [r.run_dir.name for r in here.runs] == [r.run_dir.name for r in there.runs]
    run = here.runs[0]
    # the absolute data path: another key per store
    v1 = store.run_hash(run.keys, BUDGETS["tiny"], version=1)
    assert (
        v1
        != run.run_dir.name
        != store.run_hash(run.keys, BUDGETS["tiny"], tmp_path / "store", version=1)
    )
    # a run a version-1 store holds: linked under today's key, not moved
    legacy = tmp_path / "store" / v1
    legacy.mkdir(parents=True)
    (legacy / "metrics.jsonl").write_text("{}\n")
    again = plan_suite(suite, BUDGETS["tiny"], tmp_path / "c", store=tmp_path / "store").runs[0]
    assert again.run_dir.is_symlink() and again.run_dir.resolve() == legacy.resolve()
    assert (again.run_dir / "metrics.jsonl").read_text() == "{}\n"


def test_a_stored_run_with_another_config_is_set_aside_never_reused(tmp_path: Path) -> None:
    from archlab.lab.runs import collect, runner, store
    from archlab.train.config import resolve_config

    plan = plan_suite(load_suite("heads"), BUDGETS["tiny"], tmp_path / "out", seeds=2)
    run = plan.runs[0]
    train, model = resolve_config([run.keys])
    run.run_dir.mkdir(parents=True)
    config = {"train": train.to_dict(), "model": model.to_dict()}
    (run.run_dir / "config.json").write_text(json.dumps(config))
    assert store.stale_reason(run) is None  # the same config: reused
    shown = {
        **config,
        "train": {
            **config["train"],
            "logging": {**config["train"]["logging"], "sample_tokens": 48, "tensorboard": True},
        },
    }
    (run.run_dir / "config.json").write_text(json.dumps(shown))
    # what a run shows people (samples, TensorBoard) does not count
    assert store.stale_reason(run) is None
    old = {**config, "model": {**config["model"], "d_ff": config["model"]["d_ff"] + 8}}
    # as if a default had changed since it trained
    (run.run_dir / "config.json").write_text(json.dumps(old))
    why = store.stale_reason(run)
    assert (
        why
        == f"model.d_ff is {old['model']['d_ff']} in the stored run, {config['model']['d_ff']} now"
    )
    (run.run_dir / "checkpoints" / f"step_{run.steps:07d}").mkdir(parents=True)
    (run.run_dir / "metrics.jsonl").write_text("{}\n")
    for other in plan.runs[1:]:
        other.run_dir.mkdir(parents=True, exist_ok=True)
        (other.run_dir / "checkpoints" / f"step_{other.steps:07d}").mkdir(
            parents=True, exist_ok=True
        )
        (other.run_dir / "metrics.jsonl").write_text("{}\n")
    with pytest.raises(runner.LabError, match=r"not reused: mha/seed0 \(model.d_ff is"):
        collect.measure_plan(plan)
    removed = {**config, "model": {**config["model"], "a_field_since_removed": 1}}
    (run.run_dir / "config.json").write_text(json.dumps(removed))
    assert store.stale_reason(run).startswith("its config.json no longer resolves")
    moved = store.set_aside(run)
    assert not run.run_dir.exists() and moved.parent == run.run_dir.parent / "stale"
    assert (moved / "metrics.jsonl").read_text() == "{}\n"  # nothing lost


def test_a_new_default_off_field_keeps_every_stored_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run folders hash only what differs from the config classes' defaults: a field added
    later (default off) leaves every stored run where it was, while the same field switched on
    is another run."""
    import dataclasses

    from archlab.lab.runs import store
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
    assert store._non_default(on.to_dict(), nn_config.ModelConfig().to_dict()) == {
        "future_switch": True
    }
    assert store._non_default({"a": {"b": 1, "c": 2}, "d": 3}, {"a": {"b": 1, "c": 0}, "d": 3}) == {
        "a": {"c": 2}
    }
    # a changed default moves every run
    monkeypatch.setattr(store, "STORE_VERSION", store.STORE_VERSION + 1)
    moved = [r.run_dir for r in plan_suite(suite, BUDGETS["tiny"], tmp_path / "c").runs]
    assert not set(moved) & set(before)


def test_a_run_of_a_moved_store_is_not_stale_but_another_data_folder_is(tmp_path: Path) -> None:
    """A store copied elsewhere holds runs whose config.json names the data folder (and the run
    folder) where they trained: reuse compares the data folder by its name, so the moved runs are
    reused; a data folder of another name is another corpus, and stale."""
    from archlab.lab.runs import store
    from archlab.train.config import resolve_config

    plan = plan_suite(
        load_suite("heads"), BUDGETS["tiny"], tmp_path / "out", store=tmp_path / "moved" / "store"
    )
    run = plan.runs[0]
    train, model = resolve_config([run.keys])
    data = Path(train.data.source)
    # the plan's data folder sits in its store
    assert data.parent == tmp_path / "moved" / "store" / "data"
    config = {"train": train.to_dict(), "model": model.to_dict()}
    before = tmp_path / "before" / "store"
    # where it trained, before the store moved
    config["train"]["out"] = str(before / run.run_dir.name)
    config["train"]["data"]["source"] = str(before / "data" / data.name)
    run.run_dir.mkdir(parents=True)
    (run.run_dir / "config.json").write_text(json.dumps(config))
    assert store.stale_reason(run) is None
    config["train"]["data"]["source"] = str(before / "data" / f"{data.name}-other")
    (run.run_dir / "config.json").write_text(json.dumps(config))
    why = store.stale_reason(run)
    assert why is not None and why.startswith("train.data is ") and f"'{data.name}-other'" in why


def test_setting_aside_a_linked_run_leaves_no_link_so_the_run_trains_there_again(
    tmp_path: Path,
) -> None:
    """A version-1 run linked under today's key, then found stale: the folder it links to moves
    to STORE/stale/ and the link goes too, so the run's folder can be made anew (a dangling link
    would refuse mkdir)."""
    from archlab.lab.runs import store

    suite = load_suite("heads")
    run = plan_suite(suite, BUDGETS["tiny"], tmp_path / "a", store=tmp_path / "store").runs[0]
    legacy = tmp_path / "store" / store.run_hash(run.keys, BUDGETS["tiny"], version=1)
    legacy.mkdir(parents=True)
    (legacy / "metrics.jsonl").write_text("{}\n")
    linked = plan_suite(suite, BUDGETS["tiny"], tmp_path / "b", store=tmp_path / "store").runs[0]
    assert linked.run_dir == run.run_dir and linked.run_dir.is_symlink()
    moved = store.set_aside(linked)
    assert (
        moved.parent == tmp_path / "store" / "stale"
        and (moved / "metrics.jsonl").read_text() == "{}\n"
    )
    assert not moved.is_symlink() and not legacy.exists()  # the folder itself moved, not the link
    assert not linked.run_dir.is_symlink() and not linked.run_dir.exists()
    linked.run_dir.mkdir()  # the run trains in its own folder again
    again = plan_suite(suite, BUDGETS["tiny"], tmp_path / "c", store=tmp_path / "store").runs[0]
    assert again.run_dir == linked.run_dir and not again.run_dir.is_symlink()


def test_the_version_1_key_is_the_same_with_or_without_a_store(tmp_path: Path) -> None:
    """Version-1 stores keyed the data folder by its absolute path, whatever store held it: the key
    `link_legacy` looks for must not change when a store is passed (version 2 names the data folder
    within its store)."""
    from archlab.lab.runs import store

    for where in (tmp_path / "store", tmp_path / "elsewhere"):
        run = plan_suite(load_suite("heads"), BUDGETS["tiny"], tmp_path / "out", store=where).runs[
            0
        ]
        v1 = store.run_hash(run.keys, BUDGETS["tiny"], version=1)
        assert store.run_hash(run.keys, BUDGETS["tiny"], where, version=1) == v1
        assert store.run_hash(run.keys, BUDGETS["tiny"], where) == run.run_dir.name != v1
    here, there = (
        plan_suite(load_suite("heads"), BUDGETS["tiny"], tmp_path / "out", store=w).runs[0]
        for w in (tmp_path / "store", tmp_path / "elsewhere")
    )
    assert here.run_dir.name == there.run_dir.name  # version 2: one key for the moved store
    assert store.run_hash(here.keys, BUDGETS["tiny"], version=1) != store.run_hash(
        there.keys, BUDGETS["tiny"], version=1
    )

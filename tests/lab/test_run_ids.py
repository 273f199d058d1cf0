"""The lab's stored runs keep their keys: every built-in suite at budget small plans the same
run folders (`store.run_hash` of each arm and seed) as the code before issue 35 did, recorded in
tests/fixtures/run_ids_small.json (`python -m tests.lab.test_run_ids` rewrites it). A suite resumed
after a change that passes this retrains nothing.

`run_hash` (lab/runs/store.py) keys a run by its model config's non-default fields in the flat
spelling (`ModelConfig.to_flat_dict()`): the option groups (`rope`, `favor`, `vq`, `gau`, `cosine`)
nest fields that were flat (and `cosine` replaced the bool `cosine_attention`), and the suites
that set them keep their keys only through that view. The same holds for every published page
(docs/results): its snapshot suite.yaml plans the run folders the code before the `rope` group
planned (tests/fixtures/page_run_ids.json), and where a page's results.csv names today's keys (pages
trained since the store's version 2), those are the ones planned. The old flat spelling and the
nested one give the same key and the same model, bit for bit."""

from __future__ import annotations

import csv
import inspect
import json
import sys
from pathlib import Path

import pytest
import torch

from archlab.lab.runs import store
from archlab.lab.runs.plan import plan_suite
from archlab.lab.spec.budgets import BUDGETS
from archlab.lab.spec.suite_file import list_suites, load_suite
from archlab.nn.model import TransformerLM
from archlab.train.config import resolve_config

RECORD = Path(__file__).resolve().parents[1] / "fixtures" / "run_ids_small.json"
RECORDED = json.loads(RECORD.read_text(encoding="utf-8")) if RECORD.is_file() else {}


def run_ids(store: Path) -> dict[str, list[str]]:
    """Each built-in suite's run folder names at budget small, in plan order."""
    return {
        Path(s.path).stem: [
            r.run_dir.name
            for r in plan_suite(
                s, BUDGETS["small"], store / "plans" / Path(s.path).stem, store=store
            ).runs
        ]
        for s in list_suites()
    }


@pytest.fixture(scope="module")
def as_is(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    return run_ids(tmp_path_factory.mktemp("as-is"))


@pytest.mark.parametrize("suite", sorted(RECORDED))
def test_every_suite_plans_the_run_folders_it_planned_before(
    suite: str, as_is: dict[str, list[str]]
) -> None:
    assert as_is[suite] == RECORDED[suite]


def test_the_hash_reads_the_flat_spelling() -> None:
    source = inspect.getsource(store.run_key)
    assert "to_flat_dict" in source and "model.to_dict()" not in source


def test_the_record_covers_every_built_in_suite(as_is: dict[str, list[str]]) -> None:
    assert sorted(as_is) == sorted(RECORDED)


@pytest.mark.parametrize(
    ("screen", "semifold", "runs"),
    [
        ("original-vs-modern-screening", "original-vs-modern-semifold", 16 * 2),
        ("modern-screening", "modern-screening-semifold", 16 * 3),
    ],
)
def test_a_semifold_plans_every_run_of_its_screen(
    as_is: dict[str, list[str]], screen: str, semifold: str, runs: int
) -> None:
    """A semifold is its screen's 16 rows and 8 more: the store reuses every run of the screen, and
    trains only the new rows (24 rows x 3 seeds in all). original-vs-modern-screening's file runs 2
    seeds at small, modern-screening's 3."""
    first, folded = as_is[screen], as_is[semifold]
    assert len(first) == runs and len(folded) == len(set(folded)) == 24 * 3
    assert set(first) < set(folded)


def test_the_modern_screen_shares_its_serial_mha_rows(
    as_is: dict[str, list[str]], tmp_path: Path
) -> None:
    """modern-screening's rows at the serial block and MHA are models the 2017 screen's semifold
    trains too (RoPE, pre-norm, SwiGLU with the same norm, biases, tying and dropout; d_ff matched
    the same way), and its all-modern row is original-vs-modern's `modern` arm: the store reuses
    those 4 rows x 3 seeds and trains the other 36 runs only."""
    plan = plan_suite(
        load_suite(next(s.path for s in list_suites() if Path(s.path).stem == "modern-screening")),
        BUDGETS["small"],
        tmp_path / "plan",
        store=tmp_path / "store",
    )
    by_arm = {r.run_dir.name: r.arm for r in plan.runs}
    screen = as_is["modern-screening"]
    assert sorted(screen) == sorted(by_arm) and len(set(screen)) == 16 * 3
    elsewhere = {
        run
        for name, runs in as_is.items()
        if not name.startswith("modern-screening")
        for run in runs
    }
    shared = {run for run in screen if run in elsewhere}
    assert {by_arm[run] for run in shared} == {
        arm for arm in by_arm.values() if "-serial-mha-" in arm
    }
    assert len(shared) == 4 * 3 and shared <= set(as_is["original-vs-modern-semifold"])
    assert set(as_is["original-vs-modern"][:3]) <= shared  # the `modern` arm, seeds 0-2


PAGES = Path(__file__).resolve().parents[2] / "docs" / "results"
PAGE_RECORD = json.loads(
    (Path(__file__).resolve().parents[1] / "fixtures" / "page_run_ids.json").read_text()
)


def page_run_ids(page: Path, out: Path) -> dict[str, str]:
    """A published page's run folders as its own suite.yaml plans them at its budget and seeds:
    "arm/seed" -> id."""
    provenance = json.loads((page / "provenance.json").read_text(encoding="utf-8"))
    plan = plan_suite(
        load_suite(page / "suite.yaml"),
        BUDGETS[provenance["budget"]],
        out / page.name,
        seeds=provenance["seeds"],
        store=out / "store",
        extra=provenance.get("extra") or {},
    )
    return {f"{r.arm}/{r.seed}": r.run_dir.name for r in plan.runs}


@pytest.mark.parametrize("page", sorted(PAGE_RECORD))
def test_every_published_page_plans_the_run_folders_it_planned_before(
    page: str, tmp_path: Path
) -> None:
    planned = page_run_ids(PAGES / page, tmp_path)
    assert planned == PAGE_RECORD[page]
    published = {
        f"{row['arm']}/{row['seed']}": row["run"]
        for row in csv.DictReader((PAGES / page / "results.csv").open(encoding="utf-8"))
    }
    today = {k: v for k, v in published.items() if v in planned.values()}
    # a page trained under store version 2 names exactly the runs planned; an older page's ids
    # (version 1 keys, the data folder's absolute path inside) are none of them
    assert today in ({}, {k: planned[k] for k in published}), page


def test_the_page_record_covers_every_published_page() -> None:
    assert sorted(PAGE_RECORD) == sorted(
        p.name for p in PAGES.iterdir() if (p / "provenance.json").is_file()
    )
    runs = [
        row["run"]
        for p in PAGES.iterdir()
        if (p / "results.csv").is_file()
        for row in csv.DictReader((p / "results.csv").open(encoding="utf-8"))
    ]
    # v2 pages exist
    assert sum(run in ids.values() for ids in PAGE_RECORD.values() for run in set(runs)) >= 100


# the same settings in the spelling before the `rope` group (flat keys,
# `cosine_attention`) and after
SPELLINGS = [
    (
        {"model.rope_theta": "5e5", "model.rope_fraction": "0.5"},
        {"model.rope.theta": "5e5", "model.rope.fraction": "0.5"},
    ),
    (
        {"model.rope_layout": "interleaved", "model.position_pattern": "RN"},
        {"model.rope": '{"layout": "interleaved", "pattern": "RN"}'},
    ),
    (
        {
            "model.rope_scaling": "yarn",
            "model.rope_scaling.factor": "2",
            "model.rope_scaling.original_max_seq_len": "32",
        },
        {
            "model.rope.scaling.kind": "yarn",
            "model.rope.scaling.factor": "2",
            "model.rope.scaling.original_max_seq_len": "32",
        },
    ),
    (
        {
            "model.rope_theta_local": "100",
            "model.rope_scaling_local": "false",
            "model.sliding_window": "8",
            "model.window_pattern": "SF",
            "model.rope_scaling.kind": "linear",
            "model.rope_scaling.factor": "2",
        },
        {
            "model.rope.local_theta": "100",
            "model.rope.local_scaling": "false",
            "model.sliding_window": "8",
            "model.window_pattern": "SF",
            "model.rope.scaling": '{"kind": "linear", "factor": 2}',
        },
    ),
    (
        {"preset": "hwfa2", "model.rope_scaling.window": "8"},
        {"preset": "hwfa2", "model.rope.scaling.window": "8"},
    ),
    (
        {"model.cosine_attention": "true", "model.cosine_scale": "dynamic"},
        {"model.cosine.scale": "dynamic"},
    ),
    (
        {"model.attn_kernel": "vq", "model.vq_codes": "8", "model.vq_block": "8"},
        {"model.attn_kernel": "vq", "model.vq.codes": "8", "model.vq.block": "8"},
    ),
]
TINY = {
    "model.d_model": "32",
    "model.n_layers": "2",
    "model.n_heads": "4",
    "model.max_seq_len": "32",
    "data.source": "unused",
}


@pytest.mark.parametrize(("old", "new"), SPELLINGS, ids=[",".join(o) for o, _ in SPELLINGS])
def test_the_old_and_the_new_spelling_give_one_store_key_and_one_model(
    old: dict, new: dict
) -> None:
    budget = BUDGETS["small"]
    old_key, new_key = (
        store.run_hash({**TINY, **old}, budget),
        store.run_hash({**TINY, **new}, budget),
    )
    assert old_key == new_key != store.run_hash(TINY, budget)
    (_, a), (_, b) = resolve_config([{**TINY, **old}]), resolve_config([{**TINY, **new}])
    assert a == b
    models = []
    for config in (a, b):
        # VQ's codebook statistics come from the global stream until its first batch
        torch.manual_seed(3)
        with torch.device("meta"):
            model = TransformerLM(config)
        model.to_empty(device="cpu")
        model.init_weights(seed=3)  # as the trainer draws a run's weights
        models.append(model.eval())
    sa, sb = models[0].state_dict(), models[1].state_dict()
    assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
    ids = torch.randint(0, a.vocab_size, (2, 32), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(models[0](ids), models[1](ids))


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        RECORD.write_text(json.dumps(run_ids(Path(tmp)), indent=1) + "\n", encoding="utf-8")
    sys.exit(0)

"""A suite's plan: each data request gets its own prepared folder (a BPE-dropout arm too), and the folders
prepared before keep their names."""

from __future__ import annotations

import json
from pathlib import Path

from archlab.lab.budgets import BUDGETS
from archlab.lab.plan import plan_suite
from archlab.lab.suite import load_suite


def test_a_bpe_dropout_arm_gets_its_own_data_folder_and_the_plain_ones_keep_theirs(tmp_path: Path) -> None:
    """The vocab suite's bpe32k-dropout arm once shared bpe32k's prepared folder (its request omitted the dropout)
    and every run of it was refused by the trainer; folders prepared before keep their names."""
    import hashlib

    plan = plan_suite(load_suite("vocab"), BUDGETS["tiny"], tmp_path / "out", store=tmp_path / "store")
    by_arm = {r.arm: Path(r.keys["data.source"]) for r in plan.runs}
    assert by_arm["bpe32k-dropout"] != by_arm["bpe32k"] and by_arm["bpe32k"] != by_arm["bpe8k"]
    plain = json.dumps(["stdlib", "bpe", 32768, 0.05, BUDGETS["tiny"].max_files])  # the request before the change
    assert by_arm["bpe32k"].name == f"bpe32768-{hashlib.sha1(plain.encode()).hexdigest()[:8]}"
    spec = next(d for d in plan.data if d.out == by_arm["bpe32k-dropout"])
    assert spec.bpe_dropout == 0.1 and spec.command()[-4:] == ["--bpe-dropout", "0.1", "--out", str(spec.out)]
    assert "--bpe-dropout" not in next(d for d in plan.data if d.out == by_arm["bpe32k"]).command()
    assert {r.keys["data.bpe_dropout"] for r in plan.runs if r.arm == "bpe32k-dropout"} == {"0.1"}

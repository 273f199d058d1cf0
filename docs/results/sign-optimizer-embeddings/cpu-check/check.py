"""How much the CPU moves this page's runs: tiger seed 0 and tiger-lazy seeds 0-7 retrained on a
2-core AMD EPYC (Zen 3, AVX2) at commit 0eb6d2e from their records' config.yaml, one thread each,
and measured with the lab's own measures (budget small's evaluation set). The page trained tiger
on an AMD EPYC (Zen 2, AVX2) and tiger-lazy on an Intel Xeon with its kernels capped at AVX2.

    python docs/results/sign-optimizer-embeddings/cpu-check/check.py

prints, from the files alone: whether tiger seed 0 came back bit for bit (every logged loss and its
val_loss), tiger-lazy's val_loss on the AMD minus on the Intel per seed with a 90% t interval, and
the registered loss claim "lazy rows cost no loss" judged on AMD runs only (paired t, 90% CI of
the deficit against the 0.03-nat margin), beside the page's verdict on the Intel runs.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
from scipy import stats

HERE = Path(__file__).resolve().parent
PAGE = HERE.parent
MARGIN = 0.03  # the loss margin registered for the page (registration.json)


def published() -> dict[tuple[str, int], dict]:
    """The page's per-run values, by (arm, seed)."""
    with (PAGE / "results.csv").open(encoding="utf-8") as f:
        return {(r["arm"], int(r["seed"])): r for r in csv.DictReader(f)}


def train_losses(run: Path) -> dict[int, float]:
    """Every logged training loss of a run, by step."""
    rows = (json.loads(line) for line in (run / "metrics.jsonl").open(encoding="utf-8"))
    return {r["step"]: r["loss"] for r in rows if r["kind"] == "train"}


def measured(name: str) -> dict:
    return json.loads((HERE / "runs" / name / "lab-measures.json").read_text(encoding="utf-8"))


def interval(d: np.ndarray) -> tuple[float, float, float]:
    """Mean and two-sided 90% t interval of paired differences."""
    half = stats.t.ppf(0.95, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))
    return d.mean(), d.mean() - half, d.mean() + half


def figures() -> dict:
    """Every figure the page's reading quotes from this check, computed from the files."""
    page = published()
    tiger = page[("tiger", 0)]
    record, again = train_losses(PAGE / "runs" / tiger["run"]), train_losses(HERE / "runs/tiger0")
    seeds = range(8)
    intel = np.array([float(page[("tiger-lazy", s)]["val_loss"]) for s in seeds])
    amd = np.array([measured(f"lazy{s}")["val_loss"] for s in seeds])
    base = np.array([float(page[("tiger", s)]["val_loss"]) for s in seeds])
    cpu = amd - intel
    return {
        "tiger_losses": len(again),
        "tiger_same": record == again
        and float(tiger["val_loss"]) == measured("tiger0")["val_loss"],
        "cpu": cpu,
        "cpu_interval": interval(cpu),
        "tiger_spread": base.std(ddof=1),
        "intel_claim": interval(intel - base),
        "amd_claim": interval(amd - base),
        "amd_shares": [measured(f"lazy{s}")["embed_near_fixed_point"] for s in seeds],
    }


def main() -> None:
    f = figures()
    same = "bit for bit" if f["tiger_same"] else "different"
    print(f"tiger seed 0, Zen 2 record against Zen 3: {f['tiger_losses']} logged losses, {same}")
    cpu = f["cpu"]
    mean, lo, hi = f["cpu_interval"]
    print("tiger-lazy val_loss, AMD - Intel per seed:", " ".join(f"{d:+.4f}" for d in cpu))
    print(
        f"  mean {mean:+.4f} (90% CI {lo:+.4f} to {hi:+.4f}), |difference| median "
        f"{np.median(np.abs(cpu)):.4f}, max {np.abs(cpu).max():.4f}; tiger's spread over seeds "
        f"{f['tiger_spread']:.4f}"
    )
    for label, key in (
        ("the page (lazy on the Intel)", "intel_claim"),
        ("AMD runs only", "amd_claim"),
    ):
        mean, _, hi = f[key]
        verdict = "inside" if hi < MARGIN else "not inside"
        print(
            f"lazy rows cost no loss, {label}: {mean:+.4f}, upper 90% bound of the deficit "
            f"{hi:+.4f}, {verdict} the {MARGIN} margin"
        )
    print(f"tiger-lazy entries near the fixed point on the AMD: {f['amd_shares']}")


if __name__ == "__main__":
    main()

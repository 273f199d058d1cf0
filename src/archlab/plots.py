"""Every figure archlab draws, in one style: `plot_run` (loss, learning rate and gradient norm of a run, as one
PNG; `archlab plot run`; a dotted line marks each step where the run was resumed) and `plot_arms` (a metric
over steps for every arm and seed of an ablation suite). matplotlib is imported inside each function, with
the file-only Agg backend.
"""

from __future__ import annotations

from pathlib import Path

from archlab.train.metrics import read_metrics


def plot_run(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Draw the curves of `run_dir/metrics.jsonl` into `out` (default RUN_DIR/curves.png)."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    train, evals = read_metrics(run_dir, "train"), read_metrics(run_dir, "eval")
    if not train:
        raise ValueError(f"{run_dir / 'metrics.jsonl'} has no train rows yet")
    steps = [r["step"] for r in train]
    fig, (ax_loss, ax_lr, ax_norm) = plt.subplots(1, 3, figsize=(15, 4), constrained_layout=True)
    ax_loss.plot(steps, [r["loss"] for r in train], label="train")
    if evals:
        ax_loss.plot([r["step"] for r in evals], [r["loss"] for r in evals], "o-", label="val")
    ax_loss.set(title="loss (cross entropy, nats/token)", xlabel="step")
    ax_loss.legend()
    ax_lr.plot(steps, [r["lr"] for r in train])
    ax_lr.set(title="learning rate", xlabel="step")
    ax_norm.plot(steps, [r["grad_norm"] for r in train])
    ax_norm.set(title="gradient norm (before clipping)", xlabel="step", yscale="log")
    for i, row in enumerate(read_metrics(run_dir, "resume")):
        for ax in (ax_loss, ax_lr, ax_norm):
            ax.axvline(row["step"], color="gray", linestyle=":", label="resumed" if ax is ax_lr and not i else None)
    if ax_lr.get_legend_handles_labels()[0]:
        ax_lr.legend()
    fig.suptitle(str(run_dir))
    path = Path(out) if out else run_dir / "curves.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_arms(curves: dict[str, list[tuple[list[int], list[float]]]], title: str, ylabel: str, out: str | Path,
              log_y: bool = False) -> Path:
    """One line per seed, one colour per arm (the lab's comparison figures); `curves[arm]` = [(steps, values)]."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2), constrained_layout=True)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (arm, seeds) in enumerate(curves.items()):
        style = "-" if i < len(colors) else "--"  # more arms than colours: dashes tell them apart
        for j, (steps, values) in enumerate(seeds):
            ax.plot(steps, values, style, color=colors[i % len(colors)], alpha=0.8, linewidth=1.2,
                    label=arm if j == 0 else None)
    ax.set(title=title, xlabel="step", ylabel=ylabel, yscale="log" if log_y else "linear")
    ax.legend(fontsize=8, ncol=2 if len(curves) > 6 else 1)
    ax.grid(alpha=0.3)
    path = Path(out)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path

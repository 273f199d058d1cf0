"""Every figure archlab draws, in one style: `plot_run` (loss, learning rate and gradient norm of a
run, as one PNG; `archlab plot run`; a dotted line marks each step where the run was resumed),
`plot_arms` (a metric over steps for every arm and seed of an ablation suite), `plot_length` (loss
against context length per method; `archlab eval length`), `plot_passkey` (passkey accuracy per
length and depth, a heat map; `archlab eval passkey`) and `plot_rope` (RoPE wavelengths per pair and
the relative position each method feeds attention; `archlab plot rope`). matplotlib is imported
inside each function, with the file-only Agg backend.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from archlab.nn.positions.rerope import relative_positions
from archlab.nn.positions.scaling import ROPE_KINDS, RopeScaling, inference_kinds
from archlab.train.metrics import read_metrics

if TYPE_CHECKING:
    from matplotlib.axes import Axes


def _pyplot():  # noqa: ANN202 - the matplotlib.pyplot module
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    return plt


def plot_run(run_dir: str | Path, out: str | Path | None = None) -> Path:
    """Draw the curves of `run_dir/metrics.jsonl` into `out` (default RUN_DIR/curves.png)."""
    plt = _pyplot()

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
            ax.axvline(
                row["step"],
                color="gray",
                linestyle=":",
                label="resumed" if ax is ax_lr and not i else None,
            )
    if ax_lr.get_legend_handles_labels()[0]:
        ax_lr.legend()
    fig.suptitle(str(run_dir))
    path = Path(out) if out else run_dir / "curves.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_length(
    rows: Sequence[tuple[str, int, float]], out: str | Path, title: str = "", metric: str = "loss"
) -> Path:
    """(method, length, value) rows -> the loss (or, metric="accuracy", the next-token accuracy)
    against length (log2 axis), one line per method."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5), constrained_layout=True)
    for method in dict.fromkeys(r[0] for r in rows):
        points = sorted((n, loss) for m, n, loss in rows if m == method)
        ax.plot([n for n, _ in points], [loss for _, loss in points], "o-", label=method)
    ylabel = "loss on the scored tokens (nats/token)" if metric == "loss" else "next-token accuracy"
    ax.set(xscale="log", xlabel="context length (tokens)", ylabel=ylabel, title=title)
    ax.set_xscale("log", base=2)
    ax.legend()
    path = Path(out)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_rope(
    head_dim: int,
    theta: float,
    scalings: Sequence[str],
    factor: float,
    train_len: int,
    window: int,
    out: str | Path,
) -> Path:
    """Left: wavelength 2 pi / w_i of each rotation pair under each static frequency scaling (the
    training length as a line). Right: the relative position each method feeds attention against the
    true distance (RoPE, PI, and each kind that remaps positions: ReRoPE, Leaky ReRoPE), out to
    factor * train_len. Each kind's scaling is its `RopeKind.at` the stretched length (Leaky
    ReRoPE's slope by the "train" rule: the longest distance lands on the longest one trained)."""
    known = inference_kinds()
    for kind in scalings:
        if kind not in known:
            raise ValueError(f"scaling {kind!r} is not allowed: one of {', '.join(known)}")
    length = factor * train_len
    at = {
        kind: ROPE_KINDS[kind].at(length, train_len, window, leaky_k="train") or RopeScaling()
        for kind in scalings
    }
    plt = _pyplot()
    fig, (ax_w, ax_p) = plt.subplots(1, 2, figsize=(13, 4.5), constrained_layout=True)
    _wavelengths(ax_w, head_dim, theta, at, train_len)
    ax_w.set_title(f"head_dim {head_dim}, theta {theta:g}, factor {factor:g}")
    _positions_fed(ax_p, at, factor, length, train_len)
    path = Path(out)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _wavelengths(
    ax: Axes, head_dim: int, theta: float, at: dict[str, RopeScaling], train_len: int
) -> None:
    """Each static scaling's wavelength per rotation pair, against the training length."""
    pairs = torch.arange(head_dim // 2)
    for kind, scaling in at.items():
        if not (ROPE_KINDS[kind].remaps_positions or ROPE_KINDS[kind].length_dependent):
            inv_freq, _ = ROPE_KINDS[kind].frequency_function()(head_dim, theta, scaling)
            ax.plot(pairs, (2 * math.pi / inv_freq).numpy(), label=kind)
    ax.axhline(train_len, color="gray", linestyle="--", label=f"training length {train_len}")
    ax.set(yscale="log", xlabel="rotation pair i", ylabel="wavelength 2 pi / w_i (tokens)")
    ax.legend(fontsize=8)


def _positions_fed(
    ax: Axes, at: dict[str, RopeScaling], factor: float, length: float, train_len: int
) -> None:
    """The relative position RoPE, PI and each position-remapping kind feed attention, against
    the true distance."""
    distance = torch.arange(int(length))[None]
    zero = torch.zeros(1, 1, dtype=torch.long)
    lines = {"RoPE": distance[0].double(), f"PI (/ {factor:g})": distance[0].double() / factor}
    for kind, s in at.items():
        # beyond W: slope 1/k (k = factor; ReRoPE, which has none: k = inf)
        if ROPE_KINDS[kind].remaps_positions:
            k = math.inf if ROPE_KINDS[kind].no_factor is not None else s.factor
            label = (
                f"{kind} (W={s.window})" if k == math.inf else f"{kind} (W={s.window}, k={k:.2g})"
            )
            lines[label] = relative_positions(distance, zero, s.window, k)[0, :, 0]
    for label, fed in lines.items():
        ax.plot(distance[0].numpy(), fed.numpy(), label=label)
    ax.axhline(train_len, color="gray", linestyle="--", label="training length")
    ax.set(
        xlabel="true distance m - n",
        ylabel="relative position fed to RoPE",
        title="positions attention sees",
    )
    ax.legend(fontsize=8)


def plot_passkey(
    rows: Sequence[tuple[int, float, float]], out: str | Path, title: str = ""
) -> Path:
    """(length, depth, accuracy) rows -> a heat map, lengths across and depths down, accuracy
    in each cell."""
    plt = _pyplot()
    lengths, depths = sorted({r[0] for r in rows}), sorted({r[1] for r in rows})
    acc = {(n, d): a for n, d, a in rows}
    grid = [[acc[n, d] for n in lengths] for d in depths]
    fig, ax = plt.subplots(
        figsize=(1.2 * len(lengths) + 2, 0.6 * len(depths) + 1.8), constrained_layout=True
    )
    image = ax.imshow(grid, vmin=0, vmax=1, cmap="RdYlGn", aspect="auto")
    for i, row in enumerate(grid):
        for j, value in enumerate(row):
            ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=8)
    ax.set_xticks(range(len(lengths)), [str(n) for n in lengths])
    ax.set_yticks(range(len(depths)), [f"{d:g}" for d in depths])
    ax.set(
        xlabel="context length (tokens)", ylabel="needle depth", title=title or "passkey accuracy"
    )
    fig.colorbar(image, ax=ax, label="accuracy")
    path = Path(out)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_arms(
    curves: dict[str, list[tuple[list[int], list[float]]]],
    title: str,
    ylabel: str,
    out: str | Path,
    log_y: bool = False,
) -> Path:
    """One line per seed, one colour per arm (the lab's comparison figures); `curves[arm]`
    = [(steps, values)]."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2), constrained_layout=True)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (arm, seeds) in enumerate(curves.items()):
        style = "-" if i < len(colors) else "--"  # more arms than colours: dashes tell them apart
        for j, (steps, values) in enumerate(seeds):
            ax.plot(
                steps,
                values,
                style,
                color=colors[i % len(colors)],
                alpha=0.8,
                linewidth=1.2,
                label=arm if j == 0 else None,
            )
    ax.set(title=title, xlabel="step", ylabel=ylabel, yscale="log" if log_y else "linear")
    ax.legend(fontsize=8, ncol=2 if len(curves) > 6 else 1)
    ax.grid(alpha=0.3)
    path = Path(out)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path

"""Training-step cost of inverse Leaky ReRoPE against plain RoPE (Su, "Transformer upgrade 13",
kexue.fm/archives/9728, reports +6%: 330 -> 350 s per 1000 steps on a 100M single-head GAU at
N = 512).

One Llama-shaped model (seed 0), trained at N tokens in three arms with the same weights,
batch and AdamW:
- `rope`: plain RoPE, the default attention (SDPA);
- `rope-eager`: plain RoPE through the eager kernel (what a plan that computes its own scores must
  use), to split the cost of losing SDPA from the cost of the second score matrix;
- `inv_leaky`: rope_scaling inv_leaky_rerope, W = N/4, s = 16 (Su's recipe for 8x), in training
  mode: two rotations of q and k, two score matrices merged per (m, n), the eager kernel.
Every arm has log-n on (Su trains InvLeaky with it). The arms alternate A B C A B C ... in one
process, one thread, so drift hits them alike; an arm's step time is its best timed step (other load
only adds time). The eval-mode forward of the `inv_leaky` model is timed against `rope` too: it is
plain RoPE, so it must be equal.

    # d 256, 4 layers, N 256, batch 8, 6 rounds (~2 min, 1 core)
    python benchmarks/bench_inv_leaky.py
    python benchmarks/bench_inv_leaky.py --quick  # N 128, 3 rounds

Writes benchmarks/results/inv_leaky_step.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import torch

from archlab import TransformerLM, build_preset

RESULTS = Path(__file__).resolve().parent / "results"


def arms(n: int) -> dict[str, dict]:
    inv = {"kind": "inv_leaky_rerope", "window": n // 4, "factor": 16.0}
    return {
        "rope": dict(),
        "rope-eager": dict(attn_impl="eager"),
        "inv_leaky": dict(rope=dict(scaling=inv)),
    }


def build(fields: dict, shape: dict) -> tuple[TransformerLM, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = TransformerLM(build_preset("llama", **shape, attn_logn=True, **fields)).train()
    return model, torch.optim.AdamW(model.parameters(), lr=1e-4)


def train_step(model: TransformerLM, opt: torch.optim.Optimizer, x: torch.Tensor) -> float:
    start = time.perf_counter()
    logits = model(x[:, :-1])
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), x[:, 1:].flatten())
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return time.perf_counter() - start


@torch.no_grad()
def eval_forward(model: TransformerLM, x: torch.Tensor) -> float:
    model.eval()
    start = time.perf_counter()
    model(x[:, :-1])
    model.train()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    n, rounds = (128, 3) if args.quick else (256, 6)
    shape = dict(vocab_size=4096, d_model=256, n_layers=4, n_heads=4, max_seq_len=n)
    x = torch.randint(0, 4096, (8, n + 1), generator=torch.Generator().manual_seed(0))
    models = {name: build(fields, shape) for name, fields in arms(n).items()}
    for model, opt in models.values():
        train_step(model, opt, x)  # warm-up
    steps = {name: [] for name in models}
    forwards = {name: [] for name in ("rope", "inv_leaky")}
    for _ in range(rounds):
        for name, (model, opt) in models.items():
            steps[name].append(train_step(model, opt, x))
        for name in forwards:
            forwards[name].append(eval_forward(models[name][0], x))
    best = {name: min(t) for name, t in steps.items()}
    best_fwd = {name: min(t) for name, t in forwards.items()}
    out = {
        "shape": shape,
        "batch": 8,
        "rounds": rounds,
        "threads": 1,
        "cpu": platform.processor() or platform.machine(),
        "torch": torch.__version__,
        "load_average": os.getloadavg(),
        "train_step_s": best,
        "eval_forward_s": best_fwd,
        "inv_leaky_over_rope": best["inv_leaky"] / best["rope"],
        "inv_leaky_over_rope_eager": best["inv_leaky"] / best["rope-eager"],
        "eval_forward_ratio": best_fwd["inv_leaky"] / best_fwd["rope"],
    }
    RESULTS.mkdir(exist_ok=True)
    name = "inv_leaky_step_quick" if args.quick else "inv_leaky_step"
    (RESULTS / f"{name}.json").write_text(json.dumps(out, indent=2) + "\n")
    lines = [
        f"d_model {shape['d_model']}, {shape['n_layers']} layers, {shape['n_heads']} heads, N {n}, "
        f"batch 8, 1 thread, best of {rounds}",
        "",
        "| arm | train step (ms) | vs rope |",
        "|---|---|---|",
    ]
    lines += [f"| {k} | {v * 1e3:.1f} | {v / best['rope']:.2f}x |" for k, v in best.items()]
    lines += [
        "",
        f"eval-mode forward: inv_leaky {best_fwd['inv_leaky'] * 1e3:.1f} ms, rope "
        f"{best_fwd['rope'] * 1e3:.1f} ms ({out['eval_forward_ratio']:.2f}x)",
    ]
    (RESULTS / f"{name}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()

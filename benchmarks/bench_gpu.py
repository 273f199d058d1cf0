"""GPU figures: TRAIN at GPT-2-small size (124M parameters, seq 1024) and DECODE, with MFU against a
matmul ceiling measured on the same card. Run through benchmarks/gpu.sh.

TRAIN: bf16 autocast with fp32 master weights, flash SDPA (`sdpa_kernel(FLASH_ATTENTION)`), fused
AdamW (archlab's builder), torch.compile of the model; tokens/s and MFU = training FLOPs per step
(archlab.costs, 6N + attention) / step time / the bf16 GEMM ceiling (best of several 8192^3 matmuls
on this card). DECODE: greedy generation at batch 1 with the compiled decode step; tokens/s,
and the weight bytes streamed per second against the card's measured copy bandwidth (decode is
bandwidth-bound, so that is its ceiling).

`--dry-run` runs every part on the CPU with a tiny model and tiny matrices: it
checks the code paths, not the speed (its figures mean nothing). Results go to
OUT/gpu.json (default benchmarks/results/).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from archlab import ModelConfig, TransformerLM, build_preset
from archlab.costs import flops_per_token
from archlab.infer.generate import generate
from archlab.infer.sampling import SamplingConfig
from archlab.nn.functional import cross_entropy
from archlab.train.optim import build_optimizer
from archlab.train.sections import OptimizerConfig

RESULTS = Path(__file__).resolve().parent / "results"


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def best_seconds(fn: Callable[[], object], device: torch.device, repeats: int) -> float:
    fn()
    sync(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - start)
    return min(times)


def ceilings(device: torch.device, n: int) -> dict[str, float]:
    """bf16 GEMM TFLOP/s (n x n x n) and copy bandwidth GB/s (read + write of a 1 GiB
    or small buffer)."""
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    gemm = best_seconds(lambda: a @ b, device, 10)
    buf = torch.empty(2**28 if device.type == "cuda" else 2**16, device=device)
    out = torch.empty_like(buf)
    copy = best_seconds(lambda: out.copy_(buf), device, 10)
    return {
        "bf16_gemm_tflops": 2 * n**3 / gemm / 1e12,
        "copy_gb_s": 2 * buf.numel() * 4 / copy / 1e9,
    }


def train(
    config: ModelConfig, batch: int, block: int, steps: int, device: torch.device, compile: bool
) -> dict:
    torch.manual_seed(0)
    model = TransformerLM(config).to(device)
    if compile:
        model.compile()
    optimizer = build_optimizer(model, OptimizerConfig(lr=6e-4))
    x = torch.randint(0, config.vocab_size, (batch, block), device=device)
    y = torch.randint(0, config.vocab_size, (batch, block), device=device)
    flash = sdpa_kernel(SDPBackend.FLASH_ATTENTION) if device.type == "cuda" else nullcontext()

    def step() -> None:
        with flash, torch.autocast(device.type, dtype=torch.bfloat16):
            loss = cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(3):  # compile and autotune
        step()
    seconds = best_seconds(step, device, steps)
    flops = flops_per_token(config, block)["training"] * batch * block
    memory = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else 0.0
    return {
        "step_s": seconds,
        "tokens_per_s": batch * block / seconds,
        "flops_per_step": flops,
        "params": model.num_parameters(),
        "peak_memory_gib": memory,
        "fused_adamw": optimizer.defaults["fused"],
    }


def decode(config: ModelConfig, prompt: int, new: int, device: torch.device, compile: bool) -> dict:
    torch.manual_seed(0)
    model = TransformerLM(config).to(device).eval()
    ids = torch.randint(0, config.vocab_size, (prompt,)).tolist()
    runs = []
    for _ in range(3):  # the first compiles
        g = generate(
            model, [ids], SamplingConfig(max_new_tokens=new, temperature=0), compile_decode=compile
        )
        runs.append(g.decode_steps / g.decode_seconds)
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    best = max(runs[1:])
    return {"tokens_per_s": best, "runs": runs, "weight_gb_s": weight_bytes * best / 1e9}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="tiny shapes on the CPU: checks the code, not the card",
    )
    p.add_argument("--out", default=str(RESULTS))
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--no-compile", dest="compile", action="store_false")
    args = p.parse_args()
    if args.dry_run:
        device, gemm_n, block, batch, steps = torch.device("cpu"), 256, 64, 2, 2
        config = build_preset("gpt2", "tiny", max_seq_len=block)
        prompt, new = 8, 8
    else:
        if not torch.cuda.is_available():
            raise SystemExit(
                "bench_gpu.py: no CUDA device; pass --dry-run to check the script on the CPU"
            )
        device, gemm_n, block, batch, steps = (
            torch.device("cuda"),
            8192,
            1024,
            args.batch,
            args.steps,
        )
        config = build_preset("gpt2", "gpt2-small", max_seq_len=block)
        prompt, new = 128, 256
    ceil = ceilings(device, gemm_n)
    tr = train(config, batch, block, steps, device, args.compile)
    tr["mfu"] = tr["flops_per_step"] / tr["step_s"] / (ceil["bf16_gemm_tflops"] * 1e12)
    de = decode(config, prompt, new, device, args.compile)
    de["bandwidth_fraction"] = de["weight_gb_s"] / ceil["copy_gb_s"]
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu (dry run)"
    result = {
        "device": name,
        "dry_run": args.dry_run,
        "torch": torch.__version__,
        "compile": args.compile,
        "ceiling": ceil,
        "train": tr,
        "decode": de,
        "batch": batch,
        "block": block,
        "decode_median_tokens_per_s": statistics.median(de["runs"]),
    }
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "gpu.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(
        f"{name}: ceiling {ceil['bf16_gemm_tflops']:.1f} TFLOP/s bf16, "
        f"copy {ceil['copy_gb_s']:.0f} GB/s"
    )
    print(
        f"TRAIN {tr['params']:,} params, batch {batch} x {block}: {tr['tokens_per_s']:,.0f} "
        f"tokens/s, MFU {tr['mfu']:.1%}, peak {tr['peak_memory_gib']:.1f} GiB"
    )
    print(
        f"DECODE batch 1: {de['tokens_per_s']:,.0f} tokens/s, weights at {de['weight_gb_s']:.0f} "
        f"GB/s ({de['bandwidth_fraction']:.0%} of the copy bandwidth)"
    )


if __name__ == "__main__":
    main()

"""Training-step speed and memory: archlab against transformers and a nanoGPT-style
baseline, same weights.

For a Llama shape and a GPT-2 shape, one archlab model is built (seed 0) and its weights
are handed to
- `transformers`: LlamaForCausalLM via archlab.interop.families.llama, GPT2LMHeadModel
  via `gpt2_state_dict` below (Conv1D weights are our Linear weights transposed),
  both with attn_implementation="sdpa";
- `nanogpt`: `MiniGPT` below, the plainest PyTorch model of the same shape (nanoGPT's layout: fused
  QKV, F.scaled_dot_product_attention, nn.LayerNorm / nn.RMSNorm, F.cross_entropy);
- `archlab` eager and `archlab-compile` (torch.compile of the model).
Every implementation trains with the same torch AdamW (archlab's builder: fused, same groups rule)
on the same batch, in its own process, and the processes alternate A B C A B C ... so machine drift
hits all of them alike. The first loss of every process is recorded: equal weights give equal losses
(a check that the comparison is fair). A process's step time is its best timed step (other load only
adds time); ratios are per repeat (other's step time / archlab's), summarised as min/median/max. MFU
is against a matmul ceiling this run measures (a GEMM of the step's own FFN shape, best of several,
in fp32, and in bf16 for the bf16 rows), never a datasheet peak. Where the CPU has bf16 units
(avx512_bf16 or amx_bf16), the Llama shape also runs archlab, archlab compiled and transformers
under bf16 autocast with fp32 master weights (`--precision.dtype bf16`). Memory is the peak RSS of
the process minus its RSS before the first step (weights and the optimizer object exist by then;
gradients, optimizer state and activations are the difference). The CPUs that other processes keep
busy are sampled from /proc/stat for a second before and after the run (`hardware.busy_cores`); more
than the cores the benchmark leaves free means they shared the CPU.

    python benchmarks/bench_step.py          # Llama + GPT-2 shapes, 3 repeats (~10 min on 2 cores)
    python benchmarks/bench_step.py --quick  # a small shape, 2 repeats (~2 min)

Writes benchmarks/results/train_step.json and benchmarks/results/train_step.md (the tables).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from archlab import ModelConfig, TransformerLM, build_preset
from archlab.costs import flops_per_token
from archlab.nn.fast import install as fused
from archlab.train.hardware import busy_cores, cpu_flags, physical_cores
from archlab.train.optim import build_optimizer
from archlab.train.sections import OptimizerConfig

RESULTS = Path(__file__).resolve().parent / "results"
# name -> (preset, model fields, batch, block); full and --quick sizes
SHAPES = {
    "llama": (
        "llama",
        dict(vocab_size=8192, d_model=512, n_layers=8, n_heads=8, d_ff=1408),
        8,
        256,
    ),
    "gpt2": ("gpt2", dict(vocab_size=8192, d_model=512, n_layers=8, n_heads=8, d_ff=2048), 8, 256),
}
QUICK = {
    "llama": ("llama", dict(vocab_size=4096, d_model=256, n_layers=4, n_heads=4, d_ff=704), 4, 128)
}
IMPLS = {
    "llama": ["archlab", "transformers", "nanogpt", "archlab-compile"],
    "gpt2": ["archlab", "transformers", "nanogpt"],
}
# on a CPU with bf16 units (avx512_bf16 / amx_bf16) the Llama shape also runs under bf16 autocast,
# fp32 master weights, as `--precision.dtype bf16` trains: archlab eager and compiled, and
# transformers for the same ratio
BF16_IMPLS = ["archlab-bf16", "transformers-bf16", "archlab-bf16-compile"]


# ---------------------------------------------------------------------------------------- baselines
class MiniBlock(nn.Module):
    """One pre-norm layer, written as nanoGPT writes it; parameter names follow archlab's."""

    def __init__(self, c: ModelConfig) -> None:
        super().__init__()
        self.c, self.llama = c, c.norm == "rmsnorm"
        norm = (
            (lambda: nn.RMSNorm(c.d_model, eps=c.norm_eps))
            if self.llama
            else (lambda: nn.LayerNorm(c.d_model, eps=c.norm_eps))
        )
        self.attn_norm, self.mlp_norm = norm(), norm()
        self.attn = nn.Module()
        self.attn.qkv_proj = nn.Linear(c.d_model, 3 * c.d_model, bias=c.attn_bias)
        self.attn.o_proj = nn.Linear(c.d_model, c.d_model, bias=c.attn_bias)
        self.mlp = nn.Module()
        up = "gate_up_proj" if self.llama else "up_proj"
        setattr(
            self.mlp, up, nn.Linear(c.d_model, (2 if self.llama else 1) * c.d_ff, bias=c.mlp_bias)
        )
        self.mlp.down_proj = nn.Linear(c.d_ff, c.d_model, bias=c.mlp_bias)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor | None, sin: torch.Tensor | None
    ) -> torch.Tensor:
        B, T, D = x.shape
        H = self.c.n_heads
        q, k, v = self.attn.qkv_proj(self.attn_norm(x)).split(D, dim=2)
        q, k, v = (t.view(B, T, H, D // H).transpose(1, 2) for t in (q, k, v))  # (B, H, T, Dh)
        if cos is not None:
            q, k = (
                t * cos
                + torch.cat([-t[..., t.shape[-1] // 2 :], t[..., : t.shape[-1] // 2]], -1) * sin
                for t in (q, k)
            )
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, D)
        x = x + self.attn.o_proj(y)
        h = self.mlp_norm(x)
        if self.llama:
            gate, up = self.mlp.gate_up_proj(h).chunk(2, dim=-1)
            return x + self.mlp.down_proj(F.silu(gate) * up)
        return x + self.mlp.down_proj(F.gelu(self.mlp.up_proj(h), approximate="tanh"))


class MiniGPT(nn.Module):
    """nanoGPT-style decoder (learned positions + LayerNorm + GELU, or RoPE + RMSNorm + SwiGLU)."""

    def __init__(self, c: ModelConfig) -> None:
        super().__init__()
        self.c = c
        self.embed_tokens = nn.Embedding(c.vocab_size, c.d_model)
        self.pos_embed = nn.Embedding(c.max_seq_len, c.d_model) if c.position == "learned" else None
        self.layers = nn.ModuleList(MiniBlock(c) for _ in range(c.n_layers))
        self.norm = self.layers[0].attn_norm.__class__(c.d_model, eps=c.norm_eps)
        self.lm_head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        if c.tie_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        inv = 1.0 / c.rope.theta ** (torch.arange(0, c.head_dim, 2).float() / c.head_dim)
        self.register_buffer("inv_freq", inv, persistent=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        T = idx.shape[1]
        x = self.embed_tokens(idx)
        cos = sin = None
        if self.pos_embed is not None:
            x = x + self.pos_embed(torch.arange(T))
        else:
            angles = torch.outer(torch.arange(T).float(), self.inv_freq)
            angles = torch.cat([angles, angles], -1)  # (T, Dh): rotate halves
            cos, sin = angles.cos(), angles.sin()
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.lm_head(self.norm(x))


def gpt2_state_dict(model: TransformerLM) -> dict[str, torch.Tensor]:
    """archlab gpt2-preset weights under GPT2LMHeadModel's names (Conv1D stores weights
    as (in, out))."""
    ours, state = model.state_dict(), {}
    state["transformer.wte.weight"] = ours["embed_tokens.weight"]
    state["transformer.wpe.weight"] = ours["pos_embed.weight"]
    state["lm_head.weight"] = ours["lm_head.weight"]
    for part in ("weight", "bias"):
        state[f"transformer.ln_f.{part}"] = ours[f"norm.{part}"]
    names = {
        "ln_1": "attn_norm",
        "ln_2": "mlp_norm",
        "attn.c_attn": "attn.qkv_proj",
        "attn.c_proj": "attn.o_proj",
        "mlp.c_fc": "mlp.up_proj",
        "mlp.c_proj": "mlp.down_proj",
    }
    for i in range(model.config.n_layers):
        for hf, mine in names.items():
            w = ours[f"layers.{i}.{mine}.weight"]
            state[f"transformer.h.{i}.{hf}.weight"] = (
                w if hf.startswith("ln") else w.t().contiguous()
            )
            state[f"transformer.h.{i}.{hf}.bias"] = ours[f"layers.{i}.{mine}.bias"]
    return state


def build(
    impl: str, config: ModelConfig
) -> tuple[nn.Module, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]:
    """The model of `impl` holding archlab's seed-0 weights, and its loss(x, y) function."""
    torch.manual_seed(0)
    ours = TransformerLM(config)
    if impl.startswith("archlab"):
        fused.install(ours)  # as the trainer does
        if impl.endswith("compile"):
            ours.compile()  # in place, as `--precision.compile true` does
        # as the trainer: head and loss fused, chunked
        return ours, lambda x, y: ours(x, targets=y).loss
    if impl.startswith("nanogpt"):
        model = MiniGPT(config)
        model.load_state_dict(ours.state_dict(), strict=True)
    else:
        model = hf_model(ours)
    V = config.vocab_size

    def loss(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        logits = model(x) if impl.startswith("nanogpt") else model(input_ids=x).logits
        return F.cross_entropy(logits.reshape(-1, V), y.reshape(-1))

    return model, loss


def hf_model(ours: TransformerLM) -> nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    from archlab.interop.hf import hf_state_dict

    c = ours.config
    if c.norm == "rmsnorm":
        model = LlamaForCausalLM(
            LlamaConfig(
                vocab_size=c.vocab_size,
                hidden_size=c.d_model,
                intermediate_size=c.d_ff,
                num_hidden_layers=c.n_layers,
                num_attention_heads=c.n_heads,
                num_key_value_heads=c.n_kv_heads,
                max_position_embeddings=c.max_seq_len,
                rms_norm_eps=c.norm_eps,
                tie_word_embeddings=False,
                attn_implementation="sdpa",
                rope_parameters={"rope_type": "default", "rope_theta": c.rope.theta},
            )
        )
        state = hf_state_dict(ours, "llama")
    else:
        model = GPT2LMHeadModel(
            GPT2Config(
                vocab_size=c.vocab_size,
                n_positions=c.max_seq_len,
                n_embd=c.d_model,
                n_layer=c.n_layers,
                n_head=c.n_heads,
                n_inner=c.d_ff,
                activation_function="gelu_new",
                resid_pdrop=0.0,
                embd_pdrop=0.0,
                attn_pdrop=0.0,
                layer_norm_epsilon=c.norm_eps,
                tie_word_embeddings=True,
                attn_implementation="sdpa",
            )
        )
        state = gpt2_state_dict(ours)
    model.load_state_dict({k: v.clone() for k, v in state.items()}, strict=True)
    return model.train()


# ------------------------------------------------------------------------------------------- worker
def rss_mb() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def worker(args: argparse.Namespace) -> dict:
    """One implementation in this process: warm-up steps, then `steps` timed optimizer steps."""
    torch.set_num_threads(args.threads)
    if args.impl.startswith("ceiling"):
        dtype = torch.bfloat16 if args.impl == "ceiling-bf16" else torch.float32
        return {"gflops": matmul_ceiling(args.m, args.k, args.n, dtype=dtype)}
    preset, fields, batch, block = (QUICK if args.quick else SHAPES)[args.shape]
    config = build_preset(preset, "tiny", max_seq_len=block, **fields)
    model, loss_fn = build(args.impl, config)
    # autocast around forward + loss, as the trainer's `precision.dtype bf16`
    bf16 = "-bf16" in args.impl
    optimizer = build_optimizer(model, OptimizerConfig(lr=1e-3))
    gen = torch.Generator().manual_seed(1)
    x = torch.randint(0, config.vocab_size, (batch, block), generator=gen)
    y = torch.randint(0, config.vocab_size, (batch, block), generator=gen)
    base = rss_mb()
    times, losses = [], []
    for i in range(args.warmup + args.steps):
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = loss_fn(x, y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
        if i >= args.warmup:
            times.append(time.perf_counter() - start)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    # the best step: interference from other processes only ever adds time
    return {
        "step_s": min(times),
        "times": times,
        "first_loss": losses[0],
        "step_mem_mb": peak - base,
        "params": sum(p.numel() for p in model.parameters()),
    }


def matmul_ceiling(
    m: int, k: int, n: int, repeats: int = 7, dtype: torch.dtype = torch.float32
) -> float:
    """Best GEMM GFLOP/s of (m, k) @ (k, n) in `dtype`, the shape of the step's FFN projection."""
    a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
    a @ b
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * m * k * n / best / 1e9


# ------------------------------------------------------------------------------------------- driver
def run_worker(
    args: argparse.Namespace, impl: str, shape: str = "", mkn: tuple[int, int, int] = (0, 0, 0)
) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--worker",
        "--impl",
        impl,
        "--shape",
        shape,
        "--threads",
        str(args.threads),
        "--steps",
        str(args.steps),
        "--warmup",
        str(args.warmup + (1 if impl.endswith("compile") else 0)),
        "--m",
        str(mkn[0]),
        "--k",
        str(mkn[1]),
        "--n",
        str(mkn[2]),
    ] + (["--quick"] if args.quick else [])
    out = subprocess.run(
        cmd, capture_output=True, text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"}
    )
    if out.returncode:
        raise RuntimeError(f"{impl} {shape} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def busy() -> float:
    return busy_cores(1.0)  # CPUs busy with other processes now (not a lagging load average)


def summarise(
    shape: str, runs: dict[str, list[dict]], ceiling: dict[str, float], quick: bool
) -> dict:
    preset, fields, batch, block = (QUICK if quick else SHAPES)[shape]
    config = build_preset(preset, "tiny", max_seq_len=block, **fields)
    flops = flops_per_token(config, block)["training"] * batch * block
    rows = {}
    for impl, rs in runs.items():
        t = statistics.median(r["step_s"] for r in rs)
        # >1: archlab faster
        ratios = [r["step_s"] / a["step_s"] for r, a in zip(rs, runs["archlab"])]
        # MFU against the ceiling of the dtype the GEMMs run in
        dtype = "bf16" if "-bf16" in impl else "fp32"
        rows[impl] = {
            "step_s": t,
            "tokens_per_s": batch * block / t,
            "dtype": dtype,
            "mfu": flops / t / 1e9 / ceiling[dtype],
            "archlab_speedup": {
                "min": min(ratios),
                "median": statistics.median(ratios),
                "max": max(ratios),
            },
            "step_mem_mb": statistics.median(r["step_mem_mb"] for r in rs),
            "first_loss": rs[0]["first_loss"],
            "params": rs[0]["params"],
            "step_s_per_repeat": [r["step_s"] for r in rs],
        }
    return {
        "shape": shape,
        "config": {"preset": preset, **fields, "batch": batch, "block": block},
        "train_flops_per_step": flops,
        "impls": rows,
    }


def markdown(result: dict) -> str:
    m = result["machine"]
    lines = [
        f"# Training step: archlab vs transformers vs nanoGPT-style ({result['date']})",
        "",
        f"Machine: {m['cpu']}, {m['cores']} physical cores, {result['threads']} threads, torch "
        f"{m['torch']}; bf16 units: {m['bf16_units'] or 'none'}. CPUs busy with other work "
        f"before/after: {result['busy_before']:.2f} / {result['busy_after']:.2f}.",
        "",
        "Matmul ceiling (GEMM of the FFN shape measured in this run): "
        + ", ".join(f"{dtype} {g:,.1f} GFLOP/s" for dtype, g in result["ceiling_gflops"].items())
        + "; MFU is against "
        "the ceiling of the dtype an implementation multiplies in. "
        f"Repeats: {result['repeats']} (processes alternate), {result['steps']} timed steps each.",
        "",
    ]
    if result["warning"]:
        lines += [f"**Warning:** {result['warning']}", ""]
    for s in result["shapes"]:
        cfg = s["config"]
        lines += [
            f"## {s['shape']}: d_model {cfg['d_model']}, {cfg['n_layers']} layers, vocab "
            f"{cfg['vocab_size']}, batch {cfg['batch']} x {cfg['block']}",
            "",
            "| implementation | step (s) | tokens/s | MFU | archlab speed-up min / median / max | "
            "step memory (MB) | first loss |",
            "|---|---|---|---|---|---|---|",
        ]
        for impl, r in s["impls"].items():
            sp = r["archlab_speedup"]
            speed = (
                "1 (reference)"
                if impl == "archlab"
                else f"{sp['min']:.2f} / {sp['median']:.2f} / {sp['max']:.2f}"
            )
            lines.append(
                f"| {impl} | {r['step_s']:.3f} | {r['tokens_per_s']:,.0f} | {r['mfu']:.0%} | "
                f"{speed} | {r['step_mem_mb']:,.0f} | {r['first_loss']:.5f} |"
            )
        lines.append("")
    lines.append(
        "Speed-up = that implementation's step time / archlab eager's, in the same repeat (> 1: "
        "archlab is faster; for archlab-compile and the -bf16 rows, < 1 means that row is faster "
        "than archlab's fp32 eager step). Command: `" + result["command"] + "`"
    )
    return "\n".join(lines) + "\n"


def drive(args: argparse.Namespace) -> None:
    shapes = QUICK if args.quick else SHAPES
    busy_before = busy()
    bf16_units = [f for f in ("avx512_bf16", "amx_bf16") if f in cpu_flags()]
    with_bf16 = args.bf16 and bool(bf16_units)
    ceilings: dict[str, list[float]] = {"fp32": [], "bf16": []}
    results = []
    for shape, (_, fields, batch, block) in shapes.items():
        mkn = (
            batch * block,
            fields["d_model"],
            2 * fields["d_ff"] if shape == "llama" else fields["d_ff"],
        )
        impls = [i for i in IMPLS[shape] if args.compile or not i.endswith("compile")]
        if with_bf16 and shape == "llama":
            impls += [i for i in BF16_IMPLS if args.compile or not i.endswith("compile")]
        dtypes = ["fp32"] + (["bf16"] if any("-bf16" in i for i in impls) else [])

        def measure_ceilings() -> None:
            for dtype in dtypes:
                kind = "ceiling" if dtype == "fp32" else "ceiling-bf16"
                ceilings[dtype].append(run_worker(args, kind, shape, mkn)["gflops"])

        measure_ceilings()
        runs: dict[str, list[dict]] = {i: [] for i in impls}
        for repeat in range(args.repeats):
            for impl in impls:
                runs[impl].append(run_worker(args, impl, shape))
                print(
                    f"{shape} repeat {repeat}: {impl} {runs[impl][-1]['step_s']:.3f} s/step",
                    flush=True,
                )
        measure_ceilings()
        results.append((shape, runs))
    ceiling = {dtype: max(c) for dtype, c in ceilings.items() if c}
    busy_after = busy()
    cores = physical_cores()
    warning = ""
    if max(busy_before, busy_after) > cores - args.threads + 0.5:
        warning = (
            f"other processes loaded the machine ({busy_before:.1f} CPUs busy before, "
            f"{busy_after:.1f} after, {cores} cores, {args.threads} threads used): absolute "
            "figures are low and noisy; the per-repeat ratios are the figures to trust"
        )
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.processor(),
    )
    result = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "command": "python benchmarks/bench_step.py " + " ".join(sys.argv[1:]),
        "threads": args.threads,
        "repeats": args.repeats,
        "steps": args.steps,
        "machine": {
            "cpu": model,
            "cores": cores,
            "torch": torch.__version__,
            "bf16_units": ",".join(bf16_units),
        },
        "busy_before": busy_before,
        "busy_after": busy_after,
        "warning": warning,
        "ceiling_gflops": ceiling,
        "ceiling_runs": ceilings,
        "shapes": [summarise(s, r, ceiling, args.quick) for s, r in results],
    }
    RESULTS.mkdir(exist_ok=True)
    name = "train_step_quick" if args.quick else "train_step"
    (RESULTS / f"{name}.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    (RESULTS / f"{name}.md").write_text(markdown(result), encoding="utf-8")
    print(markdown(result))


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--quick", action="store_true", help="one small Llama shape, 2 repeats, no compile"
    )
    p.add_argument(
        "--repeats", type=int, default=None, help="alternating rounds (default 3, quick 2)"
    )
    p.add_argument("--steps", type=int, default=3, help="timed optimizer steps per process")
    p.add_argument(
        "--warmup", type=int, default=1, help="untimed steps first (compile gets one more)"
    )
    p.add_argument(
        "--threads", type=int, default=physical_cores(), help="CPU threads of every process"
    )
    p.add_argument(
        "--no-compile", dest="compile", action="store_false", help="skip archlab-compile"
    )
    p.add_argument(
        "--no-bf16",
        dest="bf16",
        action="store_false",
        help="skip the bf16 autocast rows (run only where the CPU has avx512_bf16 or amx_bf16)",
    )
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--impl", help=argparse.SUPPRESS)
    p.add_argument("--shape", help=argparse.SUPPRESS)
    for dim in ("m", "k", "n"):
        p.add_argument(f"--{dim}", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        print(json.dumps(worker(args)))
        return
    args.repeats = args.repeats or (2 if args.quick else 3)
    args.compile = args.compile and not args.quick
    drive(args)


if __name__ == "__main__":
    main()

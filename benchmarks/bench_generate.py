"""Decoding benchmark: KV-cache bytes and decode speed for MHA / GQA / MQA, and
archlab vs transformers.

1. KV cache: for MHA, GQA (n_heads/4 KV heads) and MQA at the same width, the bytes `KVCache`
   allocates against 2 * n_layers * n_kv_heads * head_dim * bytes * tokens, and greedy decode
   tokens/s at batch 1.
2. archlab `generate` vs transformers `LlamaForCausalLM.generate` on the same weights, for several
   model sizes and prompt lengths: transformers' Llama is built from the same shapes and given our
   weights by name (q/k/v are row slices of our fused `qkv_proj`, gate/up of `gate_up_proj`); logits
   and greedy tokens are checked to match before timing. Greedy, batch 1, no EOS, runs interleaved;
   the speed-up is the median over repeats of the paired ratio (both runs of a repeat back to
   back, so machine drift cancels). Decode tokens/s counts tokens 2..N over their time for both
   (archlab: `Generation.decode_seconds`; transformers: a streamer noting when each token arrives),
   so prefill and first token are excluded alike. archlab runs three ways: eager (the default),
   `compile_decode=True` (`--compile`: the Decoder times the compiled step against eager on this
   machine and keeps the faster, named in the `picked` column), and `compile_decode="always"` (the
   compiled step whatever it measures), so the table shows the fallback at work.
3. Why the speed-up shrinks with size: an eager step with row-major and column-major Linear weights
   (what `generate`'s decode layout buys), the compiled step, and the time to stream the weights'
   bytes once (torch.sum over a buffer as large), the floor for a memory-bound step and so a ceiling
   on any speed-up over transformers; each path's step as a fraction of that floor.

    .venv/bin/python benchmarks/bench_generate.py            # the figures in docs/inference.md
    .venv/bin/python benchmarks/bench_generate.py --quick    # a minute: fewer tokens and sizes
    # issue 12's decode target, its shape and lengths
    .venv/bin/python benchmarks/bench_generate.py --sizes llama --prompt-lens 128 \\
        --new-tokens 256 --repeats 9

Prints markdown tables. CPU threads default to 1: on a shared machine OpenMP spin-waits make
multi-thread timings of small matmuls meaningless; pass --threads to change it.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time
from collections.abc import Callable

import torch
import transformers
from transformers import LlamaConfig, LlamaForCausalLM

from archlab import KVCache, ModelConfig, TransformerLM
from archlab.costs import kv_cache_bytes
from archlab.infer.engine import Decoder
from archlab.infer.generate import generate
from archlab.infer.sampling import SamplingConfig
from archlab.infer.speed import (
    column_major_linears,
    compiled_forward,
    reduction_gemvs_win,
    row_major_linears,
)
from archlab.interop.hf import hf_state_dict

# (name, d_model, n_layers, n_heads, n_kv_heads, vocab_size): archlab's tiny and small sizes (byte
# vocabulary), a model whose 32k-token head dominates a decode step, as in real LLMs (GQA, n_heads/4
# KV heads), and `llama`, the shape issue 12 states its decode target on (MHA, SwiGLU d_ff 1408:
# `--sizes llama --prompt-lens 128 --new-tokens 256`)
SIZES = [
    ("tiny", 64, 2, 4, 1, 256),
    ("small", 256, 6, 8, 2, 256),
    ("medium", 512, 8, 16, 4, 32000),
    ("llama", 512, 8, 8, 8, 8192),
]


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--new-tokens", type=int, default=128)
    p.add_argument(
        "--prompt-lens", default="32,1024", help="comma-separated prompt lengths for part 2"
    )
    p.add_argument(
        "--kv-prompt-len", type=int, default=1024, help="prompt length for the MHA/GQA/MQA table"
    )
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument(
        "--sizes", default=",".join(s[0] for s in SIZES), help="comma-separated rows of SIZES"
    )
    p.add_argument(
        "--quick", action="store_true", help="32 new tokens, prompts 32 and 256, 3 repeats"
    )
    return p.parse_args()


def build(
    d_model: int, n_layers: int, n_heads: int, vocab_size: int, n_kv_heads: int, max_len: int
) -> TransformerLM:
    torch.manual_seed(0)
    config = ModelConfig(
        vocab_size=vocab_size,
        d_model=d_model,
        n_layers=n_layers,
        n_heads=n_heads,
        n_kv_heads=n_kv_heads,
        max_seq_len=max_len,
    )
    return TransformerLM(config).eval()


def ours(decoder: Decoder, prompt: list[int], n: int) -> Callable[[], float]:
    """A run of archlab greedy generation returning its decode tokens/s (timed inside
    the decode loop)."""

    def run() -> float:
        g = decoder.generate([prompt], SamplingConfig(max_new_tokens=n, temperature=0))
        return g.decode_steps / g.decode_seconds

    return run


class TokenClock:
    """A transformers streamer that only notes when each token arrives (put: the prompt,
    then every token)."""

    def __init__(self) -> None:
        self.times: list[float] = []

    def put(self, value: torch.Tensor) -> None:
        self.times.append(time.perf_counter())

    def end(self) -> None:
        """Called once generation finishes; the times are already noted."""


def theirs(hf: LlamaForCausalLM, prompt: list[int], n: int) -> Callable[[], float]:
    """A run of transformers greedy generation returning its decode tokens/s: tokens 2..n
    over their time."""
    ids = torch.tensor([prompt])

    def run() -> float:
        clock = TokenClock()
        hf.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=n,
            do_sample=False,
            streamer=clock,
        )
        return (len(clock.times) - 2) / (clock.times[-1] - clock.times[1])

    return run


def decode_rates(runs: dict[str, Callable[[], float]], repeats: int) -> dict[str, list[float]]:
    """Decode tokens/s of each run (the prefill and first token excluded
    alike), runs interleaved."""
    for run in runs.values():
        run()  # warm-up
    rates: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            with torch.inference_mode():
                rates[name].append(run())
    return rates


def kv_table(args: argparse.Namespace) -> None:
    _, d, layers, h, _, vocab = SIZES[1]
    context = args.kv_prompt_len + args.new_tokens
    prompt = [i % vocab for i in range(args.kv_prompt_len)]
    print(
        f"\n## KV cache: d_model={d}, {layers} layers, {h} heads of {d // h}, fp32, batch 1, "
        f"context {args.kv_prompt_len}+{args.new_tokens}\n"
    )
    print(
        "| attention | KV heads | bytes/token (formula) | cache bytes allocated | formula x "
        "context | decode tok/s (median) |"
    )
    print("|---|---|---|---|---|---|")
    models = {
        name: build(d, layers, h, vocab, k, context)
        for name, k in (("MHA", h), ("GQA", h // 4), ("MQA", 1))
    }
    decoders = {name: Decoder(m) for name, m in models.items()}
    rates = decode_rates(
        {name: ours(d, prompt, args.new_tokens) for name, d in decoders.items()}, args.repeats
    )
    for decoder in decoders.values():
        decoder.close()
    for name, model in models.items():
        c = model.config
        # archlab.costs: the formula `archlab inspect` prints
        kv = kv_cache_bytes(c, context, "fp32")
        allocated = KVCache.for_model(model, 1, context).nbytes()
        print(
            f"| {name} | {c.n_kv_heads} | {kv['per_token']:,} | {allocated:,} | {kv['context']:,} "
            f"| {statistics.median(rates[name]):.1f} |"
        )


def to_transformers(model: TransformerLM) -> LlamaForCausalLM:
    """transformers' Llama with our weights."""
    c = model.config
    hf = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=c.vocab_size,
            hidden_size=c.d_model,
            intermediate_size=c.d_ff,
            num_hidden_layers=c.n_layers,
            num_attention_heads=c.n_heads,
            num_key_value_heads=c.n_kv_heads,
            head_dim=c.head_dim,
            max_position_embeddings=c.max_seq_len,
            rms_norm_eps=c.norm_eps,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "default", "rope_theta": c.rope_theta},
            bos_token_id=None,
            eos_token_id=None,
            pad_token_id=0,
        )
    )
    hf.load_state_dict(
        {k: v.clone() for k, v in hf_state_dict(model, "llama").items()}, strict=True
    )
    return hf.eval()


def versus_transformers(args: argparse.Namespace) -> list[tuple[str, TransformerLM, float]]:
    """Part 2; returns each model with transformers' step milliseconds at the first prompt length,
    for part 3."""
    print(
        f"\n## archlab vs transformers {transformers.__version__}: Llama, greedy, "
        f"batch 1, {args.new_tokens} new tokens, decode tokens/s (median of {args.repeats})\n"
    )
    print(
        "Speed-ups are medians of paired ratios (min-max). `--compile` is "
        "`compile_decode=True`, which decodes "
        'with the step it measured faster (`picked`); `forced` is `compile_decode="always"`; '
        "`compile s` is "
        "the first compiled call (compile and measurement; ~0 once the graph exists "
        "for this model).\n"
    )
    print(
        "| model | prompt | max logit diff | same tokens | transformers tok/s | archlab tok/s "
        "| speed-up | --compile tok/s | speed-up | picked | forced compiled tok/s | speed-up | "
        "compile s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    lengths = [int(n) for n in args.prompt_lens.split(",")]
    compared = []
    for name, d, layers, h, kv, vocab in (s for s in SIZES if s[0] in args.sizes.split(",")):
        model = build(d, layers, h, vocab, kv, max(lengths) + args.new_tokens)
        hf = to_transformers(model)
        for length in lengths:
            prompt = [(7 * i + 3) % vocab for i in range(length)]
            greedy = SamplingConfig(max_new_tokens=args.new_tokens, temperature=0)
            # one model copy per decoder: a Decoder owns its model's layout while open
            decoders = {
                "archlab": Decoder(copy.deepcopy(model)),
                "compile": Decoder(copy.deepcopy(model), True),
                "forced": Decoder(copy.deepcopy(model), "always"),
            }
            start = time.perf_counter()
            compiled_tokens = decoders["compile"].generate([prompt], greedy).tokens[0]
            compile_s = time.perf_counter() - start
            decoders["forced"].generate([prompt], greedy)  # its compile, untimed
            with torch.inference_mode():
                ids = torch.tensor([prompt])
                diff = (model(ids) - hf(ids).logits).abs().max().item()
                hf_tokens = hf.generate(
                    ids,
                    attention_mask=torch.ones_like(ids),
                    max_new_tokens=args.new_tokens,
                    do_sample=False,
                )[0, length:].tolist()
            same = generate(model, [prompt], greedy).tokens[0] == hf_tokens == compiled_tokens
            runs = {key: ours(d, prompt, args.new_tokens) for key, d in decoders.items()}
            rates = decode_rates(
                {**runs, "transformers": theirs(hf, prompt, args.new_tokens)}, args.repeats
            )
            picked = decoders["compile"].mode
            for decoder in decoders.values():
                decoder.close()
            hf_rate = statistics.median(rates["transformers"])
            if length == lengths[0]:
                first_hf_ms = 1e3 / hf_rate
            cells = []
            for run in ("archlab", "compile", "forced"):
                # each repeat runs all back to back, so their ratio cancels the machine's
                # drift between repeats
                ratios = sorted(x / y for x, y in zip(rates[run], rates["transformers"]))
                cells += [
                    f"{statistics.median(rates[run]):.0f}",
                    f"{statistics.median(ratios):.2f}x ({ratios[0]:.2f}-{ratios[-1]:.2f})",
                ]
                if run == "compile":
                    cells.append(picked)
            print(
                f"| {name} (d={d}, {layers} layers, {h}/{kv} heads, V={vocab}) | {length} | "
                f"{diff:.1e} | {same} | {hf_rate:.0f} | {' | '.join(cells)} | {compile_s:.1f} |",
                flush=True,
            )
        compared.append((name, model, first_hf_ms))
    return compared


def step_ms(
    model: TransformerLM,
    prompt_len: int,
    steps: int,
    step: Callable[..., torch.Tensor] | None = None,
) -> float:
    """Median milliseconds of a one-token step, eager or `step` (cache filled
    with prompt_len tokens)."""
    cache = KVCache.for_model(model, 1, prompt_len + steps + 1)
    token = torch.tensor([[1]])
    times = []
    with torch.inference_mode():
        model(torch.ones(1, prompt_len, dtype=torch.long), cache=cache)
        for _ in range(steps):
            start = time.perf_counter()
            (model if step is None else step)(token, cache=cache)
            times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def layout_and_roofline(
    args: argparse.Namespace, compared: list[tuple[str, TransformerLM, float]]
) -> None:
    """What the column-major weights buy, and the fastest step that memory bandwidth allows."""
    print(
        "\n## Weight layout and the bandwidth bound: archlab's one-token steps, prompt 32, median "
        f"ms of {args.new_tokens} steps, best of {args.repeats} rounds\n"
    )
    print(
        "`weight MB` is what a step reads (every weight once; of an untied embedding table only "
        "a row). `stream` is torch.sum over as many bytes, the fastest a memory-bound step can "
        "be (the bandwidth floor); `of floor` is stream / step, the fraction of the floor a path "
        "reaches; `best speed-up` divides transformers' step (part 2, first prompt length) by the "
        "floor. The transformers column comes from part 2, minutes earlier: on a loaded machine "
        "compare it only with part 2's own figures. `compiled` "
        'is the step `generate(..., compile_decode="always")` runs: its one-token products '
        "as Inductor reductions "
        "over row-major weights (marked `R`) where they measured faster than MKL's, else MKL "
        "over column-major ones.\n"
    )
    print(
        "| model | weight MB read per step | row-major ms | column-major ms | layout gain | "
        "compiled ms | stream ms | eager of floor | compiled of floor | transformers of floor | "
        "best speed-up |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, model, hf_ms in compared:
        rows, cols, comp = [], [], []
        reduce = reduction_gemvs_win(model)  # what a Decoder's compiled step would use here
        for _ in range(args.repeats):
            rows.append(step_ms(model, 32, args.new_tokens))
            if reduce:
                comp.append(
                    step_ms(
                        model, 32, args.new_tokens, compiled_forward(model, reduce_linears=True)
                    )
                )
            changed = column_major_linears(model)  # the Decoder's layout
            cols.append(step_ms(model, 32, args.new_tokens))
            if not reduce:
                comp.append(step_ms(model, 32, args.new_tokens, compiled_forward(model)))
            row_major_linears(changed)
        table = model.embed_tokens.weight  # a step reads one row of it, unless it is also the head
        weight_bytes = sum(
            p.numel() * p.element_size()
            for p in model.parameters()
            if p is not table or model.config.tie_embeddings
        )
        buf = torch.ones(weight_bytes // 4)
        streams = []
        for _ in range(args.repeats * 5):
            start = time.perf_counter()
            buf.sum()
            streams.append(time.perf_counter() - start)
        stream = 1e3 * min(streams)
        row, col, com = min(rows), min(cols), min(comp)
        print(
            f"| {name} | {weight_bytes / 1e6:.1f} | {row:.2f} | {col:.2f} | {row / col:.2f}x "
            f"| {com:.2f}{' R' if reduce else ''} | {stream:.2f} | {stream / col:.0%} | "
            f"{stream / com:.0%} | {stream / hf_ms:.0%} | {hf_ms / stream:.1f}x |",
            flush=True,
        )


def main() -> None:
    args = parse_args()
    if args.quick:
        args.new_tokens, args.prompt_lens, args.kv_prompt_len, args.repeats = 32, "32,256", 256, 3
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} CPU thread(s)")
    if "small" in args.sizes.split(","):  # part 1 is on the small size
        kv_table(args)
    layout_and_roofline(args, versus_transformers(args))


if __name__ == "__main__":
    main()

"""costs.py against the built model: parameter counts by part, FLOPs by torch's FLOP counter,
KV bytes by the cache's buffers (window layers keep their window) and by the memory report; and
`archlab inspect` end to end."""

import json
import subprocess
import sys

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from archlab import KVCache, ModelConfig, TransformerLM, build_preset
from archlab.cli import main
from archlab.costs import (
    flops_per_token,
    kv_cache_bytes,
    kv_tokens_within,
    parameter_counts,
    state_bytes,
)
from archlab.infer.generate import generate
from archlab.infer.memory import memory_report
from archlab.infer.sampling import SamplingConfig
from archlab.nn.config import VQ, Favor
from archlab.nn.presets import PRESETS

PART_OF = [  # parameter-name fragment -> part in parameter_counts
    ("embed_tokens", "embedding"),
    ("pos_embed", "positions"),
    ("rel_bias", "position bias"),
    ("attn.", "attention"),
    ("mlp.", "mlp"),
    ("norm", "norms"),
    ("lm_head", "lm_head"),
]


def _by_part(model: TransformerLM) -> dict[str, int]:
    parts = {part: 0 for _, part in PART_OF}
    for name, p in model.named_parameters():
        part = next(part for frag, part in PART_OF if frag in name)
        parts[part] += p.numel()
    return parts


@pytest.mark.parametrize("preset", list(PRESETS))
@pytest.mark.parametrize("size", ["tiny", "small", "gpt2-small"])
def test_parameter_count_by_part_matches_model(preset, size):
    cfg = build_preset(preset, size)
    with torch.device("meta"):
        model = TransformerLM(cfg)
    counts = parameter_counts(cfg)
    assert counts["total"] == sum(p.numel() for p in model.parameters())
    for part, n in _by_part(model).items():
        assert counts[part] == n, part


def test_gpt2_small_is_124m():
    assert abs(parameter_counts(build_preset("gpt2", "gpt2-small"))["total"] - 124.4e6) < 0.1e6


@pytest.mark.parametrize("preset", ["llama", "gemma2", "neox", "palm", "original"])
def test_flops_match_torch_flop_counter(preset):
    cfg = build_preset(preset, "tiny", attn_impl="eager", max_seq_len=32)
    model = TransformerLM(cfg)
    t = 24
    with FlopCounterMode(display=False) as counter:
        model(torch.randint(0, cfg.vocab_size, (1, t)))
    # the eager path multiplies every query with all T keys (masked afterwards); for sliding
    # layers the formula counts only the window, so compare the full-attention count
    # with sliding_window ignored
    full = ModelConfig(**{**cfg.to_dict(), "sliding_window": None})
    assert counter.get_total_flops() == t * flops_per_token(full, t)["forward"]


def test_sliding_window_reduces_attention_flops():
    full = ModelConfig(max_seq_len=1024)
    windowed = ModelConfig(max_seq_len=1024, sliding_window=128, window_pattern="SF")
    f, w = flops_per_token(full)["attention"], flops_per_token(windowed)["attention"]
    assert w == f // 2 + f // 2 // 8


@pytest.mark.parametrize("window", [None, 10, 100])
@pytest.mark.parametrize("n_kv", [4, 2, 1])
def test_kv_bytes_match_cache_buffers(n_kv, window):
    cfg = ModelConfig(
        n_heads=4,
        n_kv_heads=n_kv,
        max_seq_len=64,
        n_layers=3,
        sliding_window=window,
        window_pattern="SF",
    )
    cache = KVCache.for_model(TransformerLM(cfg), batch_size=3, max_len=64)
    assert cache.nbytes() == kv_cache_bytes(cfg, 64, "fp32", batch=3)["context"]
    slots = 64 + 64 + 64 if window is None or window >= 64 else window + 64 + window  # layers S F S
    assert cache.nbytes() == 3 * slots * 2 * n_kv * cfg.head_dim * 4
    assert (
        kv_cache_bytes(cfg, dtype="fp32")["per_token"] == 2 * cfg.n_layers * n_kv * cfg.head_dim * 4
    )


@pytest.mark.parametrize("pattern", ["SF", "S", "F"])
def test_kv_tokens_within_a_budget(pattern):
    """The longest context whose cache fits, against a scan of the formula; never outgrown with
    every layer windowed."""
    cfg = ModelConfig(n_layers=3, max_seq_len=64, sliding_window=8, window_pattern=pattern)
    for budget in (0, 5_000, 60_000, 200_000, 10**6):
        fitting = [t for t in range(1, 2000) if kv_cache_bytes(cfg, t, "fp32")["context"] <= budget]
        within = kv_tokens_within(cfg, budget, "fp32")
        if pattern == "S" and fitting and fitting[-1] == 1999:
            assert within is None
        else:
            assert within == (fitting[-1] if fitting else 0)


def test_inspect_allocated_and_reported_kv_bytes_agree_for_a_windowed_model(capsys):
    """One formula: `archlab inspect`'s KV bytes == what the cache of a gemma2 model
    (alternating windowed and full layers) allocates while generating 3 windows of context ==
    the `--report-memory` figures."""
    cfg = build_preset("gemma2", "tiny")  # window 64 on layer 0, layer 1 full
    context = 3 * cfg.sliding_window
    assert (
        main(
            [
                "inspect",
                "--preset",
                "gemma2",
                "--size",
                "tiny",
                "--context",
                str(context),
                "--dtype",
                "fp32",
                "--json",
            ]
        )
        == 0
    )
    inspected = json.loads(capsys.readouterr().out)["kv_cache_bytes"]["context"]
    torch.manual_seed(0)
    model = TransformerLM(cfg).eval()
    sampling = SamplingConfig(
        max_new_tokens=context - 8, temperature=0.0, past_context="extrapolate"
    )
    result = generate(model, [list(range(1, 9))], sampling)
    assert result.context_len == context
    assert (
        inspected
        == result.cache_bytes
        == (context + cfg.sliding_window) * 2 * cfg.n_kv_heads * cfg.head_dim * 4
    )
    report = memory_report(model, result, torch.device("cpu"))
    assert f"allocated {inspected:,} bytes" in report
    assert (
        f"{inspected:,} B for the context; outweighs"
        in report.split("<- this model")[0].splitlines()[-1]
    )


def test_inspect_cli_json_and_errors():
    run = [
        sys.executable,
        "-m",
        "archlab",
        "inspect",
        "--preset",
        "qwen3",
        "--size",
        "small",
        "--json",
    ]
    out = subprocess.run(run + ["--n_layers", "3"], capture_output=True, text=True, check=True)
    got = json.loads(out.stdout)
    cfg = build_preset("qwen3", "small", n_layers=3)
    assert got["params"]["total"] == sum(p.numel() for p in TransformerLM(cfg).parameters())
    bad = subprocess.run(run + ["--n_kv_heads", "3"], capture_output=True, text=True)
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        "archlab inspect: error: ModelConfig.n_kv_heads=3 is not allowed: must divide n_heads=8 "
        "(1 = MQA)"
    ]
    table = subprocess.run(run[:-1], capture_output=True, text=True, check=True).stdout
    assert "total" in table and "KV cache / token" in table


@pytest.mark.parametrize(
    "fields",
    [
        dict(attn_kernel="favor", favor=Favor(features=24)),
        dict(attn_kernel="vq", vq=VQ(codes=16, block=4)),
        dict(attn_kernel="vq", vq=VQ(codes=16, block=4), position="alibi"),
    ],
)
@pytest.mark.parametrize("context", [3, 9, 16])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_state_bytes_match_the_cache_after_decoding(fields, context, dtype):
    """A linear kernel's cache holds no K/V: kv_cache_bytes is its state, 0 per token, never
    outweighing the weights; it equals KVCache.nbytes() after `context` tokens (prefill + decode)
    and ignores max_len. The state is float32 in a bf16 model too (the kernels run in float32), so
    its bytes do not halve with the weights'."""
    cfg = ModelConfig(d_model=32, n_heads=4, n_kv_heads=2, n_layers=2, vocab_size=64, **fields)
    model = TransformerLM(cfg).eval().to(getattr(torch, dtype))
    cache = KVCache.for_model(model, 2, 1000)
    with torch.no_grad():
        model(torch.randint(0, 64, (2, context - 1)), cache=cache)
        model(torch.randint(0, 64, (2, 1)), cache=cache)
    kv = kv_cache_bytes(cfg, context, dtype, batch=2)
    assert kv == {"per_token": 0, "context": cache.nbytes()}
    assert kv_tokens_within(cfg, 1) is None


def test_favor_decode_flops_match_the_counter():
    """The FAVOR attention term per token (4 (H + K) M Dh) against torch's count of one decode step,
    within the +1 columns of z and the elementwise work the formula leaves out (10%)."""
    cfg = ModelConfig(
        d_model=64,
        n_heads=4,
        n_kv_heads=2,
        n_layers=2,
        vocab_size=64,
        attn_kernel="favor",
        favor=Favor(features=128),
    )
    model = TransformerLM(cfg).eval()
    cache = KVCache.for_model(model, 1, 64)
    with torch.no_grad():
        model(torch.randint(0, 64, (1, 8)), cache=cache)
        with FlopCounterMode(display=False) as counter:
            model(torch.randint(0, 64, (1, 1)), cache=cache)
    flops = flops_per_token(cfg)
    measured = counter.get_total_flops() - flops["matmul"]
    assert abs(measured - flops["attention"]) < 0.1 * flops["attention"], (
        measured,
        flops["attention"],
    )


def test_memory_report_of_a_linear_kernel_names_its_state_and_attention_flops():
    """`generate --report-memory` on a FAVOR model: the allocated bytes are the state's
    (costs.state_bytes after the tokens decoded), said to be of one size, with the kernel's
    attention FLOPs per token (costs.py) beside softmax's 4 H Dh T per layer."""
    cfg = ModelConfig(
        d_model=32,
        n_heads=4,
        n_kv_heads=2,
        n_layers=2,
        vocab_size=64,
        attn_kernel="favor",
        favor=Favor(features=24),
    )
    model = TransformerLM(cfg).eval()
    result = generate(model, [[1, 2, 3, 4, 5]], SamplingConfig(max_new_tokens=6, temperature=0.0))
    report = memory_report(model, result, torch.device("cpu")).splitlines()
    assert report[0].startswith("Decoding state of attn_kernel='favor' (torch.float32")
    assert report[0].endswith(f"allocated {kv_cache_bytes(cfg, 11, 'fp32')['context']:,} bytes")
    assert report[1] == (
        "  one size at any context: per layer and K/V head the running sums [S | z] of 24 "
        f"features x (head_dim + 1), {kv_cache_bytes(cfg, 11, 'fp32')['context']:,} bytes"
    )
    attention = flops_per_token(cfg, result.context_len)["attention"]
    assert report[2] == (
        f"  attention FLOPs per token: {attention:,} (softmax attention at this context: "
        f"{4 * 4 * 8 * result.context_len * 2:,})"
    )


def test_the_vq_state_is_bounded_not_constant_and_the_report_says_so():
    """Transformer-VQ's decoding state rises and falls with the position in the block (its tail runs
    from L to 2L - 1 tokens): the bytes the cache really holds at several contexts differ, never
    pass the bound (state_bytes_bound), reach it at a tail of 2L - 1, and the memory report says
    bounded, with that bound."""
    from archlab.costs import state_bytes_bound

    cfg = ModelConfig(
        d_model=32,
        n_heads=4,
        n_kv_heads=2,
        n_layers=2,
        vocab_size=64,
        attn_kernel="vq",
        vq=VQ(codes=16, block=8),
        max_seq_len=128,
    )
    model = TransformerLM(cfg).eval()
    held = {}
    for n in (3, 8, 12, 15, 16, 40, 47):  # tails 3, 8, 12, 15 (= 2L - 1), 8, 8, 15
        cache = KVCache.for_model(model, 1, n)
        with torch.no_grad():
            model(torch.randint(0, 64, (1, n)), cache=cache)
        held[n] = cache.nbytes()
        assert held[n] == state_bytes(cfg, n, "fp32")
    bound = state_bytes_bound(cfg, "fp32")
    assert len(set(held.values())) > 2 and max(held.values()) == held[15] == held[47] == bound
    assert held[16] == held[40] < bound  # the tail shrinks back to one block when a block completes
    result = generate(model, [[1, 2, 3]], SamplingConfig(max_new_tokens=4, temperature=0.0))
    report = memory_report(model, result, torch.device("cpu")).splitlines()
    assert "one size" not in "\n".join(report)
    assert report[1] == (
        "  bounded, not constant: per layer the exact tail (the last complete block of 8 tokens "
        "and the current one, 8 to 15 tokens, each held as its assignment row of 16 codes and its "
        "value) and per K/V head the 16 codes' value sums and counts; it rises and falls with the "
        f"position in the block, at most {bound:,} bytes at any context"
    )

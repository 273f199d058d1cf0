"""`archlab eval length` (archlab.eval.length): each method's scaling at each length, the last-tokens scoring
against a direct slice of the full logits, errors before any compute, and the command end to end on a tiny
checkpoint (table, CSV, PNG)."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from archlab import ModelConfig, TransformerLM
from archlab.checkpoint import save_checkpoint, tied_aliases
from archlab.cli import main
from archlab.data.tokenizer import build_tokenizer
from archlab.eval.length import METHODS, evaluate_lengths, method_configs, method_scaling, window_loss, windows
from archlab.nn.functional import cross_entropy
from archlab.nn.rerope import relative_positions
from archlab.nn.rope import RopeScaling

SMALL = dict(d_model=32, n_heads=4, n_layers=2, max_seq_len=16, vocab_size=256)


def tiny(**fields: object) -> TransformerLM:
    torch.manual_seed(0)
    return TransformerLM(ModelConfig(**{**SMALL, **fields})).eval()


def test_each_method_scales_to_the_target_length() -> None:
    assert method_scaling("none", 64, 16) is None
    assert method_scaling("linear", 64, 16) == RopeScaling("linear", 4.0)
    assert method_scaling("yarn", 64, 16) == RopeScaling("yarn", 4.0, 16)
    assert method_scaling("ntk", 8, 16) == RopeScaling("ntk", 1.0)  # never below 1
    assert method_scaling("rerope", 64, 16) == RopeScaling("rerope", window=8)
    leaky = method_scaling("leaky_rerope", 64, 16, window=6, leaky_k="train")  # the older mapping, kept
    longest = relative_positions(torch.tensor([[63]]), torch.tensor([[0]]), 6, leaky.factor)
    assert float(longest) == pytest.approx(15)  # the longest distance lands on the longest one trained
    with pytest.raises(ValueError, match="scaling 'rope2' is not allowed"):
        method_scaling("rope2", 64, 16)


def test_windows_are_scored_on_their_last_tokens() -> None:
    model = tiny()
    tokens = np.arange(300) % 97
    batch = windows(tokens, 24, 3)
    assert batch.shape == (3, 25) and batch[-1, -1] == tokens[-1]
    with torch.no_grad():
        direct = [float(cross_entropy(model(row[None, :-1])[:, -5:], row[None, -5:])) for row in batch]
    assert window_loss(model, batch, 5) == pytest.approx(sum(direct) / 3, rel=1e-6)


def test_evaluate_lengths_loads_the_same_weights_under_each_method() -> None:
    model = tiny()
    tokens = np.random.default_rng(0).integers(0, 256, 400)
    results = evaluate_lengths(model, tokens, [16, 32], ["none", "linear", "rerope"], 8, n_windows=2,
                               allow_extrapolation=True, progress=False)
    assert [(r.method, r.length) for r in results] == [(m, n) for m in ("none", "linear", "rerope") for n in (16, 32)]
    by = {(r.method, r.length): r.loss for r in results}
    assert by["none", 16] == by["linear", 16]  # factor 1 at the training length
    scaled = TransformerLM(ModelConfig(**SMALL, rope_scaling=RopeScaling("linear", 2.0))).eval()
    scaled.load_state_dict(model.state_dict())
    assert by["linear", 32] == pytest.approx(window_loss(scaled, windows(tokens, 32, 2), 8), rel=1e-6)
    assert by["none", 32] != by["linear", 32]


def test_lengths_past_the_context_and_scalings_without_rope_fail_before_compute() -> None:
    tokens = np.zeros(100, dtype=np.int64)
    with pytest.raises(ValueError, match=r"^length 32 is past the 16 tokens that scaling 'none' covers for this "
                                         r"model \(trained at 16\): pass --allow-extrapolation") as err:
        evaluate_lengths(tiny(), tokens, [16, 32], ["linear", "none"], 8, progress=False)
    assert "max_new_tokens" not in str(err.value)  # generate's wording does not belong here
    with pytest.raises(ValueError, match="scaling 'linear' needs a RoPE model"):
        evaluate_lengths(tiny(position="alibi"), tokens, [16], ["linear"], 8, progress=False)
    with pytest.raises(ValueError, match="too few for length 200"):
        evaluate_lengths(tiny(), tokens, [200], ["rerope"], 8, progress=False)


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    model = tiny()
    tokenizer_file = build_tokenizer("byte", 256, None).save(tmp_path / "tok")
    opt = torch.optim.AdamW(model.parameters())
    return save_checkpoint(tmp_path / "run", 1, model.state_dict(), opt.state_dict(), {"step": 1},
                           {"model": model.config.to_dict(), "train": {}}, tokenizer_file, tied_aliases(model))


def test_cli_writes_table_csv_and_plot(checkpoint: Path, tmp_path: Path, capsys) -> None:
    text = tmp_path / "held_out.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 20, encoding="utf-8")
    out = tmp_path / "eval"
    argv = ["eval", "length", "--checkpoint", str(checkpoint), "--lengths", "16,32,64", "--data", str(text),
            "--windows", "2", "--allow-extrapolation", "--out", str(out), "--no-progress"]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "| method | 16 | 32 | 64 |" in printed and "| leaky_rerope |" in printed
    rows = list(csv.DictReader((out / "length.csv").open()))
    assert [r["method"] for r in rows[::3]] == list(METHODS) and len(rows) == 3 * len(METHODS)
    assert all(math.isclose(math.exp(float(r["loss"])), float(r["perplexity"]), rel_tol=1e-3) for r in rows)
    assert (out / "length.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_errors_are_one_line(checkpoint: Path, capsys) -> None:
    assert main(["eval", "length", "--checkpoint", str(checkpoint), "--lengths", "16,32", "--data", "nope"]) == 2
    assert "archlab eval: error: --data: nope is neither" in capsys.readouterr().err
    assert main(["eval", "length", "--checkpoint", str(checkpoint), "--lengths", "16,x"]) == 2
    assert "--lengths '16,x' is not allowed" in capsys.readouterr().err


def test_progress_without_a_terminal_is_plain_log_lines(capsys, caplog) -> None:
    """Piped to a log file (stderr is not a terminal under pytest), progress is one line per cell, no \\r redraws."""
    tokens = np.arange(200, dtype=np.int64) % 50
    with caplog.at_level("INFO", logger="archlab.eval.length"):
        evaluate_lengths(tiny(), tokens, [8, 16], ["none"], 4, n_windows=1, progress=True)
    assert "\r" not in capsys.readouterr().err
    lines = [r.getMessage() for r in caplog.records if r.name == "archlab.eval.length"]
    assert len(lines) == 2 and lines[0].startswith("eval length 1/2: none at 8 tokens, loss ")


def largest_position(length: int, scaling: RopeScaling) -> float:
    """The largest relative position any query of a `length`-token window sees, from every (m, n) pair."""
    pos = torch.arange(length)[None]
    return float(relative_positions(pos, pos, scaling.window, scaling.factor)[0].tril().max())


@pytest.mark.parametrize("train_len,window", [(256, None), (256, 64), (256, 100), (16, None), (64, 8)])
def test_leaky_slope_by_su_rule_keeps_every_position_within_half_the_training_length(
    train_len: int, window: int | None,
) -> None:
    """Su (kexue.fm/archives/9708): W + (L - 1 - W) / k <= N / 2 at every test length, and k never below 16."""
    for length in (train_len, 2 * train_len, 3 * train_len + 5, 8 * train_len, 16 * train_len):
        scaling = method_scaling("leaky_rerope", length, train_len, window)
        assert scaling.window == (train_len // 4 if window is None else window)
        assert largest_position(length, scaling) <= train_len / 2 + 1e-9, (length, scaling)
        assert scaling.factor >= 16
    at_8x = method_scaling("leaky_rerope", 2048, 256, 64)
    assert at_8x.factor == pytest.approx((2047 - 64) / (128 - 64))  # about 31, against the older mapping's ~10
    assert method_scaling("leaky_rerope", 2048, 256, 64, leaky_k="train").factor == pytest.approx(1983 / 191)
    assert method_scaling("leaky_rerope", 2048, 256, 64, leaky_k=8).factor == 8.0  # k given


@pytest.mark.parametrize("kwargs,message", [
    (dict(window=128), r"^window=128 is not allowed with leaky_k='half': below max_seq_len / 2 = 128"),
    (dict(window=64, leaky_k=0.5), r"^leaky_k=0.5 is not allowed"),
    (dict(window=64, leaky_k="half2"), r"^leaky_k='half2' is not allowed"),
])
def test_leaky_slope_bad_inputs_fail_in_one_line(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message) as err:
        method_scaling("leaky_rerope", 2048, 256, **kwargs)
    assert "\n" not in str(err.value)


def test_logn_at_inference_changes_nothing_within_the_training_length() -> None:
    """--logn (ModelConfig.with_inference_logn) scales queries past max_seq_len only; a log-n model is refused."""
    model = tiny()
    tokens = np.random.default_rng(0).integers(0, 256, 400)
    args = dict(n_windows=2, allow_extrapolation=True, progress=False)
    plain = {(r.method, r.length): r.loss for r in evaluate_lengths(model, tokens, [16, 32], ["none"], 8, **args)}
    logn = {(r.method, r.length): r.loss
            for r in evaluate_lengths(model, tokens, [16, 32], ["none"], 8, logn=True, **args)}
    assert logn["none", 16] == plain["none", 16] and logn["none", 32] != plain["none", 32]
    configs = method_configs(model.config, ["none", "yarn"], [32], None, True, logn=True)
    assert all(c.attn_logn and c.attn_logn_clip for c in configs.values())
    with pytest.raises(ValueError, match=r"attn_logn=True is not allowed: False for log-n at inference only"):
        evaluate_lengths(tiny(attn_logn=True), tokens, [16], ["none"], 8, logn=True, **args)


def test_cli_logn_and_leaky_k(checkpoint: Path, tmp_path: Path, capsys) -> None:
    text = tmp_path / "held_out.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 20, encoding="utf-8")
    base = ["eval", "length", "--checkpoint", str(checkpoint), "--lengths", "16,32", "--data", str(text),
            "--windows", "2", "--allow-extrapolation", "--no-progress", "--scalings", "none,leaky_rerope"]
    tables = {}
    for flags in ([], ["--logn"], ["--leaky-k", "train"]):
        assert main([*base, "--out", str(tmp_path / "-".join(flags or ["plain"])), *flags]) == 0
        tables[tuple(flags)] = {(r["method"], r["length"]): r["loss"] for r in csv.DictReader(
            (tmp_path / "-".join(flags or ["plain"]) / "length.csv").open())}
        capsys.readouterr()
    plain, logn, train = tables[()], tables[("--logn",)], tables[("--leaky-k", "train")]
    assert logn["none", "16"] == plain["none", "16"] and logn["none", "32"] != plain["none", "32"]
    assert train["none", "32"] == plain["none", "32"] and train["leaky_rerope", "32"] != plain["leaky_rerope", "32"]
    assert main([*base, "--leaky-k", "x"]) == 2
    assert "--leaky-k='x' is not allowed" in capsys.readouterr().err


def test_an_inverse_leaky_checkpoint_evaluates_as_plain_rope_to_its_trained_distances() -> None:
    """`none` on an inv_leaky_rerope model keeps its scaling: eval mode is plain RoPE (the same loss as the weights
    with rope_scaling=None) and lengths up to W + (N - 1 - W) s + 1 need no --allow-extrapolation."""
    model = tiny(rope_scaling={"kind": "inv_leaky_rerope", "window": 4, "factor": 4.0})  # limit 4 + 1 + 44 = 49
    tokens = np.random.default_rng(0).integers(0, 256, 400)
    got = evaluate_lengths(model, tokens, [16, 48], ["none"], 8, n_windows=2, progress=False)
    plain = tiny()
    plain.load_state_dict(model.state_dict())
    want = evaluate_lengths(plain, tokens, [16, 48], ["none"], 8, n_windows=2, allow_extrapolation=True,
                            progress=False)
    assert [r.loss for r in got] == [r.loss for r in want]
    with pytest.raises(ValueError, match="length 64 is past the 49 tokens that scaling 'none' covers"):
        evaluate_lengths(model, tokens, [64], ["none"], 8, progress=False)

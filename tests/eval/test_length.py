"""`archlab eval length` (archlab.eval.length): the last-tokens scoring against a direct slice
of the full logits, next-token accuracy against a count from the full logits, the same weights
under each method, errors before any compute, and the command end to end on a tiny checkpoint and
on a Hugging Face folder of the project's own export (table, CSV, PNG). Each method's scaling:
test_rope_methods.py; the windows: test_samples.py."""

from __future__ import annotations

import csv
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from archlab import ModelConfig, TransformerLM, build_preset
from archlab.checkpoint import build_model, save_checkpoint, tied_aliases
from archlab.cli import main
from archlab.data.tokenizer import build_tokenizer
from archlab.data.tokens import TokenData
from archlab.eval.length import evaluate_lengths, window_loss, window_scores
from archlab.eval.rope_methods import method_configs
from archlab.eval.samples import paired_windows, repeated_windows, windows
from archlab.interop import save_hf
from archlab.nn.functional import cross_entropy
from archlab.nn.positions.scaling import RopeScaling, inference_kinds
from tests.conftest import randomize_, snapshot

SMALL = dict(d_model=32, n_heads=4, n_layers=2, max_seq_len=16, vocab_size=256)


def tiny(**fields: object) -> TransformerLM:
    torch.manual_seed(0)
    return TransformerLM(ModelConfig(**{**SMALL, **fields})).eval()


def test_windows_are_scored_on_their_last_tokens() -> None:
    model = tiny()
    tokens = np.arange(300) % 97
    batch = windows(tokens, 24, 3)
    assert batch.shape == (3, 25) and batch[-1, -1] == tokens[-1]
    with torch.no_grad():
        direct = [
            float(cross_entropy(model(row[None, :-1])[:, -5:], row[None, -5:])) for row in batch
        ]
    assert window_loss(model, batch, 5) == pytest.approx(sum(direct) / 3, rel=1e-6)


def test_evaluate_lengths_loads_the_same_weights_under_each_method() -> None:
    model = tiny()
    tokens = np.random.default_rng(0).integers(0, 256, 400)
    results = evaluate_lengths(
        model,
        tokens,
        [16, 32],
        ["none", "linear", "rerope"],
        8,
        n_windows=2,
        allow_extrapolation=True,
        progress=False,
    )
    assert [(r.method, r.length) for r in results] == [
        (m, n) for m in ("none", "linear", "rerope") for n in (16, 32)
    ]
    by = {(r.method, r.length): r.loss for r in results}
    assert by["none", 16] == by["linear", 16]  # factor 1 at the training length
    scaled = TransformerLM(
        ModelConfig(**SMALL, rope=dict(scaling=RopeScaling("linear", 2.0)))
    ).eval()
    scaled.load_state_dict(model.state_dict())
    assert by["linear", 32] == pytest.approx(
        window_loss(scaled, windows(tokens, 32, 2), 8), rel=1e-6
    )
    assert by["none", 32] != by["linear", 32]


def test_lengths_past_the_context_and_scalings_without_rope_fail_before_compute() -> None:
    tokens = np.zeros(100, dtype=np.int64)
    with pytest.raises(
        ValueError,
        match=r"^length 32 is past the 16 tokens that scaling 'none' covers for this "
        r"model \(trained at 16\): pass --allow-extrapolation",
    ) as err:
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
    return save_checkpoint(
        tmp_path / "run",
        1,
        model.state_dict(),
        opt.state_dict(),
        {"step": 1},
        {"model": model.config.to_dict(), "train": {}},
        tokenizer_file,
        tied_aliases(model),
    )


def test_cli_writes_table_csv_and_plot(checkpoint: Path, tmp_path: Path, capsys) -> None:
    text = tmp_path / "held_out.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 20, encoding="utf-8")
    out = tmp_path / "eval"
    argv = [
        "eval",
        "length",
        "--checkpoint",
        str(checkpoint),
        "--lengths",
        "16,32,64",
        "--data",
        str(text),
        "--windows",
        "2",
        "--allow-extrapolation",
        "--out",
        str(out),
        "--no-progress",
    ]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "| method | 16 | 32 | 64 |" in printed and "| leaky_rerope |" in printed
    rows = list(csv.DictReader((out / "length.csv").open()))
    # every kind with an inference-time form, inv_leaky_rerope not
    methods = list(inference_kinds())
    assert (
        [r["method"] for r in rows[::3]] == methods
        and len(rows) == 3 * len(methods)
        and len(methods) == 10
    )
    assert all(
        math.isclose(math.exp(float(r["loss"])), float(r["perplexity"]), rel_tol=1e-3) for r in rows
    )
    assert (out / "length.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_errors_are_one_line(checkpoint: Path, capsys) -> None:
    assert (
        main(
            [
                "eval",
                "length",
                "--checkpoint",
                str(checkpoint),
                "--lengths",
                "16,32",
                "--data",
                "nope",
            ]
        )
        == 2
    )
    assert "archlab eval: error: corpus path nope does not exist" in capsys.readouterr().err
    assert main(["eval", "length", "--checkpoint", str(checkpoint), "--lengths", "16,x"]) == 2
    assert "--lengths '16,x' is not allowed" in capsys.readouterr().err


def test_progress_without_a_terminal_is_plain_log_lines(capsys, caplog) -> None:
    """Piped to a log file (stderr is not a terminal under pytest), progress is one line per cell,
    no \\r redraws."""
    tokens = np.arange(200, dtype=np.int64) % 50
    with caplog.at_level("INFO", logger="archlab.eval.length"):
        evaluate_lengths(tiny(), tokens, [8, 16], ["none"], 4, n_windows=1, progress=True)
    assert "\r" not in capsys.readouterr().err
    lines = [r.getMessage() for r in caplog.records if r.name == "archlab.eval.length"]
    assert len(lines) == 2 and lines[0].startswith("eval length 1/2: none at 8 tokens, loss ")


def test_accuracy_is_the_share_of_scored_targets_the_argmax_predicts() -> None:
    """Accuracy from window_scores equals a count over the full forward's logits (float64
    argmax in numpy)."""
    model = tiny()
    tokens = np.random.default_rng(1).integers(0, 256, 500)
    batch = windows(tokens, 24, 3)
    with torch.no_grad():
        logits = [model(row[None, :-1])[0].double().numpy() for row in batch]
    for keep in (5, None):
        hits = total = 0
        for row, z in zip(batch.numpy(), logits):
            targets, scored = row[1:], z
            if keep is not None:
                targets, scored = targets[-keep:], z[-keep:]
            hits += int((scored.argmax(-1) == targets).sum())
            total += len(targets)
        loss, accuracy = window_scores(model, batch, keep)
        assert accuracy == pytest.approx(hits / total, abs=1e-12)
        assert loss == pytest.approx(window_loss(model, batch, keep))
    # a window whose every target is 7: the untrained model's argmax decides
    constant = torch.full((2, 17), 7)
    with torch.no_grad():
        expected = float((model(constant[:1, :-1]).argmax(-1) == 7).double().mean())
    assert window_scores(model, constant, None)[1] == pytest.approx(expected)


def test_a_model_that_uses_its_context_scores_higher_on_repeated_samples() -> None:
    """An induction oracle (logits = one-hot of the token one period back) is exact on the
    second copy only."""

    class Copier(torch.nn.Module):
        def __init__(self, period: int) -> None:
            super().__init__()
            self.period, self.config = period, ModelConfig(**SMALL)

        def forward(self, x: torch.Tensor, logits_to_keep: int = 0) -> torch.Tensor:
            # x[t - p + 1]: the target of t one period back
            back = torch.roll(x, self.period - 1, dims=1)
            logits = torch.nn.functional.one_hot(back, 256).double()
            return logits[:, -logits_to_keep:] if logits_to_keep else logits

    tokens = np.random.default_rng(2).integers(0, 256, 600)
    batch = repeated_windows(tokens, 32, 4)
    assert window_scores(Copier(16), batch, 16)[1] == 1.0
    assert window_scores(Copier(16), windows(tokens, 32, 4), 16)[1] < 0.2


def test_evaluate_lengths_reports_each_sample_kind_with_both_metrics() -> None:
    model = tiny()
    tokens = np.random.default_rng(0).integers(0, 256, 400)
    results = evaluate_lengths(
        model,
        tokens,
        [16, 32],
        ["none"],
        None,
        n_windows=2,
        allow_extrapolation=True,
        progress=False,
        samples=["plain", "repeated"],
    )
    assert [(r.samples, r.length) for r in results] == [
        ("plain", 16),
        ("plain", 32),
        ("repeated", 16),
        ("repeated", 32),
    ]
    by = {(r.samples, r.length): r for r in results}
    expected = window_scores(model, repeated_windows(tokens, 32, 2), None)
    assert (by["repeated", 32].loss, by["repeated", 32].accuracy) == pytest.approx(expected)
    with pytest.raises(ValueError, match="--samples 'both' is not allowed"):
        evaluate_lengths(model, tokens, [16], ["none"], 8, progress=False, samples=["both"])


def test_cli_prints_accuracy_on_repeated_samples_for_a_checkpoint_and_its_hf_export(
    checkpoint: Path,
    tmp_path: Path,
    capsys,
) -> None:
    """The same weights, read as an archlab checkpoint and as the Hugging Face folder `save_hf`
    writes, give the same accuracy table; --samples plain,repeated reports both."""
    from archlab.checkpoint import load_model

    model, tokenizer = load_model(checkpoint)
    hf = save_hf(model, tmp_path / "hf", tokenizer)
    text = tmp_path / "held_out.txt"
    text.write_text("def f(x):\n    return x * 2\n" * 40, encoding="utf-8")
    tables = {}
    for name, source in (("run", checkpoint), ("hf", hf)):
        capsys.readouterr()
        argv = [
            "eval",
            "length",
            "--checkpoint",
            str(source),
            "--lengths",
            "16,128",
            "--data",
            str(text),
            "--scalings",
            "none,rerope",
            "--metric",
            "accuracy",
            "--samples",
            "repeated",
            "--windows",
            "2",
            "--allow-extrapolation",
            "--out",
            str(tmp_path / name),
            "--no-progress",
        ]
        assert main(argv) == 0
        tables[name] = (tmp_path / name / "length.md").read_text()
        assert tables[name] in capsys.readouterr().out
    header, table, scored = tables["run"].strip().split("\n\n")
    assert header.startswith(f"{checkpoint} (trained at 16) on {text}")
    # the same numbers, whichever way it is read
    assert tables["hf"].strip().split("\n\n")[1:] == [table, scored]
    assert (
        scored.startswith("Scored: plain: ") is False
        and "repeated: a text of L/2 tokens twice" in scored
    )
    lines = table.splitlines()
    assert lines[0] == "| method | 16 | 128 |"
    assert re.fullmatch(
        r"\| none \| (\d+\.\d\d% \[\d+\.\d\d, \d+\.\d\d\] \| ){2}", lines[2] + " "
    ), lines[2]
    rows = list(csv.DictReader((tmp_path / "run" / "length.csv").open()))
    assert {r["samples"] for r in rows} == {"repeated"} and all(
        0 <= float(r["accuracy"]) <= 1 for r in rows
    )
    assert (
        main(
            [
                "eval",
                "length",
                "--checkpoint",
                str(hf),
                "--lengths",
                "16",
                "--data",
                str(text),
                "--samples",
                "plain,repeated",
                "--metric",
                "accuracy",
                "--score-last",
                "all",
                "--out",
                str(tmp_path / "both"),
                "--no-progress",
                "--scalings",
                "none",
            ]
        )
        == 0
    )
    both = (tmp_path / "both" / "length.md").read_text().split("\n\n")[1].splitlines()
    assert both[0] == "| method | samples | 16 |" and [r.split(" | ")[1] for r in both[2:]] == [
        "plain",
        "repeated",
    ]


def save_run(model: TransformerLM, root: Path) -> Path:
    tokenizer_file = build_tokenizer("byte", 256, None).save(root / "tok")
    opt = torch.optim.AdamW(model.parameters())
    return save_checkpoint(
        root / "run",
        1,
        model.state_dict(),
        opt.state_dict(),
        {"step": 1},
        {"model": model.config.to_dict(), "train": {}},
        tokenizer_file,
        tied_aliases(model),
    )


@pytest.mark.parametrize(
    "kernel",
    [
        dict(attn_kernel="favor", favor={"features": 16}),
        dict(attn_kernel="vq", vq={"codes": 8, "block": 4}),
    ],
)
def test_a_linear_kernel_checkpoint_evaluates_under_the_scalings_it_takes(
    kernel: dict, tmp_path: Path, capsys
) -> None:
    """A linear kernel folds each key into its state rotated once, so the config refuses Dynamic NTK
    and the ReRoPE family for it: `eval length` with no --scalings runs the static ones (the loss of
    `none` is the model's own, scored directly), and naming a refused one is one line listing what
    the model takes."""
    model = tiny(**kernel)
    if kernel["attn_kernel"] == "vq":  # codebooks from keys: one training forward
        model.train()(torch.randint(0, 256, (2, 16)))
        model.eval()
    run = save_run(model, tmp_path)
    text = tmp_path / "held_out.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 20, encoding="utf-8")
    argv = [
        "eval",
        "length",
        "--checkpoint",
        str(run),
        "--lengths",
        "16,32",
        "--data",
        str(text),
        "--windows",
        "2",
        "--allow-extrapolation",
        "--out",
        str(tmp_path / "eval"),
        "--no-progress",
    ]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    # every static kind
    static = ["none", "linear", "ntk", "ntk_by_parts", "yarn", "llama3", "ntk_mixed"]
    assert printed.startswith(
        f"scalings: {', '.join(static)} (dynamic, rerope, leaky_rerope do not apply"
    )
    rows = list(csv.DictReader((tmp_path / "eval" / "length.csv").open()))
    assert [r["method"] for r in rows[::2]] == static
    tokens = np.asarray(build_tokenizer("byte", 256, None).encode(text.read_text()), dtype=np.int64)
    # paired: windows end where the longest ones do
    ends = np.linspace(32, len(tokens) - 1, 2).astype(np.int64)
    batch = torch.from_numpy(np.stack([tokens[e - 16 : e + 1] for e in ends]))
    direct = window_loss(model, batch, 8)  # the default score_last: half the shortest length
    assert float(rows[0]["loss"]) == pytest.approx(direct, rel=1e-5)
    assert main([*argv, "--scalings", "none,dynamic"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert (
        len(err) == 1
        and (
            "scaling 'dynamic' is not allowed for this model: one of none, linear, ntk, "
            "ntk_by_parts, yarn, llama3, ntk_mixed "
            f"(rope.scaling.kind='dynamic' is not allowed: a static schedule "
            f"with attn_kernel={kernel['attn_kernel']!r}"
        )
        in err[0]
    )


def test_default_scalings_without_rope_are_none_alone(tmp_path: Path, capsys) -> None:
    run = save_run(tiny(position="alibi"), tmp_path)
    text = tmp_path / "held_out.txt"
    text.write_text("abc " * 50, encoding="utf-8")
    assert (
        main(
            [
                "eval",
                "length",
                "--checkpoint",
                str(run),
                "--lengths",
                "16",
                "--data",
                str(text),
                "--windows",
                "1",
                "--out",
                str(tmp_path / "eval"),
                "--no-progress",
            ]
        )
        == 0
    )
    assert [r["method"] for r in csv.DictReader((tmp_path / "eval" / "length.csv").open())] == [
        "none"
    ]


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--metric", "bleu"], "--metric 'bleu' is not allowed: one of loss, accuracy"),
        (["--samples", "plain,twice"], "--samples 'twice' is not allowed: one of plain, repeated"),
        (
            ["--score-last", "most"],
            "--score-last 'most' is not allowed: a positive integer or 'all'",
        ),
    ],
)
def test_bad_metric_or_samples_is_one_line_before_loading(
    tmp_path: Path, capsys, flags: list[str], message: str
) -> None:
    """Checked before the checkpoint is read: a folder that does not exist is never reached."""
    assert main(["eval", "length", "--checkpoint", str(tmp_path / "missing"), *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_logn_at_inference_changes_nothing_within_the_training_length() -> None:
    """--logn (ModelConfig.with_inference_logn) scales queries past max_seq_len only; a log-n
    model is refused."""
    model = tiny()
    tokens = np.random.default_rng(0).integers(0, 256, 400)
    args = dict(n_windows=2, allow_extrapolation=True, progress=False)
    plain = {
        (r.method, r.length): r.loss
        for r in evaluate_lengths(model, tokens, [16, 32], ["none"], 8, **args)
    }
    logn = {
        (r.method, r.length): r.loss
        for r in evaluate_lengths(model, tokens, [16, 32], ["none"], 8, logn=True, **args)
    }
    assert logn["none", 16] == plain["none", 16] and logn["none", 32] != plain["none", 32]
    configs = method_configs(model.config, ["none", "yarn"], [32], None, True, logn=True)
    assert all(c.attn_logn and c.attn_logn_clip for c in configs.values())
    with pytest.raises(
        ValueError, match=r"attn_logn=True is not allowed: False for log-n at inference only"
    ):
        evaluate_lengths(tiny(attn_logn=True), tokens, [16], ["none"], 8, logn=True, **args)


def test_cli_logn_and_leaky_k(checkpoint: Path, tmp_path: Path, capsys) -> None:
    text = tmp_path / "held_out.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 20, encoding="utf-8")
    base = [
        "eval",
        "length",
        "--checkpoint",
        str(checkpoint),
        "--lengths",
        "16,32",
        "--data",
        str(text),
        "--windows",
        "2",
        "--allow-extrapolation",
        "--no-progress",
        "--scalings",
        "none,leaky_rerope",
    ]
    tables = {}
    for flags in ([], ["--logn"], ["--leaky-k", "train"]):
        assert main([*base, "--out", str(tmp_path / "-".join(flags or ["plain"])), *flags]) == 0
        tables[tuple(flags)] = {
            (r["method"], r["length"]): r["loss"]
            for r in csv.DictReader((tmp_path / "-".join(flags or ["plain"]) / "length.csv").open())
        }
        capsys.readouterr()
    plain, logn, train = tables[()], tables[("--logn",)], tables[("--leaky-k", "train")]
    assert logn["none", "16"] == plain["none", "16"] and logn["none", "32"] != plain["none", "32"]
    assert (
        train["none", "32"] == plain["none", "32"]
        and train["leaky_rerope", "32"] != plain["leaky_rerope", "32"]
    )
    assert main([*base, "--leaky-k", "x"]) == 2
    assert "--leaky-k='x' is not allowed" in capsys.readouterr().err


def test_an_inverse_leaky_checkpoint_evaluates_as_plain_rope_to_its_trained_distances() -> None:
    """`none` on an inv_leaky_rerope model keeps its scaling: eval mode is plain RoPE (the
    same loss as the weights with rope_scaling=None) and lengths up to W + (N - 1 - W) s + 1
    need no --allow-extrapolation."""
    # limit 4 + 1 + 44 = 49
    model = tiny(rope=dict(scaling={"kind": "inv_leaky_rerope", "window": 4, "factor": 4.0}))
    tokens = np.random.default_rng(0).integers(0, 256, 400)
    got = evaluate_lengths(model, tokens, [16, 48], ["none"], 8, n_windows=2, progress=False)
    plain = tiny()
    plain.load_state_dict(model.state_dict())
    want = evaluate_lengths(
        plain, tokens, [16, 48], ["none"], 8, n_windows=2, allow_extrapolation=True, progress=False
    )
    assert [r.loss for r in got] == [r.loss for r in want]
    with pytest.raises(
        ValueError, match="length 64 is past the 49 tokens that scaling 'none' covers"
    ):
        evaluate_lengths(model, tokens, [64], ["none"], 8, progress=False)


# --------------------------------------------------------------------------------- paired by target
def test_evaluate_lengths_scores_the_same_targets_at_every_length(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What each length's forward is asked to score: the same target ids, behind contexts
    of the length."""
    import archlab.eval.length as length

    seen = {}
    original = length.per_window_scores

    def spy(model, batch, score_last):  # noqa: ANN001, ANN202
        seen[batch.shape[1] - 1] = batch
        return original(model, batch, score_last)

    monkeypatch.setattr(length, "per_window_scores", spy)
    tokens = np.random.default_rng(3).integers(0, 256, 600)
    evaluate_lengths(
        tiny(),
        tokens,
        [8, 16, 64],
        ["none"],
        8,
        n_windows=3,
        allow_extrapolation=True,
        progress=False,
    )
    assert sorted(seen) == [8, 16, 64]
    targets = {n: batch[:, -8:].tolist() for n, batch in seen.items()}
    assert targets[8] == targets[16] == targets[64]
    ends = np.linspace(64, 599, 3).astype(np.int64)
    assert targets[8] == [tokens[e - 7 : e + 1].tolist() for e in ends]


@pytest.fixture(scope="module")
def run_at_256(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Llama trained at 256 on documents that repeat a random 96-letter block three times:
    past the first copy every letter can be read from 96 tokens back, which only a context longer
    than 96 holds."""
    import random

    root = tmp_path_factory.mktemp("rep")
    rng = random.Random(0)
    blocks = [
        "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(96)) for _ in range(3000)
    ]
    (root / "corpus.jsonl").write_text("\n".join('{"text": "%s"}' % (b * 3) for b in blocks))
    torch.set_num_threads(1)
    assert (
        main(
            [
                "train",
                "--data",
                str(root / "corpus.jsonl"),
                "--model.max_seq_len",
                "256",
                "--steps",
                "200",
                "--data.batch_size",
                "8",
                "--optimizer.lr",
                "3e-3",
                "--logging.samples",
                "0",
                "--logging.eval_every",
                "0",
                "--logging.tensorboard",
                "false",
                "--logging.progress",
                "false",
                "--out",
                str(root / "run"),
            ]
        )
        == 0
    )
    return root / "run"


def test_on_the_same_targets_a_model_trained_at_256_is_not_worse_at_256_than_at_64(
    run_at_256: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    capsys.readouterr()
    assert (
        main(
            [
                "eval",
                "length",
                "--checkpoint",
                str(run_at_256),
                "--lengths",
                "64,256",
                "--scalings",
                "none",
                "--score-last",
                "32",
                "--windows",
                "8",
                "--out",
                str(tmp_path / "eval"),
                "--no-progress",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    rows = {
        int(r["length"]): float(r["loss"])
        for r in csv.DictReader((tmp_path / "eval" / "length.csv").open())
    }
    # the same 8 x 32 targets: more context can only help a model that uses it
    assert rows[256] <= rows[64], rows
    val = np.asarray(TokenData(run_at_256 / "data").splits["val"], dtype=np.int64)
    ends = np.linspace(256, len(val) - 1, 8).astype(np.int64)
    assert (
        "the same 8 x 32 target tokens at every length (the 32 held-out tokens up to each "
        f"of positions {', '.join(map(str, ends))})" in printed
    )


# ------------------------------------------------------------------------- the model's own settings
def test_a_models_own_rerope_window_is_the_default_window() -> None:
    """hwfa2 trained with rope_scaling.window = N decodes with W = N; eval length's rerope uses it
    (not N / 2), so at the training length rerope equals none (every distance exact) and equals the
    model's own forward."""
    config = build_preset(
        "hwfa2", "tiny", max_seq_len=32, vocab_size=256, rope=dict(scaling={"window": 32})
    )
    assert (config.rope.scaling.kind, config.rope.scaling.window) == ("rerope", 32)
    configs = method_configs(config, ["rerope", "leaky_rerope"], [32, 128], None, True)
    assert configs["rerope", 128].rope.scaling.window == 32  # the model's own
    # another kind: its own default, N / 4
    assert configs["leaky_rerope", 128].rope.scaling.window == 8
    # given
    assert (
        method_configs(config, ["rerope"], [128], 12, True)["rerope", 128].rope.scaling.window == 12
    )
    model = randomize_(TransformerLM(config)).eval()
    tokens = np.random.default_rng(0).integers(0, 256, 400)
    by = {
        r.method: r.loss
        for r in evaluate_lengths(
            model, tokens, [32], ["none", "rerope"], 16, n_windows=3, progress=False
        )
    }
    # eager ReRoPE scores vs SDPA: float32 rounding
    assert by["rerope"] == pytest.approx(by["none"], rel=1e-6)
    # the model as built, eval mode
    own = window_scores(model, paired_windows(tokens, [32], 3)[32], 16)[0]
    assert by["rerope"] == pytest.approx(own, rel=1e-6)
    half = build_model(
        config.replace(rope=dict(scaling=RopeScaling("rerope", window=16))), model.state_dict()
    ).eval()
    assert window_scores(half, paired_windows(tokens, [32], 3)[32], 16)[0] != pytest.approx(
        own, rel=1e-6
    )


def test_default_lengths_fit_the_model_and_the_text(
    checkpoint: Path, tmp_path: Path, capsys
) -> None:
    """Without --lengths: those of 256-4096 every scaling covers, else N/4, N/2, N, said in one
    line; with --allow-extrapolation they are all covered but clipped to the held-out text, also
    said in one line."""
    text = tmp_path / "held_out.txt"
    # 900 tokens
    text.write_text("the quick brown fox jumps over the lazy dog. " * 20, encoding="utf-8")
    base = [
        "eval",
        "length",
        "--checkpoint",
        str(checkpoint),
        "--data",
        str(text),
        "--windows",
        "2",
        "--scalings",
        "none,yarn",
        "--no-progress",
    ]
    assert main([*base, "--out", str(tmp_path / "a")]) == 0
    out = capsys.readouterr().out
    assert out.startswith(
        "lengths: 4, 8, 16 (the default: those of 256-4096 that every scaling covers for this "
        "model; --lengths to choose)\n"
    )
    assert [int(r["length"]) for r in csv.DictReader((tmp_path / "a" / "length.csv").open())][
        :3
    ] == [4, 8, 16]
    assert main([*base, "--allow-extrapolation", "--out", str(tmp_path / "b")]) == 0
    assert capsys.readouterr().out.startswith(
        "lengths: 256, 512 (the default 256, 512, 1024, 2048, 4096 clipped to "
        f"the 900 held-out tokens of {text})\n"
    )
    assert (
        main([*base, "--lengths", "1024", "--allow-extrapolation", "--out", str(tmp_path / "c")])
        == 2
    )
    # the user's: refused
    assert "held-out text has 900 tokens: too few for length 1024" in capsys.readouterr().err


# ----------------------------------------------------------------------------------- output folders
@pytest.mark.parametrize("action", ["length", "passkey", "continuation"])
def test_results_are_never_replaced_without_force(
    action: str, checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """Without --out each run writes a new folder eval-ACTION/MODEL-TIME (printed); an --out
    holding results is refused in one line, untouched, unless --force; an --out that is a
    file is refused."""
    monkeypatch.chdir(tmp_path)
    # both in the same second
    monkeypatch.setattr("archlab.eval.source.stamp", lambda: "20250101-120000")
    text = tmp_path / "held_out.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 20, encoding="utf-8")
    flags = {
        "length": [
            "--lengths",
            "8,16",
            "--scalings",
            "none",
            "--windows",
            "1",
            "--data",
            str(text),
        ],
        "passkey": [
            "--lengths",
            "100",
            "--depths",
            "0.5",
            "--trials",
            "1",
            "--allow-extrapolation",
        ],
        "continuation": ["--cuts", "3", "--context", "8", "--k", "2", "--data", str(text)],
    }[action]
    argv = [
        "eval",
        action,
        "--checkpoint",
        str(checkpoint),
        *flags,
        *(["--no-progress"] * (action != "continuation")),
    ]
    folders = []
    for _ in range(2):
        assert main(argv) == 0
        written = capsys.readouterr().out.strip().splitlines()[-1]
        folders.append(Path(written.removeprefix("wrote ").split(", ")[0]).parent)
    assert folders[0] != folders[1] and all(f.parent == Path(f"eval-{action}") for f in folders)
    assert [f.name for f in folders] == [
        "run-step_0000001-20250101-120000",
        "run-step_0000001-20250101-120000-2",
    ]
    before = snapshot(folders[0])
    assert main([*argv, "--out", str(folders[0])]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        "\n" not in err
        and f"--out {folders[0]} already holds {action}.md" in err
        and "--force" in err
    )
    assert snapshot(folders[0]) == before
    assert main([*argv, "--out", str(folders[0]), "--force"]) == 0
    assert main([*argv, "--out", str(text)]) == 2
    assert f"--out {text} is not a folder" in capsys.readouterr().err


def test_score_last_past_the_shortest_length_is_refused_before_any_model_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A window of L tokens has L predictions: score_last above the shortest length is refused in
    one line naming the value and the maximum, before a model is built or run; at the shortest
    length itself it is scored."""
    import archlab.eval.length as length

    tokens = np.random.default_rng(0).integers(0, 256, 200)
    model = tiny()
    built, real = [], length.build_model
    monkeypatch.setattr(length, "build_model", lambda *a, **k: built.append(1) or real(*a, **k))
    for bad in (9, 0):
        with pytest.raises(ValueError) as err:
            evaluate_lengths(model, tokens, [16, 8], ["none"], bad, n_windows=2, progress=False)
        assert (
            str(err.value)
            == f"score_last={bad} is not allowed: between 1 and the shortest length 8"
        )
    assert built == []
    results = evaluate_lengths(model, tokens, [16, 8], ["none"], 8, n_windows=2, progress=False)
    assert [r.length for r in results] == [16, 8] and len(built) == 2
    assert results[1].loss == pytest.approx(
        window_loss(model, paired_windows(tokens, [16, 8], 2)[8], 8), rel=1e-6
    )


def test_cli_score_last_past_the_shortest_length_is_one_line_before_loading(
    checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """Given --lengths, the check needs no checkpoint (a missing one is never reached); with the
    default lengths (4, 8, 16 for this model) it comes after the model's config and before its
    weights are loaded."""
    text = tmp_path / "held_out.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 20, encoding="utf-8")
    assert (
        main(
            [
                "eval",
                "length",
                "--checkpoint",
                str(tmp_path / "missing"),
                "--lengths",
                "8,16",
                "--score-last",
                "9",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "archlab eval: error: --score-last 9 is not allowed: at most the shortest length "
        "8 (or 'all')"
    ]
    monkeypatch.setattr(
        "archlab.commands.eval.length.load_for_eval", lambda *a: pytest.fail("the model was loaded")
    )
    assert (
        main(
            [
                "eval",
                "length",
                "--checkpoint",
                str(checkpoint),
                "--data",
                str(text),
                "--scalings",
                "none,yarn",
                "--score-last",
                "5",
                "--out",
                str(tmp_path / "out"),
                "--no-progress",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "archlab eval: error: --score-last 5 is not allowed: at most the shortest length "
        "4 (or 'all')"
    ]
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------- intervals and defaults
def test_each_figure_carries_a_t_interval_over_its_windows(
    checkpoint: Path, tmp_path: Path, capsys
) -> None:
    """Each window's mean loss and accuracy are the observations; the interval is mean +- t(0.975, n
    - 1) s / sqrt(n), computed here from windows scored one at a time; one window gives no interval,
    in the table or the CSV."""
    from scipy import stats

    model = tiny()
    tokens = np.random.default_rng(5).integers(0, 256, 500)
    (result,) = evaluate_lengths(model, tokens, [16], ["none"], 8, n_windows=3, progress=False)
    batch = paired_windows(tokens, [16], 3)[16]
    alone = [window_scores(model, batch[i : i + 1], 8) for i in range(3)]
    assert result.window_losses == pytest.approx([a[0] for a in alone], rel=1e-12)
    assert result.window_accuracies == pytest.approx([a[1] for a in alone], rel=1e-12)
    for values, interval in (
        (result.window_losses, result.loss_interval),
        (result.window_accuracies, result.accuracy_interval),
    ):
        x = np.asarray(values, dtype=np.float64)
        half = stats.t.ppf(0.975, 2) * x.std(ddof=1) / math.sqrt(3)
        assert interval == pytest.approx((x.mean() - half, x.mean() + half), rel=1e-9, abs=1e-12)
    low, high = result.loss_interval
    assert low < result.loss < high
    (single,) = evaluate_lengths(model, tokens, [16], ["none"], 8, n_windows=1, progress=False)
    assert all(math.isnan(v) for v in single.loss_interval)
    text = tmp_path / "held_out.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 20, encoding="utf-8")
    base = [
        "eval",
        "length",
        "--checkpoint",
        str(checkpoint),
        "--lengths",
        "8,16",
        "--data",
        str(text),
        "--scalings",
        "none",
        "--no-progress",
    ]
    for windows_, out in (("3", "three"), ("1", "one")):
        assert main([*base, "--windows", windows_, "--out", str(tmp_path / out)]) == 0
    printed = capsys.readouterr().out
    rows = {
        name: list(csv.DictReader((tmp_path / name / "length.csv").open()))
        for name in ("three", "one")
    }
    r = rows["three"][1]
    assert r["windows"] == "3" and float(r["loss_low"]) < float(r["loss"]) < float(r["loss_high"])
    assert (
        "| none | "
        f"{float(rows['three'][0]['loss']):.3f} [{float(rows['three'][0]['loss_low']):.3f}, "
        in printed
    )
    assert (
        rows["one"][0]["loss_low"] == "nan"
        and "| none | " + f"{float(rows['one'][0]['loss']):.3f} (" in printed
    )
    assert (
        "In brackets: the 95% t interval over the 3 windows" in printed
        and "One window: no interval" in printed
    )


def test_default_scalings_leave_out_those_that_give_the_same_positions_and_the_cost_comes_first(
    checkpoint: Path, tmp_path: Path, capsys
) -> None:
    """Trained at 16, evaluated at 8 and 16: every factor is 1 (the model itself) while ReRoPE (W =
    8) and Leaky ReRoPE (W = 4) change distances past their windows; one line says which were left
    out and why, the next what the run costs (its forwards are the CSV's rows times the windows),
    both before any figure."""
    text = tmp_path / "held_out.txt"
    text.write_text("the quick brown fox jumps over the lazy dog. " * 20, encoding="utf-8")
    assert (
        main(
            [
                "eval",
                "length",
                "--checkpoint",
                str(checkpoint),
                "--lengths",
                "8,16",
                "--data",
                str(text),
                "--windows",
                "2",
                "--out",
                str(tmp_path / "eval"),
                "--no-progress",
            ]
        )
        == 0
    )
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (
        "scalings: none, rerope, leaky_rerope (linear, ntk, ntk_by_parts, dynamic, yarn, llama3, "
        "ntk_mixed give the same positions as none at every length asked (compared by their "
        "attention scores), so they are left out: --scalings to run them)"
    )
    rows = list(csv.DictReader((tmp_path / "eval" / "length.csv").open()))
    assert [r["method"] for r in rows[::2]] == ["none", "rerope", "leaky_rerope"]
    assert re.fullmatch(
        r"cost: 3 scalings x 2 lengths x 2 windows = 12 forwards, 144 tokens, \S+ FLOPs; about \d+ "
        r"s here \(a 8-token window took \S+ s and a 16-token window took \S+ s\)",
        lines[1],
    ), lines[1]
    # the CSV's cells, 2 windows each
    assert len(rows) * 2 == 12 and sum(int(r["length"]) for r in rows) * 2 == 144

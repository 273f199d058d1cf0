"""The README runs as written: its Python quick start, and its command lines in
order (litgpt `tests/test_readme.py`).

The command lines of the README's ```bash blocks run one after another in a scratch folder,
through `archlab.cli.main` (one process, so torch is imported once), on tiny settings.
The documented subset:
- every `archlab ...` line runs, except those in SKIPPED (each with the reason and the test
  that covers it);
- tiny settings: `--steps 200` / `300` / `400` / `2000` become 4 / 4 / 8 / 4 (so `--resume --steps
  400 --extend` still lengthens the run; the passkey recipe's 100 warmup steps become 1), other
  new runs get `--steps 4`, and all of them `--data.batch_size 4`, 2 eval batches, a metrics row
  per step, no samples and no TensorBoard; `--max-new-tokens 100` becomes 8; `eval passkey` gets
  `--trials 1 --depths 0.5`;
- `path/to/hf_folder` is a tiny random Llama written by transformers with a byte
  tokenizer (no download);
- `--interactive` reads one prompt and then EOF from stdin.
A line that fails stops the test with the line and its exit status.
"""

from __future__ import annotations

import io
import re
import shlex
import sys
from pathlib import Path

import pytest
import torch

README = Path(__file__).resolve().parents[1] / "README.md"

SKIPPED = {  # line prefix -> why it does not run here
    "make ": "the Makefile's own targets (CI runs `make test`; `make demo` trains for minutes)",
    "source ": "a shell built-in",
    "torchrun ": "two processes: tests/train/test_distributed.py",
    "archlab ablate norm-type": "a lab suite trains for minutes: tests/lab/test_runner.py runs "
    "a tiny one",
    "archlab ablate --verify": "reads the checkout's docs/results, not the scratch folder: "
    "tests/lab/test_published.py and tests/cli/test_ablate.py",
    "archlab generate --checkpoint runs/tiny --prompt 'def ' --compile": "torch.compile needs a "
    "C++ compiler and a minute here: tests/infer/test_speed.py",
}
TINY = [
    ("--steps 200", "--steps 4"),
    ("--steps 300", "--steps 4"),
    ("--steps 400", "--steps 8"),
    ("--steps 2000", "--steps 4"),
    ("--schedule.warmup_steps 100", "--schedule.warmup_steps 1"),
    ("--max-new-tokens 100", "--max-new-tokens 8"),
]


def test_python_blocks_of_the_readme_run() -> None:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    assert blocks, "the README has a Python quick start"
    for block in blocks:
        exec(compile(block, str(README), "exec"), {})


def test_the_quoted_config_error_is_the_one_raised() -> None:
    """The README's `>>> EXPR` block prints what EXPR raises, word for word."""
    from archlab import ModelConfig  # noqa: F401  (the quoted expression names it)

    quotes = re.findall(r"```\n>>> (.*?)\n(\w+): (.*?)\n```", README.read_text(encoding="utf-8"))
    assert quotes, "the README quotes a refused config"
    for expression, kind, message in quotes:
        with pytest.raises(Exception) as raised:
            eval(expression)
        assert (type(raised.value).__name__, str(raised.value)) == (kind, message)


def test_the_quoted_inspect_figures_are_computed() -> None:
    """'For `llama`/`small` (4.95M parameters): 11.34 MFLOPs forward per token at context
    256, 6.1 KB of bf16 KV cache per token', as archlab.costs (what `archlab inspect`
    prints) computes them."""
    from archlab import build_preset
    from archlab.costs import flops_per_token, kv_cache_bytes, parameter_counts

    text = " ".join(README.read_text(encoding="utf-8").split())
    found = re.search(
        r"For `(\w+)`/`(\w+)` \(([\d.]+)M parameters\): ([\d.]+) MFLOPs forward per token at "
        r"context (\d+), ([\d.]+) KB of bf16 KV cache per token",
        text,
    )
    assert found, "the README quotes inspect's figures for one preset"
    preset, size, params, mflops, context, kv_kb = found.groups()
    config = build_preset(preset, size)
    assert f"{parameter_counts(config)['total'] / 1e6:.2f}" == params
    assert f"{flops_per_token(config, int(context))['forward'] / 1e6:.2f}" == mflops
    assert f"{kv_cache_bytes(config)['per_token'] / 1e3:.1f}" == kv_kb


def readme_commands() -> list[str]:
    """Every command line of the README's bash blocks, comments removed, in order."""
    lines = []
    for block in re.findall(r"```bash\n(.*?)```", README.read_text(encoding="utf-8"), re.S):
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            if words:
                lines.append(shlex.join(words))
    return lines


def tiny_argv(line: str) -> list[str]:
    for old, new in TINY:
        line = line.replace(old, new)
    argv = shlex.split(line)[1:]  # without `archlab`
    if argv[0] == "train" and "--resume" not in argv:
        argv += [
            *([] if "--steps" in argv else ["--steps", "4"]),
            "--data.batch_size",
            "4",
            "--logging.samples",
            "0",
            "--logging.eval_batches",
            "2",
            "--logging.log_every",
            "1",
            "--logging.tensorboard",
            "false",
            "--logging.progress",
            "false",
        ]
    if argv[:2] == ["eval", "passkey"]:
        argv += ["--trials", "1", "--depths", "0.5", "--no-progress"]
    if argv[:2] == ["eval", "length"]:
        argv += ["--no-progress"]
    return argv


def write_hf_folder(folder: Path) -> None:
    from transformers import AutoModelForCausalLM, LlamaConfig

    from archlab.data.tokenizer import build_tokenizer
    from tests.interop.family_cases import llama_like

    torch.manual_seed(0)
    config = LlamaConfig(**llama_like(vocab_size=256, max_position_embeddings=256))
    AutoModelForCausalLM.from_config(config).eval().save_pretrained(folder)
    build_tokenizer("byte", 256, None).save(folder)


def test_the_readme_command_lines_run_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    from archlab.cli import main
    from archlab.train.metrics import read_metrics

    lines = readme_commands()
    assert any(
        line.startswith("archlab train --out runs/tiny --resume --steps 400 --extend")
        for line in lines
    )
    monkeypatch.chdir(tmp_path)
    write_hf_folder(tmp_path / "path" / "to" / "hf_folder")
    ran = []
    for line in lines:
        if any(line.startswith(prefix) for prefix in SKIPPED):
            continue
        assert line.startswith("archlab "), (
            f"a README command line that is neither run nor skipped: {line}"
        )
        if "--interactive" in line:
            monkeypatch.setattr(sys, "stdin", io.StringIO("def \n"))
        status = main(tiny_argv(line))
        captured = capsys.readouterr()
        assert status == 0, f"README line `{line}` exited {status}: {captured.err.strip()[-500:]}"
        ran.append(line)
    skipped = [line for line in lines if line not in ran]
    assert all(any(line.startswith(p) for line in skipped) for p in SKIPPED), (
        "SKIPPED names a line that is gone"
    )
    assert len(ran) == len(lines) - len(skipped) >= 18  # the quick start and the Hugging Face block
    lrs = [r["lr"] for r in read_metrics(tmp_path / "runs" / "tiny", "train")]
    # --extend re-warmed, then decayed again
    assert len(lrs) == 8 and lrs[4] > lrs[3] and lrs[-1] < lrs[5]

"""`archlab eval passkey` (archlab.eval.passkey): accuracy counts the continuations that spell the
key, the cells cover every (length, depth), and the command writes its table and heat map."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from archlab.cli import main
from archlab.data.passkey import QUESTION, needle
from archlab.data.tokenizer import build_tokenizer
from archlab.eval import passkey as module
from archlab.eval.passkey import evaluate_passkey, passkey_accuracy, passkey_table
from archlab.infer.generate import Generation
from tests.eval.test_length import checkpoint, tiny  # noqa: F401 - the fixture

TOKENIZER = build_tokenizer("byte", 256, None)


def fake_generate(answer: str):  # noqa: ANN201
    """generate() that answers each prompt with the key of its needle (answer="key")
    or with `answer`."""

    def run(model, prompts, sampling):  # noqa: ANN001, ANN202
        texts = [TOKENIZER.decode(p) for p in prompts]
        keys = [t.split("The pass key is ")[1][:5] for t in texts]
        assert all(t.endswith(QUESTION) and needle(k) in t for t, k in zip(texts, keys))
        return Generation([TOKENIZER.encode(k if answer == "key" else answer) for k in keys])

    return run


@pytest.mark.parametrize("answer,accuracy", [("key", 1.0), ("00000", 0.0)])
def test_accuracy_counts_continuations_that_spell_the_key(
    monkeypatch, answer: str, accuracy: float
) -> None:
    monkeypatch.setattr(module, "generate", fake_generate(answer))
    assert passkey_accuracy(tiny(), TOKENIZER, 200, 0.5, trials=6) == accuracy


def test_every_cell_is_measured_and_tabled() -> None:
    torch.manual_seed(0)
    results = evaluate_passkey(
        tiny(),
        TOKENIZER,
        [100, 130],
        [0.0, 1.0],
        trials=2,
        method="rerope",
        window=4,
        progress=False,
    )
    assert [(r.length, r.depth) for r in results] == [
        (100, 0.0),
        (100, 1.0),
        (130, 0.0),
        (130, 1.0),
    ]
    assert all(r.accuracy == 0.0 for r in results)  # an untrained model never finds a 5-digit key
    assert passkey_table(results).splitlines()[0] == "| length | depth 0 | depth 1 |"


def test_cli_writes_table_and_heat_map(checkpoint: Path, tmp_path: Path, capsys) -> None:  # noqa: F811
    out = tmp_path / "pk"
    argv = [
        "eval",
        "passkey",
        "--checkpoint",
        str(checkpoint),
        "--lengths",
        "100,120",
        "--depths",
        "0,0.5",
        "--trials",
        "2",
        "--allow-extrapolation",
        "--out",
        str(out),
        "--no-progress",
    ]
    assert main(argv) == 0
    assert "| 120 | 0.00 | 0.00 |" in capsys.readouterr().out
    assert (out / "passkey.png").read_bytes()[:4] == b"\x89PNG"
    assert main(argv[:-4] + ["--depths", "2"]) == 2
    assert "--depths '2' is not allowed" in capsys.readouterr().err

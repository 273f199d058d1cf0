"""The data side of a run (train/run_data.py): nanoGPT's CPU recipe trains with every other
default (the default sample length clipped to its context in one info line), a sample length the
user set is kept or refused in one line (a corpus that cannot be used is refused before the run
logs anything: tests/cli/test_bad_inputs.py)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from archlab.cli import main
from archlab.data.tokens import TokenData
from archlab.train.config import resolve_config
from archlab.train.metrics import read_metrics
from archlab.train.run_data import DEFAULT_SAMPLE_TOKENS, sample_settings

# nanoGPT's README, "I only have a macbook" (train_shakespeare_char on a CPU): --n_layer=4
# --n_head=4 --n_embd=128 --block_size=64 --batch_size=12; archlab's spelling of the same
# model and batch
NANOGPT_CPU = [
    "--model.n_layers",
    "4",
    "--model.n_heads",
    "4",
    "--model.d_model",
    "128",
    "--model.max_seq_len",
    "64",
    "--data.block_size",
    "64",
    "--data.batch_size",
    "12",
]


@pytest.fixture(scope="module")
def english(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An English corpus of a few hundred kB (nanoGPT's recipe reads Shakespeare:
    no download here)."""
    words = (
        "the of and to in a is that for it as was with be by on not he this are or his from at "
        "which but have an they you were her she there been one all we their has would when if so "
        "no will more"
    ).split()
    lines = [
        " ".join(words[(i * 7 + j * 13) % len(words)] for j in range(11)).capitalize() + "."
        for i in range(4000)
    ]
    path = tmp_path_factory.mktemp("english") / "english.txt"
    path.write_text("\n".join(lines))
    return path


def test_nanogpt_cpu_recipe_trains_with_every_other_default(
    english: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every other setting at its default, samples included: the default sample length (64) is
    clipped to the context left after the 4-character prompt, in one info line, and the samples
    are that long."""
    import archlab.train.trainer as trainer

    made = []

    def spy(model, tokenizer, prompts, sampling, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        out = generate_text(model, tokenizer, prompts, sampling, *args, **kwargs)
        made.append(
            (sampling.max_new_tokens, [len(tokenizer.encode(p)) for p in prompts], out.tokens)
        )
        return out

    generate_text = trainer.generate_text
    monkeypatch.setattr(trainer, "generate_text", spy)
    with caplog.at_level(logging.INFO):
        assert (
            main(
                [
                    "train",
                    "--data",
                    str(english),
                    "--steps",
                    "3",
                    "--out",
                    str(tmp_path / "run"),
                    *NANOGPT_CPU,
                ]
            )
            == 0
        )
    lines = [r.getMessage() for r in caplog.records if "sample_tokens" in r.getMessage()]
    assert lines == [
        "logging.sample_tokens: 60 (the default 64 clipped to the model's 64-token context after "
        "the 4-token sample prompt; --logging.sample_tokens N to set it)"
    ]
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert (
        config["model"]["n_layers"],
        config["model"]["n_heads"],
        config["model"]["d_model"],
    ) == (4, 4, 128)
    assert (config["train"]["data"]["batch_size"], config["train"]["data"]["block_size"]) == (
        12,
        64,
    )
    assert config["train"]["logging"]["sample_tokens"] is None  # the default, as the user left it
    # the default: one sample at the final evaluation
    assert len(read_metrics(tmp_path / "run", "sample")) == 1
    [(n_new, prompt_lens, tokens)] = made
    # the prompt and the sample fill 64 exactly
    assert n_new == 60 and prompt_lens == [4] and len(tokens[0]) == 60


def _setup(prepared: Path, tmp_path: Path, **flags: str) -> tuple:
    train, model = resolve_config(
        [
            {
                "data.source": str(prepared),
                "out": str(tmp_path / "run"),
                "model.max_seq_len": "16",
                **flags,
            }
        ]
    )
    data = TokenData(prepared)
    return train, model, data, data.tokenizer()


def test_the_default_sample_length_fits_and_a_users_is_kept_or_refused(
    prepared: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    train, model, data, tokenizer = _setup(prepared, tmp_path, **{"logging.sample_prompt": "def "})
    with caplog.at_level(logging.INFO):
        # 16 - 4 prompt tokens
        assert sample_settings(train, model, data, tokenizer) == ("def ", 12)
    assert len(caplog.records) == 1 and "the default 64 clipped" in caplog.records[0].getMessage()
    train, model, data, tokenizer = _setup(
        prepared, tmp_path, **{"logging.sample_prompt": "def ", "logging.sample_tokens": "12"}
    )
    # the user's, fitting: kept
    assert sample_settings(train, model, data, tokenizer) == ("def ", 12)
    train, model, data, tokenizer = _setup(
        prepared, tmp_path, **{"logging.sample_prompt": "def ", "logging.sample_tokens": "13"}
    )
    with pytest.raises(
        ValueError,
        match=r"logging.sample_tokens=13 is not allowed: at most 12 \(the model's "
        r"16-token context after the 4-token sample prompt\)",
    ):
        sample_settings(train, model, data, tokenizer)
    train, model, data, tokenizer = _setup(
        prepared, tmp_path, **{"logging.sample_prompt": "x" * 16}
    )
    with pytest.raises(
        ValueError, match="logging.sample_prompt='xxxxxxxxxxxxxxxx' is not allowed: its 16 tokens"
    ):
        sample_settings(train, model, data, tokenizer)
    train, model, data, tokenizer = _setup(prepared, tmp_path, **{"model.max_seq_len": "128"})
    # room: nothing clipped
    assert sample_settings(train, model, data, tokenizer)[1] == DEFAULT_SAMPLE_TOKENS


def test_a_derived_prompt_longer_than_the_context_is_cut(prepared: Path, tmp_path: Path) -> None:
    train, model, data, tokenizer = _setup(
        prepared, tmp_path, **{"model.max_seq_len": "4", "data.block_size": "4"}
    )
    prompt, n = sample_settings(train, model, data, tokenizer, log=False)
    # 1 + 3 = the context
    assert prompt == tokenizer.decode(data.splits["val"][:1].tolist()) and n == 3

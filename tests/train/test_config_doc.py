"""`archlab train --help` is generated from the config dataclasses: every key, its
default, its comment."""

from __future__ import annotations

import argparse
from dataclasses import fields

import pytest

from archlab.cli import main
from archlab.commands.train import ALIASES
from archlab.nn.config import ModelConfig
from archlab.overrides import flatten
from archlab.train.config import TrainConfig, resolve_config
from archlab.train.config_doc import field_comments, key_docs


def test_help_lists_every_key_with_its_default_and_description(
    capsys: pytest.CaptureFixture,
) -> None:
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    full = capsys.readouterr().out
    text = full.split("every config key", 1)[1]  # the generated table
    train, model = resolve_config([{}])
    keys = set(flatten({"train": train.to_dict()})) - {"train.data.block_size"}
    documented = {key for key, _, _ in key_docs()}
    assert {k.removeprefix("train.") for k in keys} <= documented
    assert {f"model.{f.name}" for f in fields(ModelConfig)} <= documented
    for key, default, doc in key_docs():
        assert doc, f"{key} has no comment on its field's line"
        line = next(line for line in text.splitlines() if line.strip().startswith(f"--{key} "))
        assert doc in line, key
    steps = next(line for line in text.splitlines() if line.strip().startswith("--steps "))
    assert steps.split()[:2] == ["--steps", "200"]
    d_model = next(
        line for line in text.splitlines() if line.strip().startswith("--model.d_model ")
    )
    assert d_model.split()[1] == str(model.d_model)  # the default preset's value, not ModelConfig's
    assert "default runs/{preset}-{size}" in " ".join(full.split())  # --out's real default


def test_field_comments_are_read_from_the_source() -> None:
    comments = field_comments(TrainConfig)
    assert comments["steps"].startswith("optimizer steps of the whole run")


def test_no_flag_is_added_by_hand() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    from archlab.commands import train

    train.register(sub)
    options = {opt for action in sub.choices["train"]._actions for opt in action.option_strings}
    named = {f"--{dest.replace('_', '-')}" for dest in ALIASES}
    assert options == {"-h", "--help", "--config", "--resume", "--extend", "--init-from"} | named

"""The dotted-key grammar (archlab/overrides.py): each coercion, each error as one line naming the
key and what is allowed, YAML files, and `archlab inspect` and `archlab train` resolving the same
flags to the same ModelConfig."""

from __future__ import annotations

import json
import re
import typing
from pathlib import Path

import pytest

from archlab.cli import main
from archlab.nn.config import ConfigError, ModelConfig, RopeScaling
from archlab.nn.presets import build_preset
from archlab.overrides import (
    coerce,
    defaults,
    flatten,
    load_yaml,
    parse_flags,
    set_dotted,
    typed_overrides,
)
from archlab.train.config import TrainConfig, resolve_config
from archlab.train.sections import OptimizerConfig


# ------------------------------------------------------------------------------------------ flags
def test_flag_spellings() -> None:
    got = parse_flags(
        [
            "--a.b",
            "1",
            "--c.d=2",
            "--save-every",
            "3",
            "--x=--y",
            "--neg",
            "-1",
            "--e",
            "=",
            "--a.b",
            "4",
        ]
    )
    assert got == {"a.b": "4", "c.d": "2", "save_every": "3", "x": "--y", "neg": "-1", "e": "="}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["foo"], "expected --key value, got 'foo'"),
        (["--"], "expected --key value, got '--'"),
        (["--a"], "flag --a needs a value"),
        (["--a", "--b", "1"], "flag --a needs a value"),
    ],
)
def test_bad_flags(args: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_flags(args)
    assert str(err.value) == message


# ------------------------------------------------------------------------------------------ values
YARN = RopeScaling(kind="yarn", factor=4.0, original_max_seq_len=64)
MODEL_VALUES = [  # (ModelConfig key, raw value from a flag or a YAML file, typed value)
    *[("tie_embeddings", raw, True) for raw in ("true", "True", "YES", "on", "1", True, 1)],
    *[("tie_embeddings", raw, False) for raw in ("false", "No", "off", "0", False, 0)],
    ("n_layers", "3", 3),
    ("n_layers", 3, 3),
    ("n_layers", 3.0, 3),
    ("n_layers", "3.0", 3),
    ("n_layers", "1e1", 10),
    ("rope.theta", "5e5", 5e5),
    ("rope.theta", 3, 3.0),
    ("rope.theta", "1_000", 1000.0),
    ("attn_softcap", "none", None),
    ("attn_softcap", "NULL", None),
    ("attn_softcap", None, None),
    ("attn_softcap", "30", 30.0),
    ("sliding_window", "None", None),
    ("sliding_window", "8", 8),
    ("qk_norm", "none", "none"),  # a str field that cannot be None keeps the word
    ("activation", "none", None),  # None = the ffn's activation
    ("norm", "layernorm", "layernorm"),
    ("rope.scaling", "none", None),
    ("rope.scaling", None, None),
    ("rope.scaling", '{"kind": "yarn", "factor": 4, "original_max_seq_len": 64}', YARN),
    # YAML strings typed
    ("rope.scaling", {"kind": "yarn", "factor": "4", "original_max_seq_len": "64"}, YARN),
    ("rope.scaling", YARN, YARN),
    ("rope.scaling", "linear", RopeScaling(kind="linear")),  # a bare string is the kind
    # a group given by its first field stays an edit (a dict)
    ("cosine", "dynamic", {"scale": "dynamic"}),
]
# old flat key -> its new dotted key (nn/config/legacy.py): the same raw value gives the
# same typed value
OLD_SPELLING = {"rope.theta": "rope_theta", "rope.scaling": "rope_scaling"}


def _at(tree: dict, dotted: str) -> object:
    for part in dotted.split("."):
        tree = tree[part]
    return tree


@pytest.mark.parametrize(
    ("key", "raw", "typed"), MODEL_VALUES, ids=[f"{k}={r!r}" for k, r, _ in MODEL_VALUES]
)
def test_model_values_are_typed_as_the_field_declares(key: str, raw: object, typed: object) -> None:
    got = _at(typed_overrides(ModelConfig, {key: raw}), key)
    assert got == typed and type(got) is type(typed)
    if key in OLD_SPELLING:
        assert typed_overrides(ModelConfig, {OLD_SPELLING[key]: raw}) == typed_overrides(
            ModelConfig, {key: raw}
        )


def test_a_value_object_one_sub_key_at_a_time() -> None:
    got = typed_overrides(
        ModelConfig,
        {
            "rope.scaling.kind": "yarn",
            "rope.scaling.factor": "4",
            "rope.scaling.original_max_seq_len": "64",
        },
    )
    assert got == {"rope": {"scaling": YARN}}
    got = typed_overrides(
        ModelConfig,
        {
            "rope.scaling": "yarn",
            "rope.scaling.factor": "4",
            "rope.scaling.original_max_seq_len": 64,
        },
    )
    assert got == {"rope": {"scaling": YARN}}
    tree: dict = {}
    set_dotted(ModelConfig, tree, "rope.scaling", YARN)
    # a later layer switches it off again (old spelling)
    set_dotted(ModelConfig, tree, "rope_scaling", "none")
    assert tree == {"rope": {"scaling": None}}


def test_an_old_switch_turns_its_group_on_or_off() -> None:
    """`cosine_attention` (before `cosine` was its own switch): true = the group (its defaults, or
    the sub-keys given), false = None, whatever came before."""
    assert typed_overrides(ModelConfig, {"cosine_attention": "true"}) == {"cosine": {}}
    assert typed_overrides(ModelConfig, {"cosine_scale": "dynamic", "cosine_attention": "yes"}) == {
        "cosine": {"scale": "dynamic"}
    }
    assert typed_overrides(ModelConfig, {"cosine.scale": "dynamic", "cosine_attention": "off"}) == {
        "cosine": None
    }
    with pytest.raises(
        ConfigError, match=r"^model.cosine_attention='maybe' is not allowed: expected bool"
    ):
        typed_overrides(ModelConfig, {"cosine_attention": "maybe"}, "model.")


def test_sub_keys_without_the_kind_edit_the_value_below() -> None:
    """`--model.rope.scaling.window 8` keeps the kind and the other fields of the layer below
    (a preset's, a built config's, a resumed run's); naming the kind starts from RopeScaling's
    defaults, as before, so every spelling that worked before means what it meant."""
    assert typed_overrides(ModelConfig, {"rope.scaling.window": "8"}) == {
        "rope": {"scaling": {"window": 8}}
    }
    rerope = RopeScaling("rerope", window=16, inference_only=True)
    assert build_preset(
        "hwfa2", **typed_overrides(ModelConfig, {"rope.scaling.window": "8"})
    ).rope.scaling == RopeScaling("rerope", window=8, inference_only=True)
    fresh = typed_overrides(
        ModelConfig, {"rope.scaling.kind": "rerope", "rope.scaling.window": "8"}
    )
    # no inference_only
    assert build_preset("hwfa2", **fresh).rope.scaling == RopeScaling("rerope", window=8)
    config = ModelConfig(rope={"scaling": rerope})
    assert config.replace(rope={"scaling": {"window": 4}}).rope.scaling == RopeScaling(
        "rerope", window=4, inference_only=True
    )
    assert config.replace(rope={"scaling": None}).rope.scaling is None
    for nothing_below in (
        lambda: ModelConfig(rope={"scaling": {"window": 4}}),
        lambda: build_preset("llama", rope={"scaling": {"window": 4}}),
    ):
        with pytest.raises(
            ValueError, match=r"^RopeScaling.window=4 is not allowed: only with kind in .*'none'"
        ):
            nothing_below()


@pytest.mark.parametrize(
    "raw", ["0.9,0.99", "[0.9, 0.99]", "(0.9,0.99)", " 0.9 , 0.99 ", [0.9, 0.99], (0.9, "0.99")]
)
def test_tuples(raw: object) -> None:
    assert coerce(typing.get_type_hints(OptimizerConfig)["betas"], raw, "optimizer.betas") == (
        0.9,
        0.99,
    )
    tree = defaults(TrainConfig)
    set_dotted(TrainConfig, tree, "optimizer.betas", raw)
    assert tree["optimizer"]["betas"] == (0.9, 0.99)


def test_train_values_and_sections() -> None:
    tree = defaults(TrainConfig)
    for key, raw in {
        "logging.sample_prompt": 123,
        "steps": "2e3",
        "precision.compile": "yes",
        "schedule.warmup_steps": "none",
        "optimizer.lr": "3e-4",
    }.items():
        set_dotted(TrainConfig, tree, key, raw)
    assert (tree["logging"]["sample_prompt"], tree["steps"], tree["precision"]["compile"]) == (
        "123",
        2000,
        True,
    )
    assert (tree["schedule"]["warmup_steps"], tree["optimizer"]["lr"]) == (None, 3e-4)


M = "model."
ERRORS = [  # (class, prefix, key, raw, the whole message)
    (ModelConfig, "", "n_layers", "three", "n_layers='three' is not allowed: expected int"),
    (ModelConfig, "", "n_layers", "3.5", "n_layers='3.5' is not allowed: expected int"),
    (ModelConfig, "", "n_layers", True, "n_layers=True is not allowed: expected int"),
    (ModelConfig, "", "n_layers", None, "n_layers=None is not allowed: expected int"),
    (
        ModelConfig,
        M,
        "tie_embeddings",
        "maybe",
        "model.tie_embeddings='maybe' is not allowed: expected bool (true/false, "
        "yes/no, on/off, 1/0)",
    ),
    (
        ModelConfig,
        M,
        "rope.theta",
        "none",
        "model.rope.theta='none' is not allowed: expected float",
    ),
    # old spelling
    (ModelConfig, M, "rope_theta", False, "model.rope.theta=False is not allowed: expected float"),
    (ModelConfig, M, "head_dim", "x", "model.head_dim='x' is not allowed: expected int or None"),
    (
        ModelConfig,
        M,
        "qk_norm",
        False,
        "model.qk_norm=False is not allowed: expected str (YAML reads yes/no/on/off as booleans: "
        "quote the word)",
    ),
    (
        ModelConfig,
        "",
        "layers",
        "3",
        "unknown config key 'layers': did you mean n_layers? ModelConfig has the "
        "fields vocab_size, d_model, ",
    ),
    (
        ModelConfig,
        "",
        "colour",
        "3",
        "unknown config key 'colour': ModelConfig has the fields vocab_size, d_model, ",
    ),
    (
        ModelConfig,
        M,
        "n_layers.x",
        "1",
        "unknown config key 'model.n_layers.x': model.n_layers has no sub-fields",
    ),
    (
        ModelConfig,
        M,
        "rope.scaling",
        '{"kind": "linear", "bogus": 1}',
        "unknown config key 'model.rope.scaling.bogus': RopeScaling has the fields kind, factor, ",
    ),
    (
        ModelConfig,
        M,
        "rope.scaling.bogus",
        "1",
        "unknown config key 'model.rope.scaling.bogus': RopeScaling has the fields kind, factor, ",
    ),
    (
        ModelConfig,
        M,
        "rope_scaling.bogus",
        "1",
        "unknown config key 'model.rope.scaling.bogus': RopeScaling has the fields kind, factor, ",
    ),
    (
        ModelConfig,
        M,
        "rope.scaling",
        '{"kind": linear}',
        "model.rope.scaling='{\"kind\": linear}' is not allowed: expected None, a JSON object of "
        "RopeScaling fields or a kind name (JSON error: Expecting value",
    ),
    (
        ModelConfig,
        M,
        "rope.scaling",
        3,
        "model.rope.scaling=3 is not allowed: expected None, a JSON object of "
        "RopeScaling fields or a kind name",
    ),
    (
        ModelConfig,
        M,
        "rope.scaling.factor",
        "big",
        "model.rope.scaling.factor='big' is not allowed: expected float",
    ),
    (
        ModelConfig,
        M,
        "rope.thetta",
        "1",
        "unknown config key 'model.rope.thetta': did you mean model.rope.theta? "
        "Rope has the fields theta, layout, fraction, scaling, pattern, local_theta, local_scaling",
    ),
    (
        TrainConfig,
        "",
        "optimizer",
        "1",
        "config key 'optimizer' is a section; set its fields, e.g. optimizer.name",
    ),
    (
        TrainConfig,
        "",
        "optimizer.lrr",
        "1",
        "unknown config key 'optimizer.lrr': did you mean optimizer.lr? OptimizerConfig has "
        "the fields name, ",
    ),
    (
        TrainConfig,
        "",
        "optimizer.betas",
        "0.9,x",
        "optimizer.betas='0.9,x' is not allowed: expected a list of float or None",
    ),
]


@pytest.mark.parametrize(
    ("cls", "prefix", "key", "raw", "message"),
    ERRORS,
    ids=[f"{p}{k}={r!r}" for _, p, k, r, _ in ERRORS],
)
def test_each_error_is_one_line_naming_the_key_and_what_is_allowed(
    cls: type, prefix: str, key: str, raw: object, message: str
) -> None:
    with pytest.raises(ConfigError) as err:
        set_dotted(cls, defaults(cls), key, raw, prefix)
    assert "\n" not in str(err.value) and str(err.value).startswith(message), str(err.value)


# ------------------------------------------------------------------------------------------ YAML
def test_yaml_flattens_to_the_same_keys_as_flags(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text(
        "preset: llama\nmodel:\n  n_layers: 3.0\n  tie_embeddings: on\n  rope:\n    scaling:\n"
        "      kind: yarn\n      factor: 4\n      original_max_seq_len: 64\n"
        "optimizer:\n  betas: [0.8, 0.9]\n"
    )
    flat = load_yaml(path)
    assert flat == flatten(
        {
            "preset": "llama",
            "model.n_layers": 3.0,
            "model.tie_embeddings": True,
            "model.rope.scaling.kind": "yarn",
            "model.rope.scaling.factor": 4,
            "model.rope.scaling.original_max_seq_len": 64,
            "optimizer.betas": [0.8, 0.9],
        }
    )
    from_flags = parse_flags(
        [
            "--preset",
            "llama",
            "--model.n_layers",
            "3",
            "--model.tie_embeddings",
            "on",
            "--model.rope.scaling",
            '{"kind": "yarn", "factor": 4, "original_max_seq_len": 64}',
            "--optimizer.betas",
            "0.8,0.9",
        ]
    )
    old_flags = parse_flags(
        [
            "--preset",
            "llama",
            "--model.n_layers",
            "3",
            "--model.tie_embeddings",
            "on",
            "--model.rope_scaling",
            '{"kind": "yarn", "factor": 4, "original_max_seq_len": 64}',
            "--optimizer.betas",
            "0.8,0.9",
        ]
    )
    assert resolve_config([flat]) == resolve_config([from_flags]) == resolve_config([old_flags])
    assert resolve_config([flat])[1].rope.scaling == YARN


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "a: [1, 2\n",
            r"config file .*run.yaml is not valid YAML \(line 2, column 1\): expected ',' or ']'",
        ),
        (
            "a: 1\n  b: 2\n",
            r"config file .*run.yaml is not valid YAML \(line 2, column 4\): mapping values",
        ),
        ("- 1\n- 2\n", r"config file .*run.yaml must hold a mapping of keys to values, got list"),
        (
            b"steps: 10\n# caf\xe9\n",
            r"config file .*run.yaml is not UTF-8 text \(byte 15: 0xe9\); save it as UTF-8",
        ),
        (
            "a: [1, 2\n",
            r".*'<stream end>' \(while parsing a flow sequence that starts at line 1, column 4\)$",
        ),
        (
            "steps: 3\noptimizer:\n  lr: 0.1\n  lr: 0.2\n",
            r"config file .*run.yaml gives key 'optimizer.lr' twice \(lines 3 and 4\); YAML keeps "
            r"only the last",
        ),
        # a merge key may repeat what it merges in
        ("base: &b {steps: 3}\nrun:\n  <<: *b\n  steps: 4\n", None),
    ],
)
def test_bad_yaml_is_one_line(tmp_path: Path, text: str | bytes, message: str | None) -> None:
    path = tmp_path / "run.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    if message is None:
        assert load_yaml(path) == {"base.steps": 3, "run.steps": 4}
        return
    with pytest.raises(ConfigError) as err:
        load_yaml(path)
    assert "\n" not in str(err.value) and re.match(message, str(err.value)), str(err.value)


def test_a_folder_given_for_a_config_file_is_named_a_folder(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_yaml(tmp_path)
    assert str(err.value) == f"config file {tmp_path} is a folder, not a YAML file"
    for name in ("b.yaml", "a.yaml", "c.yml", "d.yaml", "notes.txt"):
        (tmp_path / name).write_text("steps: 3\n")
    with pytest.raises(ConfigError) as err:
        load_yaml(tmp_path)
    assert str(err.value) == (
        f"config file {tmp_path} is a folder, not a YAML file (it holds a.yaml, b.yaml, c.yml, ...)"
    )
    with pytest.raises(
        FileNotFoundError, match=f"^config file {tmp_path / 'x.yaml'} does not exist$"
    ):
        load_yaml(tmp_path / "x.yaml")


# --------------------------------------------------------------------------------- inspect == train
FLAGS = [
    [
        "--model.n_kv_heads",
        "1",
        "--model.qk_norm=rmsnorm",
        "--model.activation",
        "gelu",
        "--model.ffn",
        "mlp",
    ],
    [
        "--model.rope.scaling",
        '{"kind": "linear", "factor": 2}',
        "--model.tie-embeddings",
        "yes",
        "--model.attn_softcap=none",
        "--model.n_layers",
        "3.0",
    ],
    [
        "--model.ffn",
        "reglu",
        "--model.rope_scaling",
        "yarn",
        "--model.rope.scaling.factor",
        "4",
        "--model.rope_scaling.original_max_seq_len",
        "64",
        "--model.norm",
        "layernorm",
    ],
]


def _inspect(argv: list[str], capsys: pytest.CaptureFixture) -> dict:
    assert main(["inspect", "--json", *argv]) == 0
    return json.loads(capsys.readouterr().out)["config"]


@pytest.mark.parametrize("preset", ["llama", "gemma2", "neox"])
@pytest.mark.parametrize("flags", FLAGS, ids=["gqa-act", "scaling-json", "scaling-keys"])
def test_inspect_and_train_resolve_the_same_flags_to_the_same_model(
    preset: str, flags: list[str], capsys: pytest.CaptureFixture
) -> None:
    _, model = resolve_config([{"preset": preset, **parse_flags(flags)}])
    expected = json.loads(json.dumps(model.to_dict()))
    assert _inspect(["--preset", preset, *flags], capsys) == expected
    # inspect's documented spelling: --n_kv_heads 1
    flat = [flag.replace("--model.", "--") for flag in flags]
    assert _inspect(["--preset", preset, *flat], capsys) == expected
    typed = typed_overrides(
        ModelConfig, {k.removeprefix("model."): v for k, v in parse_flags(flags).items()}
    )
    assert build_preset(preset, **typed) == model


@pytest.mark.parametrize("command", ["inspect", "train"])
def test_an_unknown_rope_scaling_key_is_one_line_in_both_commands(
    command: str, capsys: pytest.CaptureFixture
) -> None:
    assert (
        main([command, "--model.rope.scaling", '{"kind": "linear", "factor": 2, "fctor": 3}']) == 2
    )
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(f"archlab {command}: error: unknown config key "), err
    assert "rope.scaling.fctor': did you mean " in err
    assert "rope.scaling.factor? RopeScaling has the fields kind, factor" in err


def test_an_unknown_key_suggests_the_section_that_has_it_or_a_close_name() -> None:
    from archlab.train.config import resolve_config

    cases = (
        ("lr", "optimizer.lr"),
        ("tokenizer", "data.tokenizer"),
        ("warmup_steps", "schedule.warmup_steps"),
        # and a typo, by its closest field names
        ("step", "steps"),
        ("model.d_modl", "model.d_model"),
    )
    for key, near in cases:
        with pytest.raises(
            ValueError, match=rf"^unknown config key '{key}': did you mean {near}\? \w+Config has"
        ):
            resolve_config([{key: "1"}])
    # no guess without one
    with pytest.raises(ValueError, match=r"^unknown config key 'bogus': TrainConfig has"):
        resolve_config([{"bogus": "1"}])

"""`archlab convert` both ways, and `generate` / `inspect` on a Hugging Face folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaConfig

from archlab.checkpoint import load_model
from archlab.cli import main
from archlab.data.tokenizer import build_tokenizer
from archlab.interop import from_hf
from tests.interop.family_cases import llama_like
from tests.interop.test_families import randomize_hf_


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama over the 256 byte ids, with a tokenizer.json."""
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("hf")
    config = LlamaConfig(**llama_like(vocab_size=256, max_position_embeddings=64))
    randomize_hf_(AutoModelForCausalLM.from_config(config), 1.0).eval().save_pretrained(folder)
    build_tokenizer("byte", 256, None).save(folder)
    return folder


def test_convert_from_hf_and_back(
    hf_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    assert main(["convert", "--from-hf", str(hf_dir), "--out", str(tmp_path / "run")]) == 0
    model, tokenizer = load_model(tmp_path / "run")
    ids = torch.tensor([tokenizer.encode("hello world, again")])
    with torch.no_grad():
        assert torch.equal(model(ids), from_hf(hf_dir)(ids))
    assert main(["convert", "--to-hf", str(tmp_path / "run"), "--out", str(tmp_path / "back")]) == 0
    assert (tmp_path / "back" / "tokenizer.json").is_file()
    with torch.no_grad():
        want = AutoModelForCausalLM.from_pretrained(hf_dir)(ids).logits
        got = AutoModelForCausalLM.from_pretrained(tmp_path / "back")(ids).logits
    assert (got - want).abs().max() <= 1e-5
    assert "wrote" in capsys.readouterr().out


def test_convert_round_trips_gemma3_per_layer_rope(tmp_path: Path) -> None:
    """Gemma 3's local base and full-layer-only scaling survive the archlab checkpoint
    and come back."""
    from transformers import Gemma3TextConfig

    from tests.interop.family_cases import ROPE, gemma3_like

    torch.manual_seed(0)
    config = Gemma3TextConfig(
        **gemma3_like(
            dict(ROPE, rope_type="linear", factor=2.0, rope_theta=1000.0),
            dict(ROPE, rope_theta=50.0),
            vocab_size=256,
            sliding_window_pattern=2,
        )
    )
    randomize_hf_(AutoModelForCausalLM.from_config(config), 0.0).eval().save_pretrained(
        tmp_path / "hf"
    )
    build_tokenizer("byte", 256, None).save(tmp_path / "hf")
    assert main(["convert", "--from-hf", str(tmp_path / "hf"), "--out", str(tmp_path / "run")]) == 0
    model, _ = load_model(tmp_path / "run")
    assert (model.config.rope.local_theta, model.config.rope.local_scaling) == (50.0, False)
    assert main(["convert", "--to-hf", str(tmp_path / "run"), "--out", str(tmp_path / "back")]) == 0
    ids = torch.randint(0, 256, (1, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = AutoModelForCausalLM.from_pretrained(tmp_path / "hf")(ids).logits
        got = AutoModelForCausalLM.from_pretrained(tmp_path / "back")(ids).logits
    assert (got - want).abs().max() <= 1e-5


def test_generate_and_inspect_read_a_hf_folder(
    hf_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    main(["convert", "--from-hf", str(hf_dir), "--out", str(tmp_path / "run")])
    capsys.readouterr()
    texts = []
    for source in (hf_dir, tmp_path / "run"):
        argv = [
            "generate",
            "--checkpoint",
            str(source),
            "--prompt",
            "ab",
            "--max-new-tokens",
            "8",
            "--temperature",
            "0",
        ]
        assert main(argv) == 0
        texts.append(capsys.readouterr().out)
    assert texts[0] == texts[1] and texts[0].startswith("ab")
    assert main(["inspect", "--checkpoint", str(hf_dir), "--json", "--n_layers", "3"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["config"]["d_model"] == 64 and report["config"]["n_layers"] == 3


def test_convert_errors_are_one_line(
    hf_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    (tmp_path / "bare").mkdir()
    for name in ("config.json", "model.safetensors"):
        (tmp_path / "bare" / name).write_bytes((hf_dir / name).read_bytes())
    assert (
        main(["convert", "--from-hf", str(tmp_path / "bare"), "--out", str(tmp_path / "run")]) == 2
    )
    err = capsys.readouterr().err.strip()
    assert (
        err.startswith("archlab convert: error:")
        and "tokenizer.json is missing" in err
        and "\n" not in err
    )
    assert (
        main(
            ["convert", "--from-hf", str(hf_dir), "--out", str(tmp_path / "run"), "--dtype", "int8"]
        )
        == 2
    )
    assert "--dtype='int8' is not allowed" in capsys.readouterr().err
    assert (
        main(["convert", "--from-hf", str(tmp_path / "nope"), "--out", str(tmp_path / "run")]) == 2
    )
    # a missing folder is named as missing, not as a missing tokenizer
    err = capsys.readouterr().err.strip()
    assert (
        err
        == f"archlab convert: error: --from-hf {tmp_path / 'nope'}: no such folder (a Hugging Face "
        "model folder: config.json, safetensors weights, tokenizer.json)"
    )
    assert not (tmp_path / "run").exists()


def test_train_init_from_a_hf_folder_with_fewer_kv_heads(
    hf_dir: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`archlab train --init-from HF_DIR --model.n_kv_heads 1`: with lr 0 the saved weights are
    exactly the mean-pooled source, and the run uses the folder's tokenizer."""
    from archlab.interop.surgery import adapt

    (tmp_path / "corpus.txt").write_text("def f(x):\n    return x + 1\n" * 200)
    flags = [
        "--init-from",
        str(hf_dir),
        "--data",
        str(tmp_path / "corpus.txt"),
        "--steps",
        "1",
        "--out",
        str(tmp_path / "run"),
        "--model.n_kv_heads",
        "1",
        "--optimizer.lr",
        "0",
        "--schedule.warmup_steps",
        "0",
        "--data.batch_size",
        "2",
        "--data.block_size",
        "32",
        "--logging.samples",
        "0",
        "--logging.eval_every",
        "0",
        "--logging.tensorboard",
        "false",
        "--logging.progress",
        "false",
    ]
    with caplog.at_level("INFO"):
        assert main(["train", *flags]) == 0
    # the log names the source
    assert f"from {hf_dir}, " in caplog.text and "llama/tiny" not in caplog.text
    trained, _ = load_model(tmp_path / "run")
    source = from_hf(hf_dir)
    # the source is recorded (run config, checkpoint config and manifest, metrics) and evaluated
    # at step 0
    from archlab.checkpoint import latest_checkpoint
    from archlab.train.metrics import read_metrics

    run = tmp_path / "run"
    assert json.loads((run / "config.json").read_text())["train"]["init_from"] == str(hf_dir)
    ckpt = latest_checkpoint(run)
    assert json.loads((ckpt / "manifest.json").read_text())["provenance"] == {
        "init_from": str(hf_dir)
    }
    assert json.loads((ckpt / "config.json").read_text())["train"]["init_from"] == str(hf_dir)
    assert [r["init_from"] for r in read_metrics(run, "init")] == [str(hf_dir)]
    evals = read_metrics(run, "eval")
    assert [r["step"] for r in evals] == [0, 1]
    assert evals[0]["loss"] == evals[1]["loss"]  # lr 0: the step-0 loss is the loaded weights' own
    expected = adapt(source, trained.config)
    assert trained.config.n_kv_heads == 1 and trained.config.d_model == source.config.d_model
    for (name, a), (_, b) in zip(trained.state_dict().items(), expected.state_dict().items()):
        assert torch.equal(a, b), name


def test_init_from_as_a_config_key_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    assert main(["train", "--init_from", "somewhere", "--out", str(tmp_path / "run")]) == 2
    assert "init_from is set by --init-from PATH" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_train_init_from_refuses_an_unmapped_change(
    hf_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    (tmp_path / "corpus.txt").write_text("x" * 1000)
    flags = [
        "--init-from",
        str(hf_dir),
        "--data",
        str(tmp_path / "corpus.txt"),
        "--out",
        str(tmp_path / "run"),
        "--model.d_ff",
        "64",
    ]
    assert main(["train", *flags]) == 2
    assert "cannot change d_ff 96 -> 64: no principled weight mapping" in capsys.readouterr().err


def test_convert_from_hf_into_a_run_with_checkpoints_is_refused_or_adds_a_new_step(
    hf_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from archlab.checkpoint import list_checkpoints
    from tests.conftest import snapshot

    run = tmp_path / "run"
    assert main(["convert", "--from-hf", str(hf_dir), "--out", str(run)]) == 0
    capsys.readouterr()
    before = snapshot(run)
    assert main(["convert", "--from-hf", str(hf_dir), "--out", str(run)]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        "\n" not in err
        and "already holds checkpoints up to step_0000000" in err
        and "--force" in err
    )
    assert snapshot(run) == before  # nothing written, nothing replaced
    assert main(["convert", "--from-hf", str(hf_dir), "--out", str(run), "--force"]) == 0
    out = capsys.readouterr().out
    # says what it wrote, truthfully
    assert f"wrote {run}/checkpoints/step_0000001 (a new step" in out
    assert [p.name for p in list_checkpoints(run)] == ["step_0000000", "step_0000001"]
    # step 0 is untouched
    assert all(before[k] == v for k, v in snapshot(run).items() if k in before)
    fresh = tmp_path / "fresh"
    assert main(["convert", "--from-hf", str(tmp_path / "nowhere"), "--out", str(fresh)]) == 2
    assert not fresh.exists()  # a refused conversion leaves no folder behind


def test_convert_to_hf_into_a_non_empty_folder_needs_force(
    hf_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    main(["convert", "--from-hf", str(hf_dir), "--out", str(tmp_path / "run")])
    target = tmp_path / "target"
    target.mkdir()
    (target / "notes.txt").write_text("mine")
    (target / "model-00001-of-00002.safetensors").write_bytes(b"old shard")
    capsys.readouterr()
    assert main(["convert", "--to-hf", str(tmp_path / "run"), "--out", str(target)]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        "\n" not in err
        and f"--out {target} is not empty (model-00001-of-00002.safetensors, notes.txt)" in err
    )
    assert sorted(p.name for p in target.iterdir()) == [
        "model-00001-of-00002.safetensors",
        "notes.txt",
    ]
    assert main(["convert", "--to-hf", str(tmp_path / "run"), "--out", str(target), "--force"]) == 0
    assert "replaced 1 earlier weight file(s)" in capsys.readouterr().out
    assert (target / "notes.txt").read_text() == "mine"  # only config and weights are replaced
    assert not (target / "model-00001-of-00002.safetensors").exists()
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        want = AutoModelForCausalLM.from_pretrained(hf_dir)(ids).logits
        got = AutoModelForCausalLM.from_pretrained(target)(ids).logits
    assert (got - want).abs().max() <= 1e-5


def test_convert_from_hf_of_an_archlab_run_says_what_it_is(
    hf_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    main(["convert", "--from-hf", str(hf_dir), "--out", str(tmp_path / "run")])
    capsys.readouterr()
    assert (
        main(["convert", "--from-hf", str(tmp_path / "run"), "--out", str(tmp_path / "again")]) == 2
    )
    err = capsys.readouterr().err
    assert (
        "is an archlab checkpoint, not a Hugging Face folder: `convert --to-hf` exports it" in err
    )
    assert "tokenizer.json" not in err


def test_convert_keeps_the_chat_template_both_ways(hf_dir: Path, tmp_path: Path) -> None:
    from transformers import PreTrainedTokenizerFast

    template = "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    source = tmp_path / "hf"
    source.mkdir()
    for file in hf_dir.iterdir():
        (source / file.name).write_bytes(file.read_bytes())
    (source / "chat_template.jinja").write_text(template)
    assert main(["convert", "--from-hf", str(source), "--out", str(tmp_path / "run")]) == 0
    assert main(["convert", "--to-hf", str(tmp_path / "run"), "--out", str(tmp_path / "back")]) == 0
    tokenizer = PreTrainedTokenizerFast.from_pretrained(tmp_path / "back")
    messages = [{"role": "user", "content": "hi"}]
    assert tokenizer.chat_template == template
    assert tokenizer.apply_chat_template(messages, tokenize=False) == "<|user|>hi\n"


def test_eval_length_and_passkey_read_a_hf_folder_as_its_converted_checkpoint(
    hf_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """The same weights give the same table, read from the HF folder or from
    `convert --from-hf`'s checkpoint."""
    main(["convert", "--from-hf", str(hf_dir), "--out", str(tmp_path / "run")])
    (tmp_path / "held_out.txt").write_text("def f(x):\n    return x * 2\n" * 40)
    tables = {}
    for name, source in (("hf", hf_dir), ("run", tmp_path / "run")):
        capsys.readouterr()
        assert (
            main(
                [
                    "eval",
                    "length",
                    "--checkpoint",
                    str(source),
                    "--lengths",
                    "32,128",
                    "--scalings",
                    "none,yarn",
                    "--data",
                    str(tmp_path / "held_out.txt"),
                    "--out",
                    str(tmp_path / f"len-{name}"),
                    "--allow-extrapolation",
                    "--no-progress",
                ]
            )
            == 0
        )
        assert (
            main(
                [
                    "eval",
                    "passkey",
                    "--checkpoint",
                    str(source),
                    "--lengths",
                    "100",
                    "--depths",
                    "0.5",
                    "--trials",
                    "2",
                    "--allow-extrapolation",
                    "--out",
                    str(tmp_path / f"pk-{name}"),
                    "--no-progress",
                ]
            )
            == 0
        )
        tables[name] = (
            (tmp_path / f"len-{name}" / "length.csv").read_text(),
            (tmp_path / f"pk-{name}" / "passkey.md").read_text(),
        )
    assert tables["hf"] == tables["run"] and "\nyarn,128," in tables["hf"][0]
    capsys.readouterr()
    assert main(["eval", "length", "--checkpoint", str(hf_dir), "--lengths", "32"]) == 2
    assert "--data is needed with a Hugging Face folder" in capsys.readouterr().err


def test_a_config_no_family_reads_is_refused_before_the_out_folder_is_touched(
    hf_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    for file in hf_dir.iterdir():
        (bad / file.name).write_bytes(file.read_bytes())
    config = json.loads((bad / "config.json").read_text())
    (bad / "config.json").write_text(json.dumps({**config, "hidden_act": "xielu"}))
    assert main(["convert", "--from-hf", str(bad), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("archlab convert: error: ") and "xielu" in err and "\n" not in err
    assert not (tmp_path / "out").exists()


def test_convert_from_hf_into_a_folder_of_other_files_is_refused_untouched(
    hf_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from tests.conftest import snapshot

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    (mine / "data").mkdir()
    before = snapshot(mine)
    assert main(["convert", "--from-hf", str(hf_dir), "--out", str(mine)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"archlab convert: error: --out {mine} already holds other files (data, notes.txt): choose "
        "another --out, or pass --force to add this model as a new step"
    )
    # no .lock
    assert snapshot(mine) == before and sorted(p.name for p in mine.iterdir()) == [
        "data",
        "notes.txt",
    ]


@pytest.mark.parametrize("existed", [False, True])
def test_a_late_refusal_of_a_conversion_releases_the_lock_and_leaves_no_folder(
    existed: bool, hf_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """A refusal after the run folder's lock was taken (damaged weights, found when they are read):
    a folder the conversion made is removed, one that was there stays as it was (empty, no .lock),
    and the folder is free."""
    bad = tmp_path / "bad"
    bad.mkdir()
    for file in hf_dir.iterdir():
        (bad / file.name).write_bytes(file.read_bytes())
    weights = bad / "model.safetensors"
    # truncated: the header promises more bytes than are there
    weights.write_bytes(weights.read_bytes()[:-64])
    out = tmp_path / "out"
    if existed:
        out.mkdir()
    assert main(["convert", "--from-hf", str(bad), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err.startswith("archlab convert: error: ")
        and "model.safetensors" in err
        and "\n" not in err
    )
    assert out.exists() == existed and (not existed or list(out.iterdir()) == [])
    # the lock was released
    assert main(["convert", "--from-hf", str(hf_dir), "--out", str(out)]) == 0


@pytest.fixture(scope="module")
def chat_hf_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Llama with chat special tokens (ids 256-259: <|endoftext|>, <|im_start|>, <|im_end|>,
    <|done|>) whose greedy continuation of "ab" is 175, <|im_start|>, 114, 114, then <|done|>: the
    head rows of those two specials are scaled copies of the rows the model would have picked there.
    EOS <|im_end|> (tokenizer_config.json); generation_config.json also ends at <|done|>, an end
    token only that file names (as SmolLM2's folders do)."""
    folder = tmp_path_factory.mktemp("chat")
    torch.manual_seed(0)
    model = randomize_hf_(
        AutoModelForCausalLM.from_config(
            LlamaConfig(**llama_like(vocab_size=260, max_position_embeddings=64))
        ),
        1.0,
    ).eval()
    ids = torch.tensor([list(b"ab")])
    greedy = (
        lambda: model.generate(
            ids,
            max_new_tokens=12,
            do_sample=False,
            eos_token_id=None,  # noqa: E731
            pad_token_id=0,
        )[0, 2:].tolist()
    )
    with torch.no_grad():
        model.lm_head.weight[257] = model.lm_head.weight[greedy()[1]] * 1.05
        model.lm_head.weight[259] = model.lm_head.weight[greedy()[4]] * 1.05
    assert greedy()[:5] == [175, 257, 114, 114, 259]
    model.save_pretrained(folder)
    inner = build_tokenizer("byte", 256, None).inner
    inner.add_special_tokens(["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|done|>"])
    inner.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|im_end|>"}))
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [258, 259]}))
    return folder


def test_special_tokens_follow_one_policy_from_the_hf_folder_and_its_converted_checkpoint(
    chat_hf_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """Both load paths stop at the same ids (the EOS, the special end tokens,
    generation_config.json's) and leave special tokens out of the text unless --special-tokens; the
    tokens themselves keep them."""
    from archlab.infer.generate import generate_text
    from archlab.infer.sampling import SamplingConfig
    from archlab.interop import load_hf_tokenizer

    assert main(["convert", "--from-hf", str(chat_hf_dir), "--out", str(tmp_path / "run")]) == 0
    run_model, run_tokenizer = load_model(tmp_path / "run")
    hf_tokenizer = load_hf_tokenizer(chat_hf_dir)
    for tokenizer in (hf_tokenizer, run_tokenizer):
        assert tokenizer.eos_id == 258 and tokenizer.stop_ids == {256, 258, 259}
        assert tokenizer.special_ids == {256, 257, 258, 259}
    greedy = SamplingConfig(max_new_tokens=12, temperature=0)
    for model, tokenizer in ((from_hf(chat_hf_dir), hf_tokenizer), (run_model, run_tokenizer)):
        out = generate_text(model, tokenizer, ["ab"], greedy)
        assert out.tokens == [[175, 257, 114, 114]] and out.texts == [
            bytes([175, 114, 114]).decode(errors="replace")
        ]
        shown = generate_text(model, tokenizer, ["ab"], greedy, special_tokens=True)
        assert shown.tokens == out.tokens and shown.texts == [
            tokenizer.decode([175, 257, 114, 114])
        ]
        assert "<|im_start|>" in shown.texts[0]
    capsys.readouterr()
    printed = {}
    for name, source in (("hf", chat_hf_dir), ("run", tmp_path / "run")):
        for flags in ([], ["--special-tokens"]):
            argv = [
                "generate",
                "--checkpoint",
                str(source),
                "--prompt",
                "ab",
                "--max-new-tokens",
                "12",
                "--temperature",
                "0",
                *flags,
            ]
            assert main(argv) == 0
            printed[name, bool(flags)] = capsys.readouterr().out
    assert printed["hf", False] == printed["run", False] and "<|" not in printed["hf", False]
    assert (
        printed["hf", True]
        == printed["run", True]
        == "ab" + hf_tokenizer.decode([175, 257, 114, 114]) + "\n"
    )

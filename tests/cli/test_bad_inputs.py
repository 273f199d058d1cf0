"""Bad command lines, as a table: each exits 2 with one line on stderr (`archlab CMD: error: ...`),
no traceback, and that line is the only one printed (stdout, stderr and the log, routed to stderr
as `archlab` routes it, together): every refusal comes before any work, so nothing changed under
the test folder, no run folder was created, no data was prepared and no model was built. In-process
through `archlab.cli.main`; config, data, checkpoints, prompts, sampling and devices; and the
issue's command in a fresh process."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from archlab.cli import main
from archlab.data import prepare
from archlab.train.lock import RunLock
from archlab.train.state import RunState
from tests.conftest import SRC, snapshot
from tests.train.test_trainer import TINY, cli_flags


def _rehash(path: Path) -> None:
    manifest = json.loads((path / "manifest.json").read_text())
    for name, entry in manifest["files"].items():
        data = (path / name).read_bytes()
        entry.update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
    (path / "manifest.json").write_text(json.dumps(manifest))


class Payload:
    def __reduce__(self) -> tuple:
        return (print, ("pickle ran",))


@pytest.fixture(scope="module")
def world(prepared: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished 2-step run, damaged copies of its checkpoint, and a few bad corpora and files."""
    root = tmp_path_factory.mktemp("bad")
    assert (
        main(["train", *cli_flags(prepared, root / "run", steps="2", **{"schedule.horizon": "6"})])
        == 0
    )
    ckpt = root / "run" / "checkpoints" / "step_0000002"
    for name in (
        "truncated",
        "nomanifest",
        "noconfig",
        "shape",
        "pickled",
        "nofiles",
        "badmetrics",
        "notjson",
    ):
        shutil.copytree(root / "run", root / name)
    copy = lambda name: root / name / "checkpoints" / ckpt.name  # noqa: E731
    weights = copy("truncated") / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    (copy("nomanifest") / "manifest.json").unlink()
    (copy("noconfig") / "config.json").write_text("{not json")
    _rehash(copy("noconfig"))
    config = json.loads((copy("shape") / "config.json").read_text())
    config["model"]["d_ff"] = 96
    (copy("shape") / "config.json").write_text(json.dumps(config))
    _rehash(copy("shape"))
    torch.save({"step": 2, "payload": Payload()}, copy("pickled") / "state.pt")
    _rehash(copy("pickled"))
    manifest = json.loads((copy("nofiles") / "manifest.json").read_text())
    del manifest["files"]
    (copy("nofiles") / "manifest.json").write_text(json.dumps(manifest))
    metrics = root / "badmetrics" / "metrics.jsonl"
    raw = bytearray(metrics.read_bytes())
    raw[10] = 0xA4  # a flipped byte: not UTF-8 (the issue's "'utf-8' codec can't decode byte 0xa4")
    metrics.write_bytes(bytes(raw))
    metrics = root / "notjson" / "metrics.jsonl"
    metrics.write_text('{"step": 1, "kind": "train"}\n{"step": 2, "ki\n' + metrics.read_text())
    (root / "empty.txt").write_text("")
    (root / "afile.txt").write_text("a file, not a folder")
    (root / "onlyempty").mkdir()
    (root / "onlyempty" / "a.txt").write_text("")
    (root / "onlyempty" / ".hidden.txt").write_text("hidden text")
    (root / "short.txt").write_text("abc")
    (root / "binary.bin").write_bytes(bytes(range(256)))  # a binary file given as prompts
    (root / "other.txt").write_text("another corpus entirely\n" * 300)
    (root / "list.yaml").write_text("- 1\n- 2\n")
    (root / "emptydir").mkdir()
    (root / "hf").mkdir()
    (root / "hf" / "config.json").write_text(json.dumps({"model_type": "llama"}))
    return root


R = "{root}"  # replaced by the module's folder
LONG = "x" * 40
TRAIN = [  # (extra train flags on a fresh run R/new, expected text)
    (
        ["--optimizer.name", "sgdx"],
        "optimizer.name='sgdx' is not allowed: one of adamw, lion, tiger",
    ),
    (["--optimizer.lr", "-1"], "optimizer.lr=-1.0 is not allowed"),
    (["--steps", "0"], "steps=0 is not allowed: an integer from 1 to 1,000,000,000"),
    (
        ["--steps", "1e20"],
        "steps=100000000000000000000 is not allowed: an integer from 1 to 1,000,000,000",
    ),
    (["--steps", "abc"], "steps='abc' is not allowed: expected int"),
    (["--optimizer.lrr", "1"], "unknown config key 'optimizer.lrr'"),
    (["--optimizer.grad_clip", "abc"], "optimizer.grad_clip='abc' is not allowed"),
    (["--optimizer.betas", "0.9,1.5"], "optimizer.betas=[0.9, 1.5] is not allowed"),
    (["--preset", "gpt5"], "preset='gpt5' is not allowed"),
    (["--size", "huge"], "size='huge' is not allowed"),
    (["--model.norm", "batchnorm"], "ModelConfig.norm='batchnorm' is not allowed"),
    (["--model.n_layerz", "2"], "unknown config key 'model.n_layerz'"),
    (["--model.n_heads", "3"], "ModelConfig"),
    (
        ["--data.block_size", "64"],
        "data.block_size=64 is not allowed: at most model.max_seq_len=32",
    ),
    (
        ["--data.batch_size", "6", "--optimizer.grad_accum", "4"],
        "must divide evenly over 1 ranks x 4",
    ),
    (["--data.val_fraction", "1.5"], "data.val_fraction=1.5 is not allowed"),
    (["--config", "{root}/missing.yaml"], "config file {root}/missing.yaml does not exist"),
    (["--config", "{root}/list.yaml"], "must hold a mapping of keys to values"),
    (["--config", "{root}/emptydir"], "config file {root}/emptydir is a folder, not a YAML file"),
    (["--distributed", "ddp"], "--distributed ddp needs torchrun"),
    (["--distributed", "mpi"], "distributed='mpi' is not allowed"),
    (["--logging.eval_every", "-1"], "logging.eval_every=-1 is not allowed"),
    (
        ["--logging.sample_prompt", "", "--logging.samples", "1"],
        "logging.sample_prompt='' is not allowed",
    ),
    (
        ["--logging.samples", "1", "--logging.sample_tokens", "32"],
        "logging.sample_tokens=32 is not allowed: below the model's 32-token context",
    ),
    (["--model"], "flag --model needs a value"),
    (["--schedule.name", "step"], "schedule.name='step' is not allowed"),
    (
        ["--schedule.warmup_steps", "50", "--steps", "20"],
        "schedule.warmup_steps=50 is not allowed: fewer than",
    ),
    (["--schedule.decay_shape", "cubic"], "schedule.decay_shape='cubic' is not allowed"),
    (
        ["--schedule.horizon", "5", "--steps", "10"],
        "steps=10 is not allowed: past the end of the lr schedule",
    ),
    (["--precision.dtype", "fp16"], "precision.dtype='fp16' is not allowed"),
    (["--precision.device", "tpu"], "precision.device='tpu' is not allowed"),
    (["--extend"], "--extend lengthens a resumed run: use it with --resume"),
    (["--resume"], "--resume: no checkpoint in {root}/new/checkpoints to resume from"),
    (["--data", "/no/such/corpus.txt"], "corpus path /no/such/corpus.txt does not exist"),
    (["--data", "{root}/empty.txt"], "corpus {root}/empty.txt is empty (0 bytes)"),
    (["--data", "{root}/onlyempty"], "corpus {root}/onlyempty holds no readable text files"),
    (["--data", "{root}/short.txt"], "split has"),
    (
        ["--data", "{root}/other.txt", "--data.tokenizer", "/no/such/tokenizer.json"],
        "/no/such/tokenizer.json",
    ),
    # a raw corpus, so the data would be prepared first if the memory estimate waited for it (it
    # needs the vocabulary size, which the config holds, not the tokens)
    (["--data", "{root}/other.txt", "--model.d_model", "1000000"], "this run needs about"),
]
RESUME = [  # (flags after `train --out R/RUN`, expected text)
    (
        ["--out", "{root}/afile.txt"],
        "--out {root}/afile.txt is not a folder: {root}/afile.txt is a file",
    ),
    (
        ["--out", "{root}/afile.txt/run"],
        "--out {root}/afile.txt/run is not a folder: {root}/afile.txt is a file",
    ),
    (
        ["--out", "{root}/badmetrics", "--resume", "--steps", "4"],
        "{root}/badmetrics/metrics.jsonl is corrupt: line 1 is not UTF-8 text (byte 0xa4 "
        "at column 11)",
    ),
    (
        ["--out", "{root}/notjson", "--resume", "--steps", "4"],
        "{root}/notjson/metrics.jsonl is corrupt: line 2 is not a JSON row",
    ),
    (["--out", "{root}/run"], "already holds checkpoints; pass --resume to continue it"),
    (
        ["--out", "{root}/run", "--resume", "--model.n_layers", "2"],
        "the model config differs from the checkpoint's",
    ),
    (
        ["--out", "{root}/run", "--resume", "--preset", "gpt2"],
        "--resume: preset 'gpt2' differs from the checkpoint's",
    ),
    (
        ["--out", "{root}/run", "--resume", "--steps", "1"],
        "the run is already at step 2, so --steps 1 leaves nothing",
    ),
    (
        ["--out", "{root}/run", "--resume", "--steps", "50"],
        "--steps 50 is past the end of the run's lr schedule",
    ),
    (
        ["--out", "{root}/run", "--resume", "--data", "{root}/other.txt"],
        "data.source '{root}/other.txt' differs",
    ),
    (
        ["--out", "{root}/run", "--resume", "--schedule.name", "wsd"],
        "schedule.name 'wsd' differs from the run's",
    ),
    (
        ["--out", "{root}/run", "--resume", "--steps", "2", "--extend"],
        "--steps 2 does not lengthen the run",
    ),
    (["--out", "{root}/truncated", "--resume"], "model.safetensors has 100 bytes"),
    (["--out", "{root}/nomanifest", "--resume"], "manifest.json is missing or unreadable"),
    (["--out", "{root}/noconfig", "--resume"], "config.json cannot be read"),
    (["--out", "{root}/nofiles", "--resume"], "manifest.json has no 'files' table"),
    (
        ["--out", "{root}/shape", "--resume", "--steps", "4"],
        "gate_up_proj.weight is [256, 32] in model.safetensors",
    ),
    (
        ["--out", "{root}/pickled", "--resume", "--steps", "4"],
        "state.pt holds Python objects, not only tensors",
    ),
]
GOOD = ["--checkpoint", "{root}/run", "--device", "cpu"]
GENERATE = [  # (generate flags, expected text)
    (
        ["--checkpoint", "/no/such/run", "--prompt", "a"],
        "--checkpoint /no/such/run: no such file or folder",
    ),
    (
        ["--checkpoint", "{root}/emptydir", "--prompt", "a"],
        "is neither a checkpoint nor a run folder",
    ),
    (
        ["--checkpoint", "{root}/hf", "--prompt", "a"],
        "this Hugging Face folder has no tokenizer.json",
    ),
    (["--checkpoint", "{root}/truncated", "--prompt", "a"], "model.safetensors has 100 bytes"),
    (
        ["--checkpoint", "{root}/nomanifest", "--prompt", "a"],
        "manifest.json is missing or unreadable",
    ),
    (["--checkpoint", "{root}/shape", "--prompt", "a"], "but config.json builds [192, 32]"),
    (["--checkpoint", "{root}/nofiles", "--prompt", "a"], "manifest.json has no 'files' table"),
    (
        [*GOOD, "--prompt", "a", "--temperature", "-1"],
        "SamplingConfig.temperature=-1.0 is not allowed",
    ),
    ([*GOOD, "--prompt", "a", "--top-p", "1.5"], "SamplingConfig.top_p=1.5 is not allowed"),
    ([*GOOD, "--prompt", "a", "--top-k", "0"], "SamplingConfig.top_k=0 is not allowed"),
    (
        [*GOOD, "--prompt", "a", "--max-new-tokens", "0"],
        "SamplingConfig.max_new_tokens=0 is not allowed",
    ),
    ([*GOOD, "--prompt", "a", "--stop", ""], "SamplingConfig.stop=('',) is not allowed"),
    ([*GOOD, "--prompt", "a", "--batch-size", "0"], "--batch-size=0 is not allowed"),
    ([*GOOD, "--prompt-file", "/no/such/prompts.txt"], "/no/such/prompts.txt"),
    (
        [*GOOD, "--prompt-file", "{root}/binary.bin"],
        "--prompt-file {root}/binary.bin is not UTF-8 text: line 2 has byte 0x80 at column 118",
    ),
    (
        [*GOOD, "--prompt", LONG, "--max-new-tokens", "10"],
        "exceeds the model's context of 32 tokens",
    ),
    (
        ["--checkpoint", "{root}/run", "--prompt", "a", "--device", "tpu"],
        "--device 'tpu' is not allowed",
    ),
    (["--checkpoint", "{root}/run", "--prompt", "a", "--device", "cuda:7"], "--device cuda:7"),
]
OTHER = [  # (full argv, expected text)
    (["inspect", "--preset", "gpt5"], "is not allowed"),
    (
        ["eval", "length", "--checkpoint", "{root}/run", "--windows", "many"],
        "argument --windows: invalid int value: 'many' (see archlab eval length --help)",
    ),
    (
        ["eval", "length", "--checkpoint", "{root}/run", "--forse"],
        "unrecognized arguments: --forse (see archlab eval --help)",
    ),
    (["generate", "--prompt", "a"], "the following arguments are required: --checkpoint"),
    (
        ["convert", "--from-hf", "{root}/run", "--out", "{root}/newdata"],
        "--from-hf {root}/run is an archlab checkpoint, not a Hugging Face folder",
    ),
    (["inspect", "--context", "0"], "--context=0 is not allowed"),
    (["inspect", "--n_heads", "3"], "ModelConfig"),
    (["inspect", "--d_modle", "3"], "d_modle"),
    (
        ["inspect", "--checkpoint", "{root}/run", "--size", "small"],
        "--checkpoint reads the model from the checkpoint",
    ),
    (["inspect", "--config", "/no/such/run.yaml"], "/no/such/run.yaml"),
    (["plot", "run", "/no/such/run"], "/no/such/run/metrics.jsonl does not exist"),
    (
        ["plot", "run", "{root}/emptydir"],
        "does not exist (is {root}/emptydir a training run folder?)",
    ),
    (
        ["plot", "run", "{root}/badmetrics"],
        "{root}/badmetrics/metrics.jsonl is corrupt: line 1 is not UTF-8 text",
    ),
    (
        ["plot", "run", "{root}/notjson"],
        "{root}/notjson/metrics.jsonl is corrupt: line 2 is not a JSON row",
    ),
    (
        ["data", "prepare", "--data", "{root}/empty.txt", "--out", "{root}/newdata"],
        "is empty (0 bytes)",
    ),
    (
        ["data", "prepare", "--data", "{root}/onlyempty", "--out", "{root}/newdata"],
        "holds no readable text files",
    ),
    (
        ["data", "prepare", "--data", "stdlib", "--out", "{root}/afile.txt"],
        "--out {root}/afile.txt is not a folder",
    ),
    (
        ["eval", "length", "--checkpoint", "/no/such/run"],
        "--checkpoint /no/such/run: no such file or folder",
    ),
    (
        ["eval", "length", "--checkpoint", "{root}/hf"],
        "this Hugging Face folder has no tokenizer.json",
    ),
    (
        ["eval", "length", "--checkpoint", "{root}/emptydir"],
        "is neither a checkpoint nor a run folder",
    ),
    (
        ["eval", "length", "--checkpoint", "{root}/run", "--lengths", "16,x"],
        "--lengths '16,x' is not allowed",
    ),
    (
        ["eval", "length", "--checkpoint", "{root}/run", "--scalings", "none,rope9"],
        "--scalings 'rope9' is not allowed: one of none, linear",
    ),
    (
        ["eval", "length", "--checkpoint", "{root}/run", "--data", "/no/such/held.txt"],
        "corpus path /no/such/held.txt does not exist",
    ),
    (
        ["eval", "length", "--checkpoint", "{root}/run", "--data", "{root}/empty.txt"],
        "is empty (0 bytes)",
    ),
    (
        ["eval", "length", "--checkpoint", "{root}/run", "--out", "{root}/afile.txt"],
        "is not a folder",
    ),
    (
        ["eval", "length", "--checkpoint", "{root}/run", "--score-last", "0"],
        "--score-last '0' is not allowed",
    ),
    (
        ["eval", "length", "--checkpoint", "{root}/run", "--lengths", "16", "--score-last", "20"],
        "--score-last 20 is not allowed: at most the shortest length 16",
    ),
    (
        ["eval", "length", "--checkpoint", "{root}/run", "--lengths", "64"],
        "length 64 is past the 32 tokens",
    ),
    (
        ["eval", "length", "--checkpoint", "{root}/run", "--windows", "0"],
        "--windows=0 is not allowed",
    ),
    (
        ["eval", "length", "--checkpoint", "{root}/run", "--scalings", "rerope", "--window", "40"],
        "window=40 is not allowed: between 1 and max_seq_len = 32",
    ),
    (
        [
            "eval",
            "passkey",
            "--checkpoint",
            "{root}/run",
            "--lengths",
            "40",
            "--allow-extrapolation",
        ],
        "--lengths 40 is not allowed: each at least 97 characters",
    ),
    (
        ["eval", "passkey", "--checkpoint", "{root}/run", "--scaling", "rope9"],
        "--scaling 'rope9' is not allowed",
    ),
    (
        ["eval", "passkey", "--checkpoint", "{root}/run"],
        "this model's context of 32 tokens holds no passkey prompt",
    ),
    (
        ["eval", "passkey", "--checkpoint", "{root}/run", "--trials", "0"],
        "--trials=0 is not allowed",
    ),
    (
        ["eval", "continuation", "--checkpoint", "{root}/run", "--cuts", "0"],
        "--cuts=0 is not allowed",
    ),
    (
        ["eval", "continuation", "--checkpoint", "{root}/run", "--data", "{root}/onlyempty"],
        "no readable text files",
    ),
    (
        ["data", "prepare", "--data", "/no/such/corpus.txt", "--out", "{root}/newdata"],
        "does not exist",
    ),
    (
        [
            "data",
            "prepare",
            "--data",
            "{root}/other.txt",
            "--val-fraction",
            "2",
            "--out",
            "{root}/newdata",
        ],
        "val_fraction must be in (0, 1)",
    ),
]
# the one refusal the data decide: a corpus too short for one window is known once it is tokenized;
# it is tokenized into a temp folder that is removed, before anything is published or logged (every
# other row prepares nothing)
DATA_DECIDED = (f"{R}/short.txt",)
BASE = [
    *(x for key, value in TINY.items() for x in (f"--{key}", value)),
    "--data.source",
    "{prepared}",
    "--out",
    "{root}/new",
    "--steps",
    "3",
]
CASES = (
    [(["train", *BASE, *a], m, "train " + " ".join(a)) for a, m in TRAIN]
    + [(["train", *a], m, "train " + " ".join(a[1:]).replace("{root}/", "")) for a, m in RESUME]
    + [
        (["generate", *a], m, "generate " + " ".join(x for x in a if x not in GOOD))
        for a, m in GENERATE
    ]
    + [(a, m, " ".join(a)) for a, m in OTHER]
)


@pytest.mark.parametrize(("argv", "message"), [c[:2] for c in CASES], ids=[c[2] for c in CASES])
def test_bad_input_exits_2_with_one_line_and_changes_nothing(
    argv: list[str],
    message: str,
    world: Path,
    prepared: Path,
    terminal: pytest.CaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if "cuda:7" in argv and torch.cuda.device_count() > 7:
        pytest.skip("this machine has a cuda:7")
    argv = [a.replace(R, str(world)).replace("{prepared}", str(prepared)) for a in argv]
    monkeypatch.setattr("sys.stdin", open("/dev/null"))  # no prompt piped in
    monkeypatch.chdir(world)  # a default output folder (eval-length/...) would show in the snapshot
    # a model built for training; a corpus tokenized; a run folder made
    built, prepared_into, made = [], [], []
    build_model, build_data, acquire = RunState._build_model, prepare._build, RunLock.acquire
    monkeypatch.setattr(
        RunState,
        "_build_model",
        lambda self, *a, **k: built.append(1) or build_model(self, *a, **k),
    )
    monkeypatch.setattr(
        prepare,
        "_build",
        lambda out, *a, **k: prepared_into.append(out) or build_data(out, *a, **k),
    )

    def acquire_spy(lock: RunLock) -> RunLock:
        acquire(lock)
        if lock.created_folder:
            made.append(lock.path.parent)
        return lock

    monkeypatch.setattr(RunLock, "acquire", acquire_spy)
    before = snapshot(world)
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        assert main(argv) == 2
    out = terminal.readouterr()
    shown = out.out + out.err
    # the refusal is the only line shown: nothing logged, warned or printed before it (a warning
    # would print too)
    assert shown.count("\n") == 1 and shown.endswith("\n") and "Traceback" not in shown, shown
    assert [str(w.message) for w in warned] == []
    assert (
        shown.startswith(f"archlab {argv[0]}: error: ") and message.replace(R, str(world)) in shown
    ), shown
    # before any work: no model built, no corpus tokenized (but the one decided by its
    # tokens), nothing written
    assert built == []
    decided_by_data = any(late.replace(R, str(world)) in argv for late in DATA_DECIDED)
    assert bool(prepared_into) == decided_by_data, prepared_into
    # ... and no run folder made, even for a moment (the corpus's tokens go into the run folder:
    # made, then removed)
    assert bool(made) == decided_by_data, made
    assert (
        snapshot(world) == before
        and not (world / "new").exists()
        and not (world / "newdata").exists()
    )
    assert not any(world.glob("eval-*"))  # nothing left behind, not even an empty folder
    assert not any(world.glob("**/.*.tmp-*")), list(world.glob("**/.*.tmp-*"))  # nor a temp folder
    assert len(CASES) >= 40


def test_the_issue_s_memory_refusal_is_the_only_line_in_a_fresh_process(tmp_path: Path) -> None:
    """`archlab train --model.d_model 1000000 --data stdlib --out X`, as a user types it: the memory
    refusal is the only line on the terminal (stdout and stderr together), and X is not made: no
    stdlib tokens were prepared."""
    env = {k: v for k, v in os.environ.items() if k != "ARCHLAB_SKIP_MEMORY_CHECK"}
    env["PYTHONPATH"] = os.pathsep.join(
        [str(SRC), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    )
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "archlab",
            "train",
            "--model.d_model",
            "1000000",
            "--data",
            "stdlib",
            "--out",
            str(tmp_path / "X"),
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stdout
    assert done.stdout.count("\n") == 1 and done.stdout.startswith(
        "archlab train: error: this run needs about "
    ), done.stdout
    assert list(tmp_path.iterdir()) == []


def test_init_from_refuses_what_the_settings_decide_before_loading_its_source(
    world: Path, terminal: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--init-from and a resumed LoRA run load a model before `train()`: the memory estimate is
    checked on the source's config.json first, so the refusal is the only line and the source's
    weights are never read."""
    from archlab.interop.model_folder import ModelFolder

    loaded = []
    monkeypatch.setattr(
        ModelFolder,
        "load",
        lambda self, *a: loaded.append(self.path) or pytest.fail("source loaded"),
    )
    argv = [
        "train",
        "--init-from",
        str(world / "run"),
        "--out",
        str(world / "new"),
        "--data",
        str(world / "other.txt"),
        "--data.block_size",
        "32",
        "--data.batch_size",
        "4000000",
        "--steps",
        "2",
    ]
    assert main(argv) == 2
    shown = terminal.readouterr()
    assert shown.out == "" and shown.err.count("\n") == 1, shown
    assert shown.err.startswith("archlab train: error: this run needs about ")
    assert loaded == [] and not (world / "new").exists()

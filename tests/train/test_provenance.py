"""Each run records what trained it (train/provenance.py): `archlab train` writes
RUN/provenance.json with the commit, versions, machine, threads, the data folder's hash and the
execution mode, each checked here against a source of its own (git, /proc/cpuinfo, hashlib over the
folder's files); a resume appends a session and shows what changed (another commit); the commit is
"unknown", never an error, outside a git checkout that tracks the package."""

from __future__ import annotations

import hashlib
import json
import logging
import platform
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from archlab.cli import main
from archlab.data.prepare import prepared_hash
from archlab.train import provenance
from archlab.train.config import resolve_config
from tests.train.test_trainer import TINY, cli_flags

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "src" / "archlab"


def git(*args: str, cwd: Path = REPO) -> str:
    return subprocess.run(
        ["git", "-C", str(cwd), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


def checkout_state() -> dict:
    """What the run should record, asked of git here (the tests run from a checkout, or from a
    copy without one)."""
    if not (REPO / ".git").exists():
        return {"commit": "unknown", "dirty": "unknown"}
    return {
        "commit": git("rev-parse", "HEAD"),
        "dirty": bool(git("status", "--porcelain", "--", str(PACKAGE))),
    }


def folder_sha256(folder: Path) -> str:
    """The prepared folder's hash written out: meta.json's request, then
    tokenizer.json, train.bin, val.bin."""
    meta = json.loads((folder / "meta.json").read_text())
    blob = json.dumps(meta["request"], sort_keys=True).encode() + b"".join(
        (folder / name).read_bytes() for name in ("tokenizer.json", "train.bin", "val.bin")
    )
    return hashlib.sha256(blob).hexdigest()


def train_cli(prepared: Path, run: Path, *extra: str, **flags: str) -> None:
    assert (
        main(["train", *cli_flags(prepared, run, **{"precision.threads": "1", **flags}), *extra])
        == 0
    )


def sessions(run: Path) -> list[dict]:
    return json.loads((run / provenance.RECORD).read_text())["sessions"]


def test_archlab_train_records_what_trained_the_run(prepared: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    train_cli(prepared, run, steps="3")
    [s] = sessions(run)
    assert (s["from_step"], s["resumed"], s["changed"]) == (0, False, [])
    assert s["code"] == checkout_state()
    assert (
        s["versions"]["torch"] == torch.__version__
        and s["versions"]["python"] == platform.python_version()
    )
    cpuinfo = Path("/proc/cpuinfo").read_text().splitlines()
    model = next(line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name"))
    flags = next(line.split(":", 1)[1].split() for line in cpuinfo if line.startswith("flags"))
    assert s["machine"]["cpu_model"] == model and s["machine"]["cpu_flags"].split() == sorted(
        set(flags)
    )
    vendor = next(line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("vendor_id"))
    assert s["machine"]["cpu_class"].startswith(
        f"{vendor} {torch.backends.cpu.get_cpu_capability()}"
    )
    assert s["machine"]["threads"] == 1 and s["machine"]["gpu"] is None
    assert s["data"] == {"folder": str(prepared), "sha256": folder_sha256(prepared)}
    assert s["execution"] == {"mode": "default", "device": "cpu", "dtype": "fp32", "world_size": 1}


def test_a_resume_appends_a_session_that_shows_another_commit(
    prepared: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    run = tmp_path / "run"
    train_cli(prepared, run, steps="3")
    record = json.loads((run / provenance.RECORD).read_text())
    # as if the first steps were trained at another commit
    record["sessions"][0]["code"]["commit"] = "0" * 40
    (run / provenance.RECORD).write_text(json.dumps(record))
    with caplog.at_level(logging.WARNING, logger=provenance.__name__):
        assert main(["train", "--out", str(run), "--resume", "--steps", "5", "--extend"]) == 0
    first, second = sessions(run)
    assert first == record["sessions"][0]  # never rewritten
    assert (second["from_step"], second["resumed"]) == (3, True)
    assert second["changed"] == [f"code.commit: {'0' * 40} -> {checkout_state()['commit']}"]
    assert (
        f"resumed at step 3 with a difference from its last session: code.commit: {'0' * 40}"
        in caplog.text
    )
    # resumed again at the same commit: a third session, nothing changed, nothing logged
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=provenance.__name__):
        assert main(["train", "--out", str(run), "--resume", "--steps", "6", "--extend"]) == 0
    assert [(s["from_step"], s["changed"]) for s in sessions(run)[1:]] == [
        (3, second["changed"]),
        (5, []),
    ]
    assert "difference" not in caplog.text


def test_a_run_trained_before_records_resumes_with_its_earlier_steps_unrecorded(
    prepared: Path, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    train_cli(prepared, run, steps="3")
    (run / provenance.RECORD).unlink()  # a run folder from before runs recorded their provenance
    assert main(["train", "--out", str(run), "--resume", "--steps", "4", "--extend"]) == 0
    [s] = sessions(run)
    assert (s["from_step"], s["resumed"]) == (3, True)
    assert s["changed"] == ["the steps before 3 were trained without a provenance record"]


def test_each_compared_field_is_a_change() -> None:
    before = {
        "code": {"commit": "a", "dirty": False},
        "machine": {"cpu_class": "X AVX2", "threads": 1},
        "data": {"sha256": "d"},
        "execution": {"mode": "default", "dtype": "fp32"},
    }
    now = json.loads(json.dumps(before))
    assert provenance.changes(before, now) == []
    now["machine"]["threads"], now["execution"]["mode"], now["data"]["sha256"] = 2, "compiled", "e"
    assert provenance.changes(before, now) == [
        "machine.threads: 1 -> 2",
        "data.sha256: d -> e",
        "execution.mode: default -> compiled",
    ]


def test_the_execution_mode_comes_from_the_runs_settings(prepared: Path, tmp_path: Path) -> None:
    for compile_, dtype, mode in (
        ("false", "fp32", "default"),
        ("true", "fp32", "compiled"),
        ("false", "bf16", "bf16"),
        ("true", "bf16", "compiled+bf16"),
    ):
        train, _ = resolve_config(
            [
                {
                    **TINY,
                    "data.source": str(prepared),
                    "out": str(tmp_path / "r"),
                    "precision.compile": compile_,
                    "precision.dtype": dtype,
                }
            ]
        )
        s = provenance.session(train, prepared, torch.device("cpu"), 1)
        assert s["execution"]["mode"] == mode


# ---------------------------------------------------------------------------------- the data folder
def test_the_data_hash_covers_what_a_run_reads_and_nothing_else(
    prepared: Path, tmp_path: Path
) -> None:
    folder = tmp_path / "copy"
    shutil.copytree(prepared, folder)
    assert prepared_hash(folder) == folder_sha256(prepared)
    meta = json.loads((folder / "meta.json").read_text())
    # when it was made: not what is read
    (folder / "meta.json").write_text(json.dumps({**meta, "seconds": 99.0}))
    assert prepared_hash(folder) == folder_sha256(prepared)
    tokens = bytearray((folder / "val.bin").read_bytes())
    tokens[-1] ^= 1  # one token's last bit
    (folder / "val.bin").write_bytes(bytes(tokens))
    assert prepared_hash(folder) != folder_sha256(prepared)
    assert prepared_hash(folder) == folder_sha256(folder)


# --------------------------------------------------------------------------------------- the commit
def make_repo(root: Path) -> Path:
    """A git checkout holding a package `pkg` (one commit); returns the package's folder."""
    pkg = root / "src" / "pkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("x = 1\n")
    git("init", "-q", cwd=root)
    git(
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@t",
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "empty",
        cwd=root,
    )
    git("add", "src", cwd=root)
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "pkg", cwd=root)
    return pkg


def test_the_commit_is_the_checkout_the_package_runs_from(tmp_path: Path) -> None:
    pkg = make_repo(tmp_path / "repo")
    head = git("rev-parse", "HEAD", cwd=pkg)
    assert provenance.source_state(pkg) == {"commit": head, "dirty": False}
    (pkg / "__init__.py").write_text("x = 2\n")  # a local change in the package
    assert provenance.source_state(pkg) == {"commit": head, "dirty": True}
    (pkg / "__init__.py").write_text("x = 1\n")
    # a change elsewhere in the checkout
    (tmp_path / "repo" / "notes.txt").write_text("outside the package")
    assert provenance.source_state(pkg) == {"commit": head, "dirty": False}


def test_the_commit_is_unknown_outside_a_checkout_that_tracks_the_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    unknown = {"commit": "unknown", "dirty": "unknown"}
    alone = tmp_path / "alone" / "pkg"  # an installed copy, in no repository
    alone.mkdir(parents=True)
    (alone / "__init__.py").write_text("x = 1\n")
    assert provenance.source_state(alone) == unknown
    repo = tmp_path / "repo"
    make_repo(repo)
    # a site-packages inside another project's checkout
    copied = repo / "venv" / "site-packages" / "pkg"
    shutil.copytree(alone, copied)
    assert provenance.source_state(copied) == unknown
    monkeypatch.setenv("PATH", str(tmp_path / "no-git-here"))  # no git at all
    assert provenance.source_state(repo / "src" / "pkg") == unknown

"""`make test` (what CI runs) installs Python packages into .venv only, never system packages: the
recipes it would run, read from `make --dry-run --always-make`, call no system package manager,
with or without the browser opt-in. CI's own script (.ci/run) starts a single-node Slurm through
scripts/slurm-single-node.sh before it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SYSTEM_INSTALLERS = re.compile(r"\b(apt-get|apt|dpkg|yum|dnf|apk|brew|snap|pacman|zypper)\b")


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
@pytest.mark.parametrize("browser_opt_in", ["", "1"])
def test_make_test_runs_no_system_package_manager(browser_opt_in: str) -> None:
    env = {**os.environ, "ARCHLAB_BROWSER_TESTS": browser_opt_in}
    plan = subprocess.run(
        ["make", "--dry-run", "--always-make", "test"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "pytest" in plan and "pip install" in plan  # the dry run shows the real recipe
    assert not SYSTEM_INSTALLERS.search(plan), plan


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_the_browser_install_is_its_own_opt_in_target() -> None:
    plan = subprocess.run(
        ["make", "--dry-run", "--always-make", "chromium"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    # the only place archlab installs a system package, and only when asked
    assert "apt-get install" in plan
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    # never installed
    assert "make chromium" not in ci and "chromium" not in ci.replace("command -v chromium", "")


def test_ci_starts_slurm_through_the_repo_script_before_the_tests() -> None:
    """CI's own machine gets a single-node Slurm for tests/lab/test_slurm.py (the one system install
    CI makes, through scripts/slurm-single-node.sh, and not through `make test`), started before
    `make test`, and a Slurm that cannot start does not fail CI (the test then skips)."""
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    start = ci.index("scripts/slurm-single-node.sh")
    assert start < ci.index("make test") and "|| echo" in ci[start : ci.index("\n", start)]
    script = (REPO / "scripts" / "slurm-single-node.sh").read_text(encoding="utf-8")
    for package in ("munge", "slurmctld", "slurmd", "slurm-client"):
        assert package in script
    assert os.access(REPO / "scripts" / "slurm-single-node.sh", os.X_OK)


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_lint_checks_the_format_then_the_rules() -> None:
    """CI's first step (`make lint`, .ci/run) fails on an unformatted file as on a lint error."""
    plan = subprocess.run(
        ["make", "--dry-run", "--always-make", "lint"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "make lint" in (REPO / ".ci" / "run").read_text(encoding="utf-8")
    commands = [line.split("/")[-1] for line in plan.splitlines() if "ruff " in line]
    assert commands == ["ruff format --check .", "ruff check ."], plan


RUFF = Path(sys.executable).with_name("ruff")


@pytest.mark.skipif(not RUFF.is_file(), reason="ruff is not installed beside this Python")
@pytest.mark.parametrize(
    "path",
    [
        "src/archlab/nn/model.py",
        "src/archlab/lab/publishing/legacy.py",
        "tests/test_makefile.py",
        "benchmarks/bench_step.py",
        "scripts/publish_results.py",
    ],
)
def test_one_ruff_configuration_at_100_columns_everywhere(path: str) -> None:
    """pyproject.toml's [tool.ruff] is the one configuration: src/, the lab, the tests,
    benchmarks and scripts are formatted and linted at the same 100 columns (no nested ruff.toml
    of their own)."""
    settings = subprocess.run(
        [str(RUFF), "check", "--show-settings", path],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert f'Settings path: "{REPO / "pyproject.toml"}"' in settings
    for key in ("linter.line_length", "linter.pycodestyle.max_line_length", "formatter.line_width"):
        assert re.search(rf"^{re.escape(key)} = 100$", settings, re.M), key

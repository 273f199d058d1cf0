"""`make test` (what CI runs) installs Python packages into .venv only, never system packages: the
recipes it would run, read from `make --dry-run --always-make`, call no system package manager,
with or without the browser opt-in. CI's own script (.ci/run) starts a single-node Slurm through
scripts/slurm-single-node.sh before it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
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

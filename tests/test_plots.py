"""Figures (archlab.plots): `archlab plot rope` and `plot_length` write PNGs; bad scalings fail
in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from archlab.cli import main
from archlab.plots import plot_length

PNG = b"\x89PNG\r\n\x1a\n"


def test_plot_rope_cli_writes_a_png(tmp_path: Path) -> None:
    out = tmp_path / "rope.png"
    assert (
        main(
            [
                "plot",
                "rope",
                "--head-dim",
                "16",
                "--train-len",
                "64",
                "--factor",
                "4",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert out.read_bytes()[:8] == PNG


def test_plot_rope_refuses_unknown_scalings(tmp_path: Path, capsys) -> None:
    assert main(["plot", "rope", "--scalings", "none,pi", "--out", str(tmp_path / "r.png")]) == 2
    assert "scaling 'pi' is not allowed" in capsys.readouterr().err


def test_plot_length_writes_a_png(tmp_path: Path) -> None:
    rows = [("none", 16, 2.0), ("none", 32, 3.0), ("rerope", 16, 2.0), ("rerope", 32, 2.1)]
    assert plot_length(rows, tmp_path / "l.png").read_bytes()[:8] == PNG
    with pytest.raises(FileNotFoundError):
        plot_length(rows, tmp_path / "missing" / "l.png")

"""The CLI tests train tiny runs on the training tests' prepared corpus, and read what a
terminal would show."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator

import pytest

from tests.train.conftest import one_thread, prepared  # noqa: F401 (fixtures shared with tests/train)


class _Stderr(logging.StreamHandler):
    """A handler on whatever sys.stderr is when a record comes (capsys replaces it between
    setup and call)."""

    @property
    def stream(self) -> object:
        return sys.stderr

    @stream.setter
    def stream(self, value: object) -> None:
        pass


@pytest.fixture
def terminal(capsys: pytest.CaptureFixture) -> Iterator[pytest.CaptureFixture]:
    """What a user's terminal shows: stdout, and stderr with the log lines on it (the handler
    `logging.basicConfig` in `archlab.cli.main` installs outside pytest, whose own handlers make
    that call a no-op)."""
    handler = _Stderr()
    handler.setFormatter(logging.Formatter("%(message)s"))
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield capsys
    finally:
        root.removeHandler(handler)
        root.setLevel(level)

"""The CLI tests train tiny runs on the training tests' prepared corpus."""

from tests.train.conftest import one_thread, prepared  # noqa: F401 (fixtures shared with tests/train)

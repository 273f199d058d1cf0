"""What a measure reads of a run: the protocol `RunView` (lab/measures/measure.py) satisfies.

The measure modules type their argument with it instead of importing `RunView`, which imports them
(its registry names every measure): one protocol, no import cycle.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from archlab.data.tokens import TokenData
    from archlab.nn.model import TransformerLM


class RunLike(Protocol):
    """A finished run folder as the measures read it."""

    run_dir: Path
    windows: int  # loss_at_Nx and the long-context measures read this many windows of their length

    @property
    def config(self) -> dict: ...

    @property
    def model(self) -> TransformerLM: ...

    @property
    def block_size(self) -> int: ...

    def status(self) -> dict: ...

    def data(self) -> TokenData: ...

    def memo(self, key: str, compute: Callable[[], object]) -> object: ...

"""A module whose import does something: a row naming it must not make anyone import it.

It defines no decorated function, so the backend's source check refuses it
without running it. The marker file is named by ``ARCATURE_TEST_SIDE_EFFECT_FILE``
(set by the tests, inherited by worker processes).
"""

from __future__ import annotations

import os
from pathlib import Path

MARKER = os.environ.get("ARCATURE_TEST_SIDE_EFFECT_FILE")
if MARKER:
    Path(MARKER).write_text(f"imported by {os.getpid()}\n")


def main() -> None:
    """A plain function, as a script has: not a task, and not decorated."""
    raise AssertionError("a row must never call this")

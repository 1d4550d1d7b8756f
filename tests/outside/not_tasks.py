"""A module whose names are not tasks: one passes the source check and is refused after import."""

from __future__ import annotations

import functools

CALLS: list[str] = []
VALUE = 3


class Thing:
    pass


@functools.cache
def cached() -> int:
    """Decorated, so the source check lets the module be imported; not a Task, so not run."""
    CALLS.append("cached")
    return 1

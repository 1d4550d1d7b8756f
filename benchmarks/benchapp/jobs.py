"""The benchmark's job: does nothing, so only the queue's own cost is measured."""

from __future__ import annotations

from django_arcature import job


@job(name="bench.noop")
def noop() -> None:
    return None

"""The benchmark's job. Imported only by the benchmark's own worker processes
(:mod:`django_arcature.bench.worker`), so it is never registered in a user's
ordinary workers or in the admin's task list."""

from __future__ import annotations

from django_arcature import job

TASK = "arcature.bench.noop"


@job(name=TASK)
def noop() -> None:
    """Does nothing, so only the queue's own cost is measured."""

"""django.tasks tasks for worker processes of the fault suite (tests.faults is installed there)."""

from __future__ import annotations

from django_arcature.tasks.compat import task


@task
def return_nan() -> float:
    """Passes django.tasks' own JSON normalisation; refused by every database's JSON column."""
    return float("nan")


@task
def add(a: int, b: int) -> int:
    return a + b

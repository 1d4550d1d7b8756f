"""A task declared for another backend (the tests configure ``TASKS["inline"]`` first)."""

from __future__ import annotations

from django_arcature.tasks.compat import task

CALLS: list[str] = []


@task(backend="inline")
def ping(label: str) -> str:
    CALLS.append(label)
    return label

"""A jobs module whose handler takes a name another app already uses."""

from __future__ import annotations

from django_arcature import job


@job(name="api.add")
def add_but_different(a: int, b: int = 0) -> int:
    return a - b

"""A jobs module that fails to import, as a typo in a deploy would make it."""

from __future__ import annotations

from django_arcature.not_a_module import nothing  # type: ignore[import-not-found]

from django_arcature import job


@job(name="unit.broken")
def broken() -> object:
    return nothing

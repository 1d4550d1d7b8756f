"""A jobs module that imports models (as most do), then fails to import.

The order is the point: the models import comes first, as in most jobs modules.
"""

# ruff: noqa: I001

from __future__ import annotations

from django_arcature.models import Job  # needs configured settings and loaded apps
from django_arcature.not_a_module import nothing  # type: ignore[import-not-found]

from django_arcature import job


@job(name="unit.models_broken")
def broken() -> object:
    return (Job, nothing)

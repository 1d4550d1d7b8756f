"""One ``@periodic`` declaration, found only when the app's ``jobs`` module is imported."""

from __future__ import annotations

from django_arcature import job, periodic


@periodic("0 3 * * *", name="periodic-app-nightly")
@job
def nightly() -> None:
    """Does nothing: the tests only need the declaration."""

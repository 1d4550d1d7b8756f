"""django.tasks tasks for the input suites; a module of an installed app, so workers may import it."""

from __future__ import annotations

from typing import Any

from django_arcature.tasks_compat import task


@task
def echo(value: Any) -> Any:
    """Returns its argument: what went in must come back, types included."""
    return value

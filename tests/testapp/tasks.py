"""django.tasks tasks for the input suites, in an installed app so workers may import them."""

from __future__ import annotations

from typing import Any

from django_arcature.tasks.compat import task


@task
def echo(value: Any) -> Any:
    """Returns its argument: what went in must come back, types included."""
    return value

"""django.tasks tasks for the input suites, in an installed app so workers may import them."""

from __future__ import annotations

from typing import Any

from django_arcature.backend import task as arcature_task
from django_arcature.tasks.compat import task


@task
def echo(value: Any) -> Any:
    """Returns its argument: what went in must come back, types included."""
    return value


@arcature_task(priority=7, max_attempts=1)
def must_not_retry() -> None:
    """Fails every time; a schedule of it must run it once (issue 19, B2)."""
    raise RuntimeError("this task must not be retried")

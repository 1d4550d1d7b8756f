"""A module of an installed app that is neither its ``tasks`` module nor listed in MODULES.

Importing it has a side effect a row must never be able to trigger: a job row
naming it must not make a worker, or a web process reading a result, import it.
"""

from __future__ import annotations

from django_arcature.tasks.compat import task

IMPORTED = True


@task
def defined_outside_tasks(value: int) -> int:
    """A real Task, but in a module the backend does not import for a row."""
    return value

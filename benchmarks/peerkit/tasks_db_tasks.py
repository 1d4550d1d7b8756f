"""django-tasks-db's no-op: a ``django.tasks`` task, stamping its start like every other."""

from __future__ import annotations

from django.tasks import task

from .stamp import stamp


@task()
def noop(key: int) -> None:
    stamp(key)

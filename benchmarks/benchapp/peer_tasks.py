"""django-tasks-db's side of benchmarks/enqueue_peers.py: a no-op ``django.tasks`` task.

Imported only by that benchmark (its settings configure the backend), so nothing
else needs django-tasks-db installed.
"""

from __future__ import annotations

from django.tasks import task


@task()
def peer_noop() -> None:
    """Does nothing, like ``benchmarks.benchapp.jobs.noop``."""

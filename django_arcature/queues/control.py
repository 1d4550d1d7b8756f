"""Pausing and resuming queues: a flag in the database that every worker reads.

On PostgreSQL the change also sends a notification on the workers' wake-up
channel in the same transaction, so idle workers re-read the flags (and, on
resume, claim) at once instead of at their next poll.
"""

from __future__ import annotations

import logging

from django.db import IntegrityError, connections, transaction
from django.utils import timezone

logger = logging.getLogger(__name__)

__all__ = ["ensure_rows", "pause", "paused_queues", "resume"]


def _notify(using: str) -> None:
    # Imported here: importing the worker package at module level would load the
    # worker loop, which imports this module.
    from django_arcature.worker.wakeup import CHANNEL, QUEUES_PAYLOAD

    connection = connections[using]
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_notify(%s, %s)", [CHANNEL, QUEUES_PAYLOAD])


def ensure_rows(names: list[str], using: str) -> None:
    """Create the control rows of ``names`` that do not exist yet (racing creators are fine)."""
    from .models import QueueState

    existing = set(
        QueueState.objects.using(using).filter(name__in=names).values_list("name", flat=True)
    )
    for name in names:
        if name in existing:
            continue
        try:
            with transaction.atomic(using=using):
                QueueState.objects.using(using).create(name=name)
        except IntegrityError:
            pass


def _set(name: str, paused: bool, using: str) -> bool:
    """Set the flag; True when it changed."""
    from .models import QueueState

    if paused:
        # Resuming needs no row: a queue without one is running. So a resume of a
        # mistyped name leaves nothing behind.
        ensure_rows([name], using)
    with transaction.atomic(using=using):
        changed = (
            QueueState.objects.using(using)
            .filter(name=name)
            .exclude(paused=paused)
            .update(paused=paused, paused_at=timezone.now() if paused else None)
        )
        if changed:
            _notify(using)
    if changed:
        # INFO: a deliberate operator action, not a fault. At WARNING, Python's
        # last-resort handler repeated it on stderr under the command's own line
        # in a project without LOGGING.
        logger.info("queue %s %s", name, "paused" if paused else "resumed")
    return bool(changed)


def pause(name: str, using: str = "default") -> bool:
    """Stop every worker claiming from ``name``; running jobs finish. True if it was running."""
    return _set(name, True, using)


def resume(name: str, using: str = "default") -> bool:
    """Let workers claim from ``name`` again. True if it was paused."""
    return _set(name, False, using)


def paused_queues(using: str) -> set[str]:
    from .models import QueueState

    return set(QueueState.objects.using(using).filter(paused=True).values_list("name", flat=True))

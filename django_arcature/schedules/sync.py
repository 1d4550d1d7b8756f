"""Copying ``@periodic`` declarations into the ``Schedule`` table when a worker starts."""

from __future__ import annotations

import logging
from datetime import datetime

from django.db import IntegrityError, transaction

from .cron import CronUnavailable, cron_available
from .periodic import PeriodicSpec, declared

logger = logging.getLogger(__name__)

__all__ = ["sync_code_schedules"]


def _fields(spec: PeriodicSpec) -> dict[str, object]:
    return {
        "task_name": spec.task_name,
        "backend": spec.backend,
        "cron": spec.cron,
        "timezone": spec.timezone,
        "args": list(spec.args),
        "kwargs": dict(spec.kwargs),
        "queue": spec.queue,
        "priority": spec.priority,
        "missed": spec.missed,
        "catch_up": spec.catch_up,
    }


def sync_code_schedules(using: str, *, now: datetime | None = None) -> tuple[int, int]:
    """Create or update one row per declared schedule; returns (created, updated).

    A new row's ``created_at`` is the database's clock; ``now`` sets it instead
    (for the model tests, which walk a clock of their own).

    The code owns the expression, zone, arguments and policy; the operator owns
    ``enabled`` (a code schedule disabled in the admin stays disabled) and the
    watermark is never touched, so a restart neither refires nor forgets a slot.
    Rows of schedules this code no longer declares are left alone: during a
    rolling deploy another worker may still declare them, and only workers
    that declare a code schedule fire it (``schedules.firing``).
    """
    from .models import Schedule, ScheduleSource

    specs = declared()
    if not specs:
        return 0, 0
    if not cron_available():
        raise CronUnavailable(
            "@periodic is used but cronsim is not installed: "
            "pip install 'django-arcature[schedules]'"
        )
    created = updated = 0
    for spec in specs.values():
        fields = _fields(spec)
        rows = Schedule.objects.using(using).filter(name=spec.name)
        current = rows.values(*fields, "source").first()
        if current is None:
            try:
                with transaction.atomic(using=using):
                    Schedule.objects.using(using).create(
                        name=spec.name,
                        source=ScheduleSource.CODE,
                        **fields,
                        **({"created_at": now} if now is not None else {}),
                    )
                created += 1
            except IntegrityError:  # another worker created it first
                pass
            continue
        if current["source"] != ScheduleSource.CODE:
            logger.warning(
                "schedule %r is declared with @periodic in %s but an operator created a "
                "schedule of that name in the admin; the admin's wins",
                spec.name,
                spec.where or "code",
            )
            continue
        if any(current[key] != value for key, value in fields.items()):
            rows.update(**fields)
            updated += 1
    if created or updated:
        logger.info("schedules synced from code: %d created, %d updated", created, updated)
    return created, updated

"""``ARCATURE["RETENTION"]``: how long finished jobs are kept, per status and per queue.

::

    ARCATURE = {
        "RETENTION": {
            "succeeded": "7d",        # None or absent: kept forever
            "cancelled": "7d",
            "dead": "30d",
            "queues": {"email": {"succeeded": "1d"}},   # per-queue overrides
            "interval": "60s",        # how often a worker prunes (default 60 s)
            "batch_size": 1000,       # rows per DELETE (default 1000)
        }
    }

Nothing is pruned unless a status has an age: deleting rows is a decision the
project makes, not a default it inherits.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings

from django_arcature.core.durations import parse_duration

__all__ = ["FINISHED", "PruneRule", "RetentionSettings", "read_retention", "rules_for"]

#: The only statuses retention may delete.
FINISHED = ("succeeded", "cancelled", "dead")

DEFAULT_INTERVAL = timedelta(seconds=60)
DEFAULT_BATCH = 1000
MAX_BATCH = 10_000


@dataclass(frozen=True)
class PruneRule:
    """Delete ``status`` rows finished more than ``older_than`` ago, in these queues.

    ``queues`` set: only those queues; otherwise every queue but ``except_queues``
    (the ones with an override of their own).
    """

    status: str
    older_than: timedelta
    queues: tuple[str, ...] | None = None
    except_queues: tuple[str, ...] = ()

    def describe(self) -> str:
        where = (
            f"queue {', '.join(self.queues)}"
            if self.queues
            else ("every queue but " + ", ".join(self.except_queues))
            if self.except_queues
            else "every queue"
        )
        return f"{self.status} older than {self.older_than} in {where}"


@dataclass(frozen=True)
class RetentionSettings:
    ages: Mapping[str, timedelta | None]
    per_queue: Mapping[str, Mapping[str, timedelta | None]]
    interval: timedelta = DEFAULT_INTERVAL
    batch_size: int = DEFAULT_BATCH

    @property
    def enabled(self) -> bool:
        return bool(self.rules())

    def rules(self) -> list[PruneRule]:
        return rules_for(self)


def _age(value: object, where: str) -> timedelta | None:
    if value is None:
        return None
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def parse_retention(raw: object) -> RetentionSettings:
    """Validate a raw ``RETENTION`` value; ``ValueError`` says what is wrong."""
    if raw is None:
        return RetentionSettings({}, {})
    if not isinstance(raw, Mapping):
        raise ValueError("ARCATURE['RETENTION'] must be a dict")
    known = {*FINISHED, "queues", "interval", "batch_size"}
    unknown = sorted(str(key) for key in raw if key not in known)
    if unknown:
        raise ValueError(
            f"ARCATURE['RETENTION'] has unknown keys {unknown}; known: {sorted(known)} "
            "(pending and running jobs are never pruned)"
        )
    ages = {status: _age(raw.get(status), f"RETENTION[{status!r}]") for status in FINISHED}
    per_queue: dict[str, dict[str, timedelta | None]] = {}
    queues = raw.get("queues") or {}
    if not isinstance(queues, Mapping):
        raise ValueError("ARCATURE['RETENTION']['queues'] must be a dict of queue -> ages")
    for queue, overrides in queues.items():
        if not isinstance(overrides, Mapping) or set(overrides) - set(FINISHED):
            raise ValueError(f"RETENTION['queues'][{queue!r}] must map {list(FINISHED)} to ages")
        per_queue[str(queue)] = {
            status: _age(age, f"RETENTION['queues'][{queue!r}][{status!r}]")
            for status, age in overrides.items()
        }
    interval = _age(raw.get("interval", DEFAULT_INTERVAL), "RETENTION['interval']")
    if interval is None or interval.total_seconds() <= 0:
        raise ValueError("RETENTION['interval'] must be above zero")
    batch = raw.get("batch_size", DEFAULT_BATCH)
    if not isinstance(batch, int) or isinstance(batch, bool) or not 1 <= batch <= MAX_BATCH:
        raise ValueError(f"RETENTION['batch_size'] must be a whole number from 1 to {MAX_BATCH}")
    return RetentionSettings(ages, per_queue, interval, batch)


def read_retention() -> RetentionSettings:
    """The current ``ARCATURE["RETENTION"]`` (read each time, so override_settings works)."""
    raw: Any = (getattr(settings, "ARCATURE", None) or {}).get("RETENTION")
    return parse_retention(raw)


def rules_for(conf: RetentionSettings) -> list[PruneRule]:
    """One rule per (status, queue override) with an age, plus one per status for the rest."""
    rules: list[PruneRule] = []
    for status in FINISHED:
        overridden = tuple(
            sorted(queue for queue, ages in conf.per_queue.items() if status in ages)
        )
        for queue in overridden:
            age = conf.per_queue[queue][status]
            if age is not None:
                rules.append(PruneRule(status, age, queues=(queue,)))
        default = conf.ages.get(status)
        if default is not None:
            rules.append(PruneRule(status, default, except_queues=overridden))
    return rules

"""``ARCATURE["QUEUES"]``: fleet-wide limits per queue.

::

    ARCATURE = {"QUEUES": {"email": {"concurrency": 5, "rate": "100/m"}}}

``concurrency``: at most this many jobs of the queue running across every
worker. ``rate``: at most N starts in any window of the period (``"10/s"``,
``"100/m"``, ``"1000/h"``, ``"5000/d"``, or ``"3/15m"``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from django_arcature.core.durations import parse_duration

__all__ = ["MAX_RATE", "QueueLimit", "parse_limits", "read_limits"]

#: The largest N of a rate: the claim keeps N recent start instants on the queue's row.
MAX_RATE = 10_000


@dataclass(frozen=True)
class QueueLimit:
    concurrency: int | None = None
    rate: int | None = None
    per_seconds: float = 60.0

    def describe(self) -> str:
        parts = []
        if self.concurrency is not None:
            parts.append(f"at most {self.concurrency} running")
        if self.rate is not None:
            parts.append(f"at most {self.rate} starts per {self.per_seconds:g}s")
        return ", ".join(parts) or "no limit"


def _parse_rate(value: object, queue: str) -> tuple[int, float]:
    if not isinstance(value, str) or "/" not in value:
        raise ValueError(f"QUEUES[{queue!r}]['rate'] must look like '100/m', not {value!r}")
    count_text, period = value.split("/", 1)
    try:
        count = int(count_text.strip())
        per = parse_duration(period if period.strip()[:1].isdigit() else f"1{period.strip()}")
    except ValueError as exc:
        raise ValueError(
            f"QUEUES[{queue!r}]['rate'] must look like '100/m' or '3/15m', not {value!r} ({exc})"
        ) from None
    if not 1 <= count <= MAX_RATE or per.total_seconds() <= 0:
        raise ValueError(
            f"QUEUES[{queue!r}]['rate']: N from 1 to {MAX_RATE} per a period above zero"
        )
    return count, per.total_seconds()


def parse_limits(raw: object) -> dict[str, QueueLimit]:
    """Validate a raw ``QUEUES`` value; ``ValueError`` says what is wrong."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ValueError("ARCATURE['QUEUES'] must be a dict of queue name -> limits")
    limits: dict[str, QueueLimit] = {}
    for queue, options in raw.items():
        if not isinstance(queue, str) or not 0 < len(queue) <= 100:
            raise ValueError(f"ARCATURE['QUEUES'] key {queue!r} is not a queue name")
        if not isinstance(options, Mapping) or set(options) - {"concurrency", "rate"}:
            raise ValueError(f"ARCATURE['QUEUES'][{queue!r}] takes 'concurrency' and 'rate'")
        concurrency = options.get("concurrency")
        if concurrency is not None and (
            not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1
        ):
            raise ValueError(f"QUEUES[{queue!r}]['concurrency'] must be a whole number >= 1")
        rate: int | None = None
        per = 60.0
        if options.get("rate") is not None:
            rate, per = _parse_rate(options["rate"], queue)
        limits[queue] = QueueLimit(concurrency, rate, per)
    return limits


def configured_queues() -> dict[str, QueueLimit]:
    """Every ``ARCATURE["QUEUES"]`` entry, an entry without limits included."""
    raw: Any = (getattr(settings, "ARCATURE", None) or {}).get("QUEUES")
    return parse_limits(raw)


def read_limits() -> dict[str, QueueLimit]:
    return {name: limit for name, limit in configured_queues().items() if limit != QueueLimit()}

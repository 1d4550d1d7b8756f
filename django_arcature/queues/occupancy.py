"""Concurrency slots held by handlers whose job rows no longer say ``running``.

A limited queue's claim counts the queue's ``running`` rows, but three
transitions take a row out of ``running`` while its handler may still run:

* an operator cancels the job (the handler is told to stop, and may not),
* the watchdog writes off a timed-out handler that did not stop (its thread
  is left running, and the job retries or dies),
* a shutdown hands a job back after its timeout (the process is about to end).

Counting rows alone, each frees the slot too early and the next claim runs
one handler more than ``concurrency``. So each of them first records a
:class:`~django_arcature.queues.models.SlotHold` (a cancel in its own
transaction; the worker before its write, so that for a moment the slot is
counted twice rather than not at all), and the claim counts unexpired holds
after the running rows. The worker that runs the handler extends its holds
like leases and deletes each one when its handler has ended; a worker that
crashed stops extending them, and they expire one lease later, so no slot is
held forever. Expired holds are deleted by the workers' sweep.

Only queues with a limit get holds: a fleet without limits writes none.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from django_arcature.db.clock import DatabaseNow, database_now

__all__ = [
    "CancelledClaim",
    "Held",
    "count_held",
    "extend_holds",
    "hold_cancelled",
    "hold_slots",
    "limited_queues",
    "purge_expired",
    "release_holds",
]


@dataclass(frozen=True)
class Held:
    """One handler that keeps its slot: the claim it runs under, and its queue."""

    claim_token: uuid.UUID
    job_id: uuid.UUID
    queue: str


def hold_slots(
    using: str,
    held: Sequence[Held],
    worker_id: str,
    *,
    lease_seconds: float | None = None,
    expires_at: datetime | None = None,
) -> int:
    """Record ``held`` (idempotent: a hold already there is kept as it is).

    Idempotent because a write whose acknowledgement was lost is tried again,
    and because a cancel may have written the hold before the worker learns of it.
    """
    from .models import SlotHold

    if not held:
        return 0
    if expires_at is None:
        expires_at = database_now(using) + timedelta(seconds=lease_seconds or 0)
    created = SlotHold.objects.using(using).bulk_create(
        [
            SlotHold(
                claim_token=one.claim_token,
                job_id=one.job_id,
                queue=one.queue,
                worker_id=worker_id,
                expires_at=expires_at,
            )
            for one in held
        ],
        ignore_conflicts=True,
    )
    return len(created)


@dataclass(frozen=True)
class CancelledClaim:
    """A job row a cancel has just taken out of ``running``: what it read before writing."""

    job_id: uuid.UUID
    claim_token: uuid.UUID | None
    queue: str
    worker_id: str
    lease_expires_at: datetime | None


def limited_queues() -> set[str]:
    """The queues with a concurrency limit: the only ones whose cancels hold a slot."""
    from .limits import read_limits

    return {name for name, limit in read_limits().items() if limit.concurrency}


def hold_cancelled(
    using: str, cancelled: Iterable[CancelledClaim], limited: set[str] | None = None
) -> int:
    """Keep the slots of running jobs just cancelled in limited queues; call in the cancel's
    transaction.

    Both cancels (an operator's ``Job.objects.cancel`` and a workflow's or batch's
    cancel of its nodes) write through here, so they hold slots by one rule: the
    hold names the claim that was running, so that the worker running it deletes
    it when the handler ends, and it expires with that claim's lease, so that a
    dead worker's hold lapses as its lease would have. ``limited`` is
    :func:`limited_queues` when the caller already read it.
    """
    if limited is None:
        limited = limited_queues()
    written = 0
    for one in cancelled:
        if one.claim_token is None or one.queue not in limited:
            continue
        held = [Held(one.claim_token, one.job_id, one.queue)]
        written += hold_slots(using, held, one.worker_id, expires_at=one.lease_expires_at)
    return written


def extend_holds(using: str, tokens: Iterable[uuid.UUID], lease_seconds: float) -> int:
    """The handlers still run: their holds last another lease from the database's now."""
    from .models import SlotHold

    tokens = list(tokens)
    if not tokens:
        return 0
    return int(
        SlotHold.objects.using(using)
        .filter(claim_token__in=tokens)
        .update(expires_at=DatabaseNow(lease_seconds))
    )


def release_holds(using: str, tokens: Iterable[uuid.UUID]) -> int:
    """The handlers have ended: their slots are free."""
    from .models import SlotHold

    tokens = list(tokens)
    if not tokens:
        return 0
    deleted, _ = SlotHold.objects.using(using).filter(claim_token__in=tokens).delete()
    return int(deleted)


def count_held(using: str, queue: str) -> int:
    """Unexpired holds of ``queue``: handlers running although their rows left ``running``."""
    from .models import SlotHold

    return int(
        SlotHold.objects.using(using).filter(queue=queue, expires_at__gt=DatabaseNow()).count()
    )


def purge_expired(using: str) -> int:
    """Delete the holds nobody extends any more (their worker died): part of the sweep."""
    from .models import SlotHold

    deleted, _ = SlotHold.objects.using(using).filter(expires_at__lte=DatabaseNow()).delete()
    return int(deleted)

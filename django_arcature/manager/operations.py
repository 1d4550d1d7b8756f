"""Operator actions: cancel, requeue, run now, prune (the admin and commands call these)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from django.db import IntegrityError, transaction

from django_arcature import signals
from django_arcature.core.durations import parse_duration
from django_arcature.db import DatabaseNow, retry_on_lock_conflict
from django_arcature.states import ACTIVE_STATUSES, JobStatus

from .base import JobWriter
from .dependencies import CANCELLED, resume, settle

#: What an operator may cancel: live jobs, and workflow nodes still waiting.
CANCELLABLE_STATUSES = (*ACTIVE_STATUSES, JobStatus.WAITING)


class OperatorWrites(JobWriter):
    """What a person may do to a job; each write filters on the states it may leave."""

    def cancel(self, job_id: uuid.UUID) -> int:
        """pending/running/waiting → cancelled. A running job's later completion is fenced out.

        In a queue with a concurrency limit, cancelling a running job does not
        free its slot: its handler may run on. The cancel records a slot hold
        for that claim in the same transaction, which the worker deletes once
        the handler has ended (see :mod:`django_arcature.queues.occupancy`).
        Dependents of a workflow node that needed it to succeed (or fail) are
        cancelled too, naming it, in the same transaction; ``when="always"``
        dependents may be released.
        """
        from django_arcature.queues.occupancy import limited_queues

        limited = limited_queues()
        fields: dict[str, Any] = {
            "status": JobStatus.CANCELLED,
            "claim_token": None,
            "unique_key": None,
            "lease_expires_at": None,
            "finished_at": DatabaseNow(),
        }

        def operation() -> int:
            with transaction.atomic(using=self.db):
                if limited:
                    rows = self._cancel_holding_the_slot(job_id, fields, limited)
                else:
                    rows = (
                        self.using(self.db)
                        .filter(id=job_id, status__in=CANCELLABLE_STATUSES)
                        .update(**fields)
                    )
                if rows:  # workflow hook: what waited on it, in this transaction
                    settle(self.db, self.model, {job_id: CANCELLED})
                return rows

        rows = retry_on_lock_conflict(self.db, operation)
        if rows:
            signals.job_cancelled.send(sender=self.model, job_id=job_id)
        return rows

    def _cancel_holding_the_slot(
        self, job_id: uuid.UUID, fields: dict[str, Any], limited: set[str]
    ) -> int:
        from django_arcature.queues.occupancy import CancelledClaim, hold_cancelled

        jobs = self.using(self.db)
        with transaction.atomic(using=self.db):
            for _ in range(3):  # the claim read may end (or a new one start) under us
                found = (
                    jobs.filter(id=job_id, status=JobStatus.RUNNING)
                    .values_list("claim_token", "queue", "locked_by", "lease_expires_at")
                    .first()
                )
                token, queue, worker, expires = found or (None, "", "", None)
                if token is None or queue not in limited:
                    return int(
                        jobs.filter(id=job_id, status__in=CANCELLABLE_STATUSES).update(**fields)
                    )
                # Compare-and-set on the claim read: the hold names the claim cancelled.
                cancelled = jobs.filter(id=job_id, status=JobStatus.RUNNING, claim_token=token)
                if cancelled.update(**fields):
                    claim = CancelledClaim(job_id, token, queue, worker, expires)
                    hold_cancelled(self.db, [claim], limited)
                    return 1
            waiting_or_pending = (JobStatus.PENDING, JobStatus.WAITING)
            return int(jobs.filter(id=job_id, status__in=waiting_or_pending).update(**fields))

    def requeue_dead(self, job_id: uuid.UUID) -> int:
        """dead → pending as a new life; 1 if requeued, 0 if not dead or its key is taken.

        A requeued job starts again from nothing: attempts 0, an empty attempt
        log (a django.tasks result then reports only this life's attempts), no
        start time, no error. It gets back the unique key it held while alive
        when that key can be derived again (a ``unique=True`` task's key comes
        from its arguments); an explicit key given at enqueue was released when
        the job died and is not stored, so such a job comes back without one.
        If another live job took the key meanwhile, the requeue is refused and
        the job stays dead: that job already does this work, and one key has at
        most one live holder. The unique constraint decides, not a prior read.
        """

        def operation() -> int:
            with transaction.atomic(using=self.db):
                return self._requeue_dead_here(job_id)

        rows = retry_on_lock_conflict(self.db, operation)
        if rows:
            signals.job_requeued.send(sender=self.model, job_id=job_id)
        return rows

    def _requeue_dead_here(self, job_id: uuid.UUID) -> int:
        """``requeue_dead``'s writes, in the caller's transaction (no signal sent)."""
        with transaction.atomic(using=self.db):
            dead = self.using(self.db).filter(id=job_id, status=JobStatus.DEAD)
            found = dead.select_for_update().values_list("task_name", "payload", "backend")
            row = found.first()
            if row is None:
                return 0
            fields = _new_life_fields()
            key = restorable_unique_key(*row)
            if key is None:
                rows = dead.update(**fields)
            else:
                try:
                    with transaction.atomic(using=self.db):
                        rows = dead.update(**fields, unique_key=key)
                except IntegrityError:  # a live job holds the key
                    return 0
            if rows:  # workflow hook: the nodes its death cancelled come back
                resume(self.db, self.model, job_id)
            return int(rows)

    def run_now(self, job_id: uuid.UUID) -> int:
        """Make a scheduled pending job available at once."""
        return (
            self.using(self.db)
            .filter(id=job_id, status=JobStatus.PENDING)
            .update(available_at=DatabaseNow())
        )

    def prune(
        self, older_than: timedelta | float | str, statuses: Sequence[str] | None = None
    ) -> int:
        """Delete finished jobs (succeeded and cancelled by default) older than ``older_than``.

        ``older_than`` takes what ``RETENTION`` and ``arcature_prune --older-than`` take:
        a ``timedelta``, seconds, or ``"14d"``; from zero to 100 years, so a negative
        age (which would match every finished job) and one past the databases' date
        range (an error on PostgreSQL, nothing at all elsewhere) are refused alike.

        Through the retention sweep's deletes (``arcature_prune``), so this keeps what
        that keeps: the jobs of a workflow still running, whose results its
        dependents' ``upstream()`` reads and whose edges decide what runs next. With
        the jobs it deletes go their workflow node and edge rows, and a finished
        workflow or batch left without nodes.
        """
        from django_arcature.retention.prune import prune as prune_by_rules
        from django_arcature.retention.rules import FINISHED, PruneRule

        statuses = list(statuses or (JobStatus.SUCCEEDED, JobStatus.CANCELLED))
        if not set(statuses) <= set(FINISHED):
            raise ValueError(f"prune deletes finished jobs only ({', '.join(FINISHED)})")
        if isinstance(older_than, bool) or not isinstance(
            older_than, timedelta | int | float | str
        ):
            raise TypeError(
                f"older_than must be a timedelta, seconds or a duration such as '14d', "
                f"not {older_than!r}"
            )
        try:
            age = parse_duration(older_than)
        except ValueError as exc:
            raise ValueError(f"prune(older_than=...): {exc}") from None
        rules = [PruneRule(status=status, older_than=age) for status in dict.fromkeys(statuses)]
        return sum(result.deleted for result in prune_by_rules(rules, self.db))


def _new_life_fields() -> dict[str, Any]:
    """What a requeue resets: everything the previous life left behind."""
    return {
        "status": JobStatus.PENDING,
        "attempts": 0,
        "attempt_log": [],
        "error_kind": "",
        "last_error": "",
        "last_traceback": "",
        "result": None,
        "locked_by": "",
        "locked_at": None,
        "lease_expires_at": None,
        "claim_token": None,
        "started_at": None,
        "failed_at": None,
        "finished_at": None,
        "available_at": DatabaseNow(),
    }


def restorable_unique_key(task_name: str, payload: Any, backend: str) -> str | None:
    """The unique key a ``unique=True`` task's job held while alive, derived again; else None.

    Only ``@job`` handlers registered in this process can say; a django.tasks
    row (``backend`` set) never has a derived key.
    """
    if backend:
        return None
    from django_arcature.exceptions import UnknownTask
    from django_arcature.registry import get

    try:
        spec = get(task_name)
    except UnknownTask:
        return None
    if not spec.unique or not isinstance(payload, dict):
        return None
    args, kwargs = payload.get("args", []), payload.get("kwargs", {})
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        return None
    return spec.unique_key(args, kwargs)

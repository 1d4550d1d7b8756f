"""Operator actions: cancel, requeue, run now, prune (the admin and commands call these)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING

from django.utils import timezone

from django_arcature import signals
from django_arcature.db import DatabaseNow
from django_arcature.states import ACTIVE_STATUSES, JobStatus

from .base import JobWriter

if TYPE_CHECKING:
    pass


class OperatorWrites(JobWriter):
    """What a person may do to a job; each write filters on the states it may leave."""

    def cancel(self, job_id: uuid.UUID) -> int:
        """pending/running → cancelled. A running job's later completion is fenced out."""
        rows = (
            self.using(self.db)
            .filter(id=job_id, status__in=ACTIVE_STATUSES)
            .update(
                status=JobStatus.CANCELLED,
                claim_token=None,
                unique_key=None,
                lease_expires_at=None,
                finished_at=DatabaseNow(),
            )
        )
        if rows:
            signals.job_cancelled.send(sender=self.model, job_id=job_id)
        return rows

    def requeue_dead(self, job_id: uuid.UUID) -> int:
        """dead → pending with a fresh set of attempts; error and failure time cleared."""
        rows = (
            self.using(self.db)
            .filter(id=job_id, status=JobStatus.DEAD)
            .update(
                status=JobStatus.PENDING,
                attempts=0,
                error_kind="",
                last_error="",
                last_traceback="",
                failed_at=None,
                finished_at=None,
                available_at=DatabaseNow(),
            )
        )
        if rows:
            signals.job_requeued.send(sender=self.model, job_id=job_id)
        return rows

    def run_now(self, job_id: uuid.UUID) -> int:
        """Make a scheduled pending job available at once."""
        return (
            self.using(self.db)
            .filter(id=job_id, status=JobStatus.PENDING)
            .update(available_at=DatabaseNow())
        )

    def prune(self, older_than: timedelta, statuses: Sequence[str] | None = None) -> int:
        """Delete finished jobs (succeeded and cancelled by default) older than ``older_than``."""
        statuses = list(statuses or (JobStatus.SUCCEEDED, JobStatus.CANCELLED))
        if set(statuses) & {JobStatus.PENDING, JobStatus.RUNNING}:
            raise ValueError("prune deletes finished jobs only")
        cutoff = timezone.now() - older_than
        deleted, _ = (
            self.using(self.db).filter(status__in=statuses, finished_at__lt=cutoff).delete()
        )
        return deleted

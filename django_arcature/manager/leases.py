"""Claims and leases: taking pending jobs, keeping them, giving them back, recovering them."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from django.db import connections, models, transaction
from django.db.models import F

from django_arcature import signals
from django_arcature.core.decide import ErrorKind as DecidedErrorKind
from django_arcature.db import ClaimedJob, DatabaseNow, claimed_from_row, driver_for
from django_arcature.db import retry_on_lock_conflict as _retry_on_lock_conflict
from django_arcature.db.claimed import claim_select_columns
from django_arcature.states import JobStatus
from django_arcature.transitions import (
    ClaimTransition,
    claimed_fields,
    dead_fields,
    lease_fields,
    whole_seconds,
)

from .base import JobWriter

if TYPE_CHECKING:
    from django_arcature.models import Job


class LeaseWrites(JobWriter):
    """pending → running and the lease that keeps a running job its worker's."""

    def claim(
        self,
        worker_id: str,
        lease: float | timedelta,
        batch: int,
        queues: Sequence[str] | None = None,
        exclude: Sequence[str] | None = None,
    ) -> list[ClaimedJob]:
        """Take up to ``batch`` available pending jobs for ``worker_id``.

        Highest priority first, then oldest ``available_at``. Each claimed job
        gets ``attempts + 1``, a fresh random claim token, and a lease stamped
        on the database's clock. Concurrent claimers never receive the same job.
        """
        lease_seconds = whole_seconds(lease)
        if batch < 1:
            return []
        using = self.db
        driver = driver_for(using)
        picked_queues = list(queues) if queues else None
        left_out = list(exclude) if exclude else []

        def stamp(token: Any) -> dict[str, Any]:
            return claimed_fields(token, worker_id, lease_seconds)

        claimed = _retry_on_lock_conflict(
            using,
            lambda: driver.claim(
                self.model, worker_id, lease_seconds, batch, picked_queues, stamp, left_out
            ),
        )
        if claimed:
            signals.notify(signals.jobs_claimed, self.model, jobs=claimed, worker_id=worker_id)
        return claimed

    def heartbeat(
        self, job_id: uuid.UUID, claim_token: uuid.UUID, lease: float | timedelta
    ) -> bool:
        """Extend a running job's lease from the database's now; False if the claim is lost."""
        if driver_for(self.db).fences_by_join():
            return job_id not in self.heartbeat_many([(job_id, claim_token)], lease)
        lease_seconds = whole_seconds(lease)
        rows = _retry_on_lock_conflict(
            self.db,
            lambda: self._fenced(job_id, claim_token).update(**lease_fields(lease_seconds)),
        )
        if not rows:
            signals.job_claim_lost.send(
                sender=self.model, job_id=job_id, claim_token=claim_token, attempted="heartbeat"
            )
        return rows > 0

    def heartbeat_many(
        self, claims: Sequence[tuple[uuid.UUID, uuid.UUID]], lease: float | timedelta
    ) -> set[uuid.UUID]:
        """Heartbeat several jobs in one transaction; returns the ids whose claim is lost."""
        if not claims:
            return set()
        lease_seconds = whole_seconds(lease)
        driver = driver_for(self.db)
        rows = [(job_id, token, lease_fields(lease_seconds)) for job_id, token in claims]
        size = driver.BATCH_COMPLETION_ROWS

        def operation() -> set[uuid.UUID]:
            with transaction.atomic(using=self.db):
                if not driver.fences_by_join():
                    return {
                        job_id
                        for job_id, token in claims
                        if not self._fenced(job_id, token).update(**lease_fields(lease_seconds))
                    }
                # One fenced UPDATE per 500 claims, as for a batched completion: the
                # same fence on id, token and status, the rows reached by primary key.
                extended: set[uuid.UUID] = set()
                for start in range(0, len(rows), size):
                    extended |= driver.complete_batch(self.model, rows[start : start + size])
                return {job_id for job_id, _ in claims} - extended

        lost = _retry_on_lock_conflict(self.db, operation)
        tokens = dict(claims)
        for job_id in lost:
            signals.job_claim_lost.send(
                sender=self.model, job_id=job_id, claim_token=tokens[job_id], attempted="heartbeat"
            )
        return lost

    def release(self, job_id: uuid.UUID, claim_token: uuid.UUID) -> ClaimTransition:
        """running → pending without using up the attempt (graceful shutdown), fenced."""
        rows = _retry_on_lock_conflict(
            self.db,
            lambda: self._fenced(job_id, claim_token).update(
                status=JobStatus.PENDING,
                attempts=F("attempts") - 1,
                claim_token=None,
                locked_by="",
                lease_expires_at=None,
                available_at=DatabaseNow(),
            ),
        )
        outcome = ClaimTransition.from_rowcount(rows)
        if outcome is ClaimTransition.LOST:
            signals.job_claim_lost.send(
                sender=self.model, job_id=job_id, claim_token=claim_token, attempted="release"
            )
        else:
            signals.job_released.send(sender=self.model, job_id=job_id)
        return outcome

    def sweep_expired_leases(self, batch: int = 500) -> int:
        """Return jobs whose lease expired on the database's clock to pending, or dead.

        This is what brings back a crashed worker's jobs: the crashed process
        releases nothing, so recovery depends only on the lease having run out.
        A job with no attempts left goes ``dead`` (``exhausted``). The expired rows
        are locked before they are changed (skipping rows another sweeper holds),
        so ``jobs_swept`` names exactly the jobs this sweep took, and a heartbeat
        that lands first keeps its job.
        """

        def expired() -> models.QuerySet[Job]:
            return self.using(self.db).filter(
                status=JobStatus.RUNNING, lease_expires_at__lt=DatabaseNow()
            )

        ids = list(expired().order_by("lease_expires_at").values_list("id", flat=True)[:batch])
        if not ids:
            return 0
        message = "the lease expired while running (the worker stopped heartbeating)"
        skip_locked = connections[self.db].features.has_select_for_update_skip_locked

        def operation() -> tuple[list[uuid.UUID], list[uuid.UUID]]:
            with transaction.atomic(using=self.db):
                rows = list(
                    expired()
                    .filter(id__in=ids)
                    .select_for_update(skip_locked=skip_locked)
                    .values_list("id", "attempts", "max_attempts")
                )
                dead_ids = [job_id for job_id, tried, limit in rows if tried >= limit]
                requeue_ids = [job_id for job_id, tried, limit in rows if tried < limit]
                if dead_ids:
                    expired().filter(id__in=dead_ids).update(
                        **dead_fields(
                            DecidedErrorKind.EXHAUSTED, f"{message}; no attempts left", ""
                        )
                    )
                if requeue_ids:
                    expired().filter(id__in=requeue_ids).update(
                        status=JobStatus.PENDING,
                        claim_token=None,
                        locked_by="",
                        lease_expires_at=None,
                        available_at=DatabaseNow(),
                        last_error=message,
                    )
            return dead_ids, requeue_ids

        dead_ids, requeue_ids = _retry_on_lock_conflict(self.db, operation)
        dead, requeued = len(dead_ids), len(requeue_ids)
        if dead or requeued:
            signals.jobs_swept.send(
                sender=self.model, job_ids=dead_ids + requeue_ids, requeued=requeued, dead=dead
            )
        return dead + requeued

    def claim_job(
        self, job_id: uuid.UUID, worker_id: str, lease: float | timedelta
    ) -> ClaimedJob | None:
        """Claim the pending job ``job_id`` whatever its ``available_at``; None if not pending.

        The same transition as :meth:`claim` (attempts + 1, a fresh claim token,
        a lease on the database's clock), for running one chosen job inline:
        ``django_arcature.testing.run_job`` and ``ARCATURE["EAGER"]``. The
        compare-and-set on ``status = 'pending'`` means a job a worker already
        took is never claimed twice.
        """
        lease_seconds = whole_seconds(lease)
        token = uuid.uuid4()

        def operation() -> ClaimedJob | None:
            with transaction.atomic(using=self.db):
                updated = (
                    self.using(self.db)
                    .filter(id=job_id, status=JobStatus.PENDING)
                    .update(**claimed_fields(token, worker_id, lease_seconds))
                )
                if not updated:
                    return None
                # JSON undecoded: a row that cannot be decoded is marked, not raised.
                row = (
                    self.using(self.db)
                    .filter(id=job_id, claim_token=token)
                    .values_list(*claim_select_columns(connections[self.db].vendor))
                    .get()
                )
            return claimed_from_row(row)

        claimed = _retry_on_lock_conflict(self.db, operation)
        if claimed is not None:
            signals.notify(signals.jobs_claimed, self.model, jobs=[claimed], worker_id=worker_id)
        return claimed

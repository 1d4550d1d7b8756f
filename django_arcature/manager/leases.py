"""Claims and leases: taking pending jobs, keeping them, giving them back, recovering them."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
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
    send_event,
    whole_seconds,
)

from .base import JobWriter
from .dependencies import FAILED, settle

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
            self._report_claimed(claimed, worker_id)
        return claimed

    def _report_claimed(self, claimed: list[ClaimedJob], worker_id: str) -> None:
        """Send ``jobs_claimed`` once the claim has committed, never before.

        A limited queue's claim runs inside the gate's transaction (lock, count,
        claim, record the starts), and a caller may hold one of its own: sent
        from inside, a claim that then rolled back would be counted by metrics
        and leave the Prometheus receiver an entry for a token that never
        existed. Outside any transaction ``on_commit`` runs it at once.
        """
        model = self.model
        transaction.on_commit(
            lambda: signals.notify(signals.jobs_claimed, model, jobs=claimed, worker_id=worker_id),
            using=self.db,
        )

    def heartbeat(
        self, job_id: uuid.UUID, claim_token: uuid.UUID, lease: float | timedelta
    ) -> bool:
        """Extend a running job's lease from the database's now; False if the claim is lost."""
        if driver_for(self.db).fences_by_join():
            return (job_id, claim_token) not in self.heartbeat_many([(job_id, claim_token)], lease)
        lease_seconds = whole_seconds(lease)
        rows = _retry_on_lock_conflict(
            self.db,
            lambda: self._fenced(job_id, claim_token).update(**lease_fields(lease_seconds)),
        )
        if not rows:
            send_event(
                signals.job_claim_lost,
                self.model,
                job_id=job_id,
                claim_token=claim_token,
                attempted="heartbeat",
            )
        return rows > 0

    def heartbeat_many(
        self, claims: Sequence[tuple[uuid.UUID, uuid.UUID]], lease: float | timedelta
    ) -> set[tuple[uuid.UUID, uuid.UUID]]:
        """Heartbeat several claims in one transaction; returns the (id, token) claims lost.

        Keyed by claim, not by job: a worker may hold a lost claim and a fresh
        claim of the same job at once.
        """
        if not claims:
            return set()
        lease_seconds = whole_seconds(lease)
        driver = driver_for(self.db)
        rows = [(job_id, token, lease_fields(lease_seconds)) for job_id, token in claims]
        size = driver.BATCH_COMPLETION_ROWS

        def operation() -> set[tuple[uuid.UUID, uuid.UUID]]:
            with transaction.atomic(using=self.db):
                if not driver.fences_by_join():
                    return {
                        (job_id, token)
                        for job_id, token in claims
                        if not self._fenced(job_id, token).update(**lease_fields(lease_seconds))
                    }
                # One fenced UPDATE per 500 claims, as for a batched completion: the
                # same fence on id, token and status, the rows reached by primary key.
                # A statement reports the ids it changed, so no job is in one twice
                # (a stale and a fresh claim of it are told apart by statement).
                gone: set[tuple[uuid.UUID, uuid.UUID]] = set()
                for chunk in _one_claim_per_job(rows, size):
                    extended = driver.complete_batch(self.model, chunk)
                    gone.update(
                        (job_id, token) for job_id, token, _ in chunk if job_id not in extended
                    )
                return gone

        lost = _retry_on_lock_conflict(self.db, operation)
        for job_id, token in claims:
            if (job_id, token) in lost:
                send_event(
                    signals.job_claim_lost,
                    self.model,
                    job_id=job_id,
                    claim_token=token,
                    attempted="heartbeat",
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
            send_event(
                signals.job_claim_lost,
                self.model,
                job_id=job_id,
                claim_token=claim_token,
                attempted="release",
            )
        else:
            send_event(signals.job_released, self.model, job_id=job_id)
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
                if dead_ids:  # workflow hook: what waited on them, in this transaction
                    settle(self.db, self.model, dict.fromkeys(dead_ids, FAILED))
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
            send_event(
                signals.jobs_swept,
                self.model,
                job_ids=dead_ids + requeue_ids,
                requeued=requeued,
                dead=dead,
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
            self._report_claimed([claimed], worker_id)
        return claimed


def _one_claim_per_job(
    rows: Sequence[tuple[uuid.UUID, uuid.UUID, dict[str, Any]]], size: int
) -> Iterator[list[tuple[uuid.UUID, uuid.UUID, dict[str, Any]]]]:
    """Chunks of at most ``size`` rows in which no job id appears twice."""
    pending = list(rows)
    while pending:
        chunk: list[tuple[uuid.UUID, uuid.UUID, dict[str, Any]]] = []
        seen: set[uuid.UUID] = set()
        rest = []
        for row in pending:
            if len(chunk) < size and row[0] not in seen:
                chunk.append(row)
                seen.add(row[0])
            else:
                rest.append(row)
        yield chunk
        pending = rest

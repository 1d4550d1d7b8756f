"""Every write to a job row goes through here: enqueue, claim, fenced completion, sweep, admin.

The worker, the admin, the django.tasks backend and ``@job`` call these
methods; nothing else issues an UPDATE on the job table. Each completion is a
named transition built in one place (``_succeeded_fields`` …) and applied only
through ``_fenced``, so no caller can forget the fence or mix two outcomes.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db import IntegrityError, connections, models, transaction
from django.db.models import F
from django.db.models.functions import Coalesce
from django.utils import timezone

from . import dialects, signals
from .conf import MAX_LEASE_SECONDS, get_settings
from .decide import ErrorKind as DecidedErrorKind
from .decide import truncate_for_storage
from .dialects import ClaimedJob, DatabaseNow

if TYPE_CHECKING:
    from .models import Job

__all__ = ["ClaimTransition", "ClaimedJob", "Completion", "JobManager"]


class ClaimTransition(enum.Enum):
    """Whether a fenced write changed the row (``UPDATED``) or was fenced out (``LOST``)."""

    UPDATED = "updated"
    LOST = "lost"

    @classmethod
    def from_rowcount(cls, rows: int) -> ClaimTransition:
        return cls.UPDATED if rows > 0 else cls.LOST


@dataclass(frozen=True)
class Completion:
    """One fenced write for :meth:`JobManager.complete_many`.

    ``kind`` is ``"succeeded"``, ``"retry"`` or ``"dead"``; the other fields are
    those the matching ``mark_*`` method takes.
    """

    job_id: uuid.UUID
    claim_token: uuid.UUID
    kind: str
    result: Any = None
    available_at: datetime | None = None
    error_kind: str = ""
    message: str = ""
    traceback: str = ""
    attempt_log: list[Any] | None = None


class JobManager(models.Manager["Job"]):
    """The only writer of job rows (DESIGN §4)."""

    # --- enqueue -------------------------------------------------------------

    def enqueue(
        self,
        task: Any,
        *,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        queue: str | None = None,
        priority: int | None = None,
        delay: float | timedelta | None = None,
        run_at: datetime | None = None,
        max_attempts: int | None = None,
        unique_key: str | None = None,
        backend: str = "",
    ) -> Job:
        """Insert one pending job, in the caller's transaction if there is one.

        ``task`` is a registered name or a ``@job`` handle. The job's own
        arguments travel in ``args``/``kwargs`` so they never collide with these
        options. With ``unique_key``, an active job holding the same key is
        returned instead of inserting a second one.
        """
        row = self._build(
            task,
            args=args,
            kwargs=kwargs,
            queue=queue,
            priority=priority,
            delay=delay,
            run_at=run_at,
            max_attempts=max_attempts,
            unique_key=unique_key,
            backend=backend,
        )
        if row.unique_key is None:
            row.save(force_insert=True, using=self.db)
            job = row
        else:
            job = self._insert_unique(row)
        signals.job_enqueued.send(sender=self.model, job=job)
        return job

    def enqueue_many(
        self,
        task: Any,
        arguments: Iterable[
            Sequence[Any] | Mapping[str, Any] | tuple[Sequence[Any], Mapping[str, Any]]
        ],
        *,
        queue: str | None = None,
        priority: int | None = None,
        delay: float | timedelta | None = None,
        run_at: datetime | None = None,
        max_attempts: int | None = None,
        batch_size: int = 1000,
    ) -> list[Job]:
        """Insert many pending jobs of one task, ``batch_size`` rows per INSERT.

        Each item of ``arguments`` is a sequence of positional arguments, a
        mapping of keyword arguments, or an ``(args, kwargs)`` pair. Every item is
        validated before anything is written, so a bad item inserts nothing.
        """
        rows = []
        for item in arguments:
            args, kwargs = _split_arguments(item)
            rows.append(
                self._build(
                    task,
                    args=args,
                    kwargs=kwargs,
                    queue=queue,
                    priority=priority,
                    delay=delay,
                    run_at=run_at,
                    max_attempts=max_attempts,
                    unique_key=None,
                    backend="",
                )
            )
        with transaction.atomic(using=self.db):
            created = self.bulk_create(rows, batch_size=batch_size)
        for job in created:
            signals.job_enqueued.send(sender=self.model, job=job)
        return created

    def _build(
        self,
        task: Any,
        *,
        args: Sequence[Any],
        kwargs: Mapping[str, Any] | None,
        queue: str | None,
        priority: int | None,
        delay: float | timedelta | None,
        run_at: datetime | None,
        max_attempts: int | None,
        unique_key: str | None,
        backend: str,
    ) -> Job:
        from .registry import prepare_enqueue

        conf = get_settings()
        args = list(args)
        kwargs = dict(kwargs or {})
        plan = prepare_enqueue(task, args, kwargs, checked=not backend)
        if delay is not None and run_at is not None:
            raise ValueError("Pass either delay or run_at, not both.")
        now = timezone.now()
        if run_at is not None:
            if timezone.is_naive(run_at):
                raise ValueError("run_at must be timezone-aware (use django.utils.timezone).")
            available_at = run_at
        elif delay is not None:
            seconds = delay.total_seconds() if isinstance(delay, timedelta) else float(delay)
            if seconds < 0:
                raise ValueError("delay must not be negative.")
            available_at = now + timedelta(seconds=seconds)
        else:
            available_at = now
        attempts_allowed = max_attempts or plan.max_attempts or conf.max_attempts
        if attempts_allowed < 1:
            raise ValueError("max_attempts must be at least 1.")
        if unique_key is None and plan.unique:
            unique_key = plan.unique_key(args, kwargs)
        return self.model(
            id=uuid.uuid4(),
            task_name=plan.name,
            queue=queue or plan.queue or conf.default_queue,
            priority=plan.priority if priority is None else priority,
            payload={"args": args, "kwargs": kwargs},
            attempts=0,
            max_attempts=attempts_allowed,
            available_at=available_at,
            lease_seconds=conf.lease_seconds,
            unique_key=unique_key,
            backend=backend,
            created_at=now,
        )

    def _insert_unique(self, row: Job) -> Job:
        """Insert, or return the live job that already holds ``row.unique_key``.

        The database's unique constraint decides, not a check-then-insert: two
        racing enqueues cannot both win. If the holder finishes between our
        failed insert and our read, the key is free again and we insert anew.
        """
        for _ in range(10):
            try:
                with transaction.atomic(using=self.db):
                    row.save(force_insert=True, using=self.db)
                return row
            except IntegrityError:
                existing = self.using(self.db).filter(unique_key=row.unique_key).first()
                if existing is not None:
                    return existing
        raise IntegrityError(f"could not enqueue unique key {row.unique_key!r}")

    # --- claim -------------------------------------------------------------------

    def claim(
        self,
        worker_id: str,
        lease: float | timedelta,
        batch: int,
        queues: Sequence[str] | None = None,
    ) -> list[ClaimedJob]:
        """Take up to ``batch`` available pending jobs for ``worker_id``.

        Highest priority first, then oldest ``available_at``. Each claimed job
        gets ``attempts + 1``, a fresh random claim token, and a lease stamped
        on the database's clock. Concurrent claimers never receive the same job.
        """
        lease_seconds = _whole_seconds(lease)
        if batch < 1:
            return []
        queues = list(queues) if queues else None
        using = self.db
        vendor = connections[using].vendor
        table = self.model._meta.db_table
        if dialects.uses_single_statement_claim(vendor):

            def operation() -> list[ClaimedJob]:
                return dialects.claim_in_one_statement(
                    using, table, worker_id, lease_seconds, batch, queues
                )
        else:

            def operation() -> list[ClaimedJob]:
                return self._claim_select_then_update(worker_id, lease_seconds, batch, queues)

        return dialects.retry_on_lock_conflict(using, operation)

    def _claim_select_then_update(
        self, worker_id: str, lease_seconds: int, batch: int, queues: list[str] | None
    ) -> list[ClaimedJob]:
        """MySQL/MariaDB: SELECT … FOR UPDATE SKIP LOCKED, then one compare-and-set UPDATE."""
        from .models import JobStatus

        with transaction.atomic(using=self.db):
            candidates = (
                self.using(self.db)
                .select_for_update(skip_locked=True)
                .filter(status=JobStatus.PENDING, available_at__lte=DatabaseNow())
            )
            if queues:
                candidates = candidates.filter(queue__in=queues)
            rows = list(
                candidates.order_by("-priority", "available_at").values_list(
                    *dialects.CLAIM_COLUMNS
                )[:batch]
            )
            if not rows:
                return []
            tokens = {row[0]: uuid.uuid4() for row in rows}
            token_case = models.Case(
                *(
                    models.When(id=job_id, then=models.Value(token))
                    for job_id, token in tokens.items()
                ),
                output_field=models.UUIDField(),
            )
            updated = (
                self.using(self.db)
                .filter(id__in=list(tokens), status=JobStatus.PENDING)
                .update(
                    status=JobStatus.RUNNING,
                    attempts=F("attempts") + 1,
                    claim_token=token_case,
                    locked_by=worker_id,
                    locked_at=DatabaseNow(),
                    lease_seconds=lease_seconds,
                    lease_expires_at=DatabaseNow(lease_seconds),
                    started_at=Coalesce("started_at", DatabaseNow()),
                )
            )
            if updated != len(rows):  # the rows are locked by us: this would be a bug
                raise RuntimeError(f"claimed {updated} of {len(rows)} locked rows")
        claimed = []
        for row in rows:
            values = list(row)
            values[dialects.CLAIM_COLUMNS.index("attempts")] += 1
            values[dialects.CLAIM_COLUMNS.index("claim_token")] = tokens[row[0]]
            values[dialects.CLAIM_COLUMNS.index("lease_seconds")] = lease_seconds
            claimed.append(dialects.claimed_from_row(values))
        return claimed

    # --- fenced transitions --------------------------------------------------------

    def _fenced(self, job_id: uuid.UUID, claim_token: uuid.UUID) -> models.QuerySet[Job]:
        """The fence: this job, still running, still under this claim."""
        from .models import JobStatus

        return self.using(self.db).filter(
            id=job_id, status=JobStatus.RUNNING, claim_token=claim_token
        )

    def _apply(
        self,
        completion: Completion,
        fields: dict[str, Any],
    ) -> ClaimTransition:
        rows = self._fenced(completion.job_id, completion.claim_token).update(**fields)
        outcome = ClaimTransition.from_rowcount(rows)
        _announce(self.model, completion, outcome)
        return outcome

    def mark_succeeded(
        self,
        job_id: uuid.UUID,
        claim_token: uuid.UUID,
        result: Any = None,
        *,
        attempt_log: list[Any] | None = None,
    ) -> ClaimTransition:
        """running → succeeded, only under this claim."""
        completion = Completion(
            job_id, claim_token, "succeeded", result=result, attempt_log=attempt_log
        )
        return self._write_one(completion)

    def mark_retry(
        self,
        job_id: uuid.UUID,
        claim_token: uuid.UUID,
        available_at: datetime,
        message: str,
        *,
        traceback: str = "",
        attempt_log: list[Any] | None = None,
    ) -> ClaimTransition:
        """running → pending (claimable again at ``available_at``), only under this claim."""
        completion = Completion(
            job_id,
            claim_token,
            "retry",
            available_at=available_at,
            message=message,
            traceback=traceback,
            attempt_log=attempt_log,
        )
        return self._write_one(completion)

    def mark_dead(
        self,
        job_id: uuid.UUID,
        claim_token: uuid.UUID,
        error_kind: str,
        message: str,
        *,
        traceback: str = "",
        attempt_log: list[Any] | None = None,
    ) -> ClaimTransition:
        """running → dead with a kind and a reason, only under this claim."""
        completion = Completion(
            job_id,
            claim_token,
            "dead",
            error_kind=str(error_kind),
            message=message,
            traceback=traceback,
            attempt_log=attempt_log,
        )
        return self._write_one(completion)

    def heartbeat(
        self, job_id: uuid.UUID, claim_token: uuid.UUID, lease: float | timedelta
    ) -> bool:
        """Extend a running job's lease from the database's now; False if the claim is lost."""
        lease_seconds = _whole_seconds(lease)
        rows = dialects.retry_on_lock_conflict(
            self.db,
            lambda: self._fenced(job_id, claim_token).update(
                locked_at=DatabaseNow(),
                lease_seconds=lease_seconds,
                lease_expires_at=DatabaseNow(lease_seconds),
            ),
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
        lease_seconds = _whole_seconds(lease)

        def operation() -> set[uuid.UUID]:
            with transaction.atomic(using=self.db):
                return {
                    job_id
                    for job_id, token in claims
                    if not self._fenced(job_id, token).update(
                        locked_at=DatabaseNow(),
                        lease_seconds=lease_seconds,
                        lease_expires_at=DatabaseNow(lease_seconds),
                    )
                }

        lost = dialects.retry_on_lock_conflict(self.db, operation)
        tokens = dict(claims)
        for job_id in lost:
            signals.job_claim_lost.send(
                sender=self.model, job_id=job_id, claim_token=tokens[job_id], attempted="heartbeat"
            )
        return lost

    def release(self, job_id: uuid.UUID, claim_token: uuid.UUID) -> ClaimTransition:
        """running → pending without using up the attempt (graceful shutdown), fenced."""
        from .models import JobStatus

        rows = dialects.retry_on_lock_conflict(
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

    def _write_one(self, completion: Completion) -> ClaimTransition:
        fields = self._transition_fields(completion)
        return dialects.retry_on_lock_conflict(self.db, lambda: self._apply(completion, fields))

    def complete_many(self, completions: Sequence[Completion]) -> list[ClaimTransition]:
        """Apply many fenced completions in one transaction (one commit for a batch).

        Each row is still fenced on its own id and token, and each gets its own
        UPDATED/LOST; observer events are sent after the commit, for UPDATED
        rows only.
        """
        if not completions:
            return []
        field_sets = [self._transition_fields(c) for c in completions]

        def operation() -> list[ClaimTransition]:
            with transaction.atomic(using=self.db):
                return [
                    ClaimTransition.from_rowcount(
                        self._fenced(c.job_id, c.claim_token).update(**fields)
                    )
                    for c, fields in zip(completions, field_sets, strict=True)
                ]

        outcomes = dialects.retry_on_lock_conflict(self.db, operation)
        for completion, outcome in zip(completions, outcomes, strict=True):
            _announce(self.model, completion, outcome)
        return outcomes

    def _transition_fields(self, completion: Completion) -> dict[str, Any]:
        conf = get_settings()
        if completion.kind == "succeeded":
            fields = _succeeded_fields(completion.result)
        elif completion.kind == "retry":
            if completion.available_at is None:
                raise ValueError("a retry needs available_at")
            fields = _retry_fields(
                completion.available_at,
                truncate_for_storage(completion.message, conf.message_max_bytes),
                truncate_for_storage(completion.traceback, conf.traceback_max_bytes),
            )
        elif completion.kind == "dead":
            fields = _dead_fields(
                _known_error_kind(completion.error_kind),
                truncate_for_storage(completion.message, conf.message_max_bytes),
                truncate_for_storage(completion.traceback, conf.traceback_max_bytes),
            )
        else:
            raise ValueError(f"unknown completion kind {completion.kind!r}")
        if completion.attempt_log is not None:
            fields["attempt_log"] = completion.attempt_log
        return fields

    # --- recovery ----------------------------------------------------------------------

    def sweep_expired_leases(self, batch: int = 500) -> int:
        """Return jobs whose lease expired on the database's clock to pending, or dead.

        This is what brings back a crashed worker's jobs: the crashed process
        releases nothing, so recovery depends only on the lease having run out.
        A job with no attempts left goes ``dead`` (``exhausted``). The expired rows
        are locked before they are changed (skipping rows another sweeper holds),
        so ``jobs_swept`` names exactly the jobs this sweep took, and a heartbeat
        that lands first keeps its job.
        """
        from .models import JobStatus

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
                        **_dead_fields(
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

        dead_ids, requeue_ids = dialects.retry_on_lock_conflict(self.db, operation)
        dead, requeued = len(dead_ids), len(requeue_ids)
        if dead or requeued:
            signals.jobs_swept.send(
                sender=self.model, job_ids=dead_ids + requeue_ids, requeued=requeued, dead=dead
            )
        return dead + requeued

    # --- operator actions -----------------------------------------------------------

    def cancel(self, job_id: uuid.UUID) -> int:
        """pending/running → cancelled. A running job's later completion is fenced out."""
        from .models import ACTIVE_STATUSES, JobStatus

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
        from .models import JobStatus

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
        from .models import JobStatus

        return (
            self.using(self.db)
            .filter(id=job_id, status=JobStatus.PENDING)
            .update(available_at=DatabaseNow())
        )

    def prune(self, older_than: timedelta, statuses: Sequence[str] | None = None) -> int:
        """Delete finished jobs (succeeded and cancelled by default) older than ``older_than``."""
        from .models import JobStatus

        statuses = list(statuses or (JobStatus.SUCCEEDED, JobStatus.CANCELLED))
        if set(statuses) & {JobStatus.PENDING, JobStatus.RUNNING}:
            raise ValueError("prune deletes finished jobs only")
        cutoff = timezone.now() - older_than
        deleted, _ = (
            self.using(self.db).filter(status__in=statuses, finished_at__lt=cutoff).delete()
        )
        return deleted


# --- Named transitions: the fields each fenced outcome writes, in one place each -------


def _succeeded_fields(result: Any) -> dict[str, Any]:
    from .models import JobStatus

    return {
        "status": JobStatus.SUCCEEDED,
        "claim_token": None,
        "unique_key": None,
        "lease_expires_at": None,
        "finished_at": DatabaseNow(),
        "result": result,
    }


def _retry_fields(available_at: datetime, message: str, traceback: str) -> dict[str, Any]:
    from .models import JobStatus

    return {
        "status": JobStatus.PENDING,
        "claim_token": None,
        "lease_expires_at": None,
        "available_at": available_at,
        "last_error": message,
        "last_traceback": traceback,
    }


def _dead_fields(error_kind: str, message: str, traceback: str) -> dict[str, Any]:
    from .models import JobStatus

    return {
        "status": JobStatus.DEAD,
        "claim_token": None,
        "unique_key": None,
        "lease_expires_at": None,
        "error_kind": str(error_kind),
        "last_error": message,
        "last_traceback": traceback,
        "failed_at": DatabaseNow(),
        "finished_at": DatabaseNow(),
    }


def _known_error_kind(value: str) -> str:
    try:
        return DecidedErrorKind(value).value
    except ValueError:
        known = ", ".join(kind.value for kind in DecidedErrorKind)
        raise ValueError(f"unknown error kind {value!r}; use one of {known}") from None


def _announce(sender: type[Job], completion: Completion, outcome: ClaimTransition) -> None:
    """Send the observer event for a fenced write: its own event if it landed,
    ``job_claim_lost`` if it was fenced out (and never both)."""
    if outcome is ClaimTransition.LOST:
        signals.job_claim_lost.send(
            sender=sender,
            job_id=completion.job_id,
            claim_token=completion.claim_token,
            attempted=completion.kind,
        )
        return
    signal = {
        "succeeded": signals.job_succeeded,
        "retry": signals.job_retried,
        "dead": signals.job_dead,
    }[completion.kind]
    signal.send(sender=sender, job_id=completion.job_id, completion=completion)


def _whole_seconds(lease: float | timedelta) -> int:
    seconds = lease.total_seconds() if isinstance(lease, timedelta) else float(lease)
    if not 1 <= seconds <= MAX_LEASE_SECONDS:  # also refuses NaN
        raise ValueError(f"a lease must be from 1 to {MAX_LEASE_SECONDS} seconds, not {lease!r}")
    return round(seconds)


def _split_arguments(item: Any) -> tuple[list[Any], dict[str, Any]]:
    if isinstance(item, Mapping):
        return [], dict(item)
    if (
        isinstance(item, tuple)
        and len(item) == 2
        and isinstance(item[0], list | tuple)
        and isinstance(item[1], Mapping)
    ):
        return list(item[0]), dict(item[1])
    if isinstance(item, list | tuple):
        return list(item), {}
    return [item], {}

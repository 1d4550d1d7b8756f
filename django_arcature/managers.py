"""Every write to a job row goes through here: enqueue, claim, fenced completion, sweep, admin.

The worker, the admin, the django.tasks backend and ``@job`` call these
methods; nothing else issues an UPDATE on the job table. Each completion is a
named transition built in one place (``_succeeded_fields`` …) and applied only
through ``_fenced``, so no caller can forget the fence or mix two outcomes.
"""

from __future__ import annotations

import enum
import os
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db import IntegrityError, connections, models, transaction
from django.db.models import F
from django.db.models.base import ModelState
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

#: How often an enqueue of a unique job retries when the key's holder finished
#: between our failed insert and our read (each retry needs that race again).
_UNIQUE_INSERT_ATTEMPTS = 10
#: The furthest ahead a delayed job may be scheduled (as for retries).
_MAX_DELAY_SECONDS = 10 * 365 * 24 * 3600


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
        options. With ``unique_key`` (or a ``@job(unique=True)`` handler), a
        pending or running job holding the same key is returned instead of
        inserting a second one.
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
            dialects.retry_on_lock_conflict(
                self.db, lambda: row.save(force_insert=True, using=self.db)
            )
            job, created = row, True
        else:
            job, created = dialects.retry_on_lock_conflict(
                self.db, lambda: self._insert_unique(row)
            )
        if not created:
            return job
        self._announce_enqueued([job])
        return self._run_eagerly([job])[0]

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
        """Insert many pending jobs of one task, in the caller's transaction if there is one.

        Each item of ``arguments`` is a sequence of positional arguments, a
        mapping of keyword arguments, or an ``(args, kwargs)`` pair. Every item is
        validated before anything is written, so a bad item inserts nothing. The
        result lines up with ``arguments``; for a ``unique`` task an item whose key
        is already held (by an older job or an earlier item) gets the holder.

        On PostgreSQL the rows go in one ``COPY``; MySQL/MariaDB take ``batch_size``
        rows per INSERT, SQLite one prepared INSERT run for every row.
        """
        items = [_split_arguments(item) for item in arguments]
        if not items:
            return []
        rows, varying = self._build_rows(
            task,
            items,
            queue=queue,
            priority=priority,
            delay=delay,
            run_at=run_at,
            max_attempts=max_attempts,
            unique_key=None,
            backend="",
        )
        if any(row.unique_key is not None for row in rows):
            return self._enqueue_many_unique(rows)
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, not {batch_size!r}")
        using = self.db

        def insert() -> None:
            with transaction.atomic(using=using):
                dialects.insert_rows(using, self.model, rows, varying, batch_size)

        dialects.retry_on_lock_conflict(using, insert)
        for row in rows:  # as bulk_create leaves them: saved, and on this database
            row._state.adding = False
            row._state.db = using
        self._announce_enqueued(rows)
        return self._run_eagerly(rows)

    def _enqueue_many_unique(self, rows: list[Job]) -> list[Job]:
        """Unique rows one by one (each under its own savepoint) in one transaction.

        A bulk INSERT cannot say which rows lost to an existing key on every
        database, so each row gets the same race-free insert-or-fetch as
        :meth:`enqueue`; one commit still covers the batch.
        """

        def insert() -> list[tuple[Job, bool]]:
            with transaction.atomic(using=self.db):
                return [
                    self._insert_unique(row) if row.unique_key else (_save(row, self.db), True)
                    for row in rows
                ]

        results = dialects.retry_on_lock_conflict(self.db, insert)
        created = [job for job, is_new in results if is_new]
        self._announce_enqueued(created)
        ran = {job.pk: job for job in self._run_eagerly(created)}
        return [ran.get(job.pk, job) for job, _ in results]

    def _announce_enqueued(self, jobs: Sequence[Job]) -> None:
        """Send ``job_enqueued`` once the insert is committed (at once outside a transaction).

        An enqueue rolled back with the caller's transaction never happened, so
        observers are not told about it.
        """
        if not jobs:
            return
        model = self.model

        def send() -> None:
            for job in jobs:
                signals.job_enqueued.send(sender=model, job=job)

        transaction.on_commit(send, using=self.db)

    def _run_eagerly(self, jobs: list[Job]) -> list[Job]:
        """With ``ARCATURE = {"EAGER": True}``, run each new job now, in this process.

        The row is inserted and validated first, and each run goes through the
        same claim, dispatch and fenced write as a worker's, so a test sees the
        job's real end state (result, error, attempts) on the returned object.
        """
        if not jobs or not get_settings().eager:
            return jobs
        from .inline import run_job

        return [run_job(job) for job in jobs]

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
        """Validate everything about one job and build its row (unsaved)."""
        if isinstance(args, str | bytes) or not isinstance(args, Sequence):
            raise TypeError(f"args must be a list or tuple of arguments, not {args!r}")
        if kwargs is not None and not isinstance(kwargs, Mapping):
            raise TypeError(f"kwargs must be a dict of keyword arguments, not {kwargs!r}")
        rows, _ = self._build_rows(
            task,
            [(list(args), dict(kwargs or {}))],
            queue=queue,
            priority=priority,
            delay=delay,
            run_at=run_at,
            max_attempts=max_attempts,
            unique_key=unique_key,
            backend=backend,
        )
        return rows[0]

    def _build_rows(
        self,
        task: Any,
        items: Sequence[tuple[list[Any], dict[str, Any]]],
        *,
        queue: str | None,
        priority: int | None,
        delay: float | timedelta | None,
        run_at: datetime | None,
        max_attempts: int | None,
        unique_key: str | None,
        backend: str,
    ) -> tuple[list[Job], tuple[str, ...]]:
        """Validate every item's arguments, then the options once, and build the rows (unsaved).

        ``items`` are ``(args, kwargs)`` pairs, already a list and a dict each.
        Settings are read and the options checked once per call, so a bulk
        enqueue pays per row only for the argument check, an id, a clock reading
        and the row itself. Returns the rows and the names of the fields that
        differ between them (everything else is the same in every row).
        """
        from .exceptions import MalformedPayload
        from .registry import QUEUE_MAX_LENGTH, UNIQUE_KEY_MAX_LENGTH, prepare_enqueue

        checked = not backend
        plan = prepare_enqueue(task, *items[0], checked=checked)
        if plan.spec is None:  # the django.tasks backend's rows: JSON checks only
            for args, kwargs in items[1:]:
                prepare_enqueue(task, args, kwargs, checked=checked)
        else:  # the task is resolved; each further item needs only its argument check
            validate = plan.spec.validate
            for args, kwargs in items[1:]:
                try:
                    validate(args, kwargs)
                except MalformedPayload as exc:  # worded as prepare_enqueue words it
                    raise MalformedPayload(f"cannot enqueue {plan.name}: {exc}") from None
        conf = get_settings()
        offset = _delay_offset(delay, run_at)
        attempts_allowed = next(
            value
            for value in (max_attempts, plan.max_attempts, conf.max_attempts)
            if value is not None
        )
        if (
            isinstance(attempts_allowed, bool)
            or not isinstance(attempts_allowed, int)
            or attempts_allowed < 1
        ):
            raise ValueError(
                f"max_attempts must be a whole number, at least 1, not {attempts_allowed!r}"
            )
        if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
            raise TypeError(f"priority must be an int, not {priority!r}")
        queue_name = queue or plan.queue or conf.default_queue
        if not isinstance(queue_name, str) or len(queue_name) > QUEUE_MAX_LENGTH:
            raise ValueError(
                f"queue must be a name of 1 to {QUEUE_MAX_LENGTH} characters, not {queue_name!r}"
            )
        if unique_key is not None and (
            not isinstance(unique_key, str) or not 0 < len(unique_key) <= UNIQUE_KEY_MAX_LENGTH
        ):
            raise ValueError(
                f"unique_key must be a string of 1 to {UNIQUE_KEY_MAX_LENGTH} characters, "
                f"not {unique_key!r:.80}"
            )
        maker = _RowMaker(
            self.model,
            task_name=plan.name,
            queue=queue_name,
            priority=plan.priority if priority is None else priority,
            attempts=0,
            max_attempts=attempts_allowed,
            lease_seconds=conf.lease_seconds,
            backend=backend,
        )
        derive_key = plan.unique and unique_key is None
        rows = []
        for job_id, (args, kwargs) in zip(_new_ids(len(items)), items, strict=True):
            # One clock reading per row, as for one-by-one enqueues: rows of a batch
            # become available in the order given, and are claimed in that order.
            now = timezone.now()
            if run_at is not None:
                available_at = run_at
            elif offset is not None:
                available_at = now + offset
            else:
                available_at = now
            rows.append(
                maker.make(
                    job_id,
                    {"args": args, "kwargs": kwargs},
                    available_at,
                    now,
                    plan.unique_key(args, kwargs) if derive_key else unique_key,
                )
            )
        varying = maker.varying
        if not derive_key:  # one key (or none) for every row
            varying = tuple(name for name in varying if name != "unique_key")
        return rows, varying

    def _insert_unique(self, row: Job) -> tuple[Job, bool]:
        """Insert ``row``, or return the live job that already holds its unique key.

        The database's unique constraint decides, not a check-then-insert, so two
        racing enqueues cannot both win; the loser's insert fails under its own
        savepoint and it reads the winner. If the holder finishes between that
        failure and the read, the key is free again and the insert is retried.
        Returns ``(job, created)``.
        """
        error: IntegrityError | None = None
        for _ in range(_UNIQUE_INSERT_ATTEMPTS):
            try:
                with transaction.atomic(using=self.db):
                    row.save(force_insert=True, using=self.db)
            except IntegrityError as exc:
                error = exc
                existing = self.using(self.db).filter(unique_key=row.unique_key).first()
                if existing is not None:
                    return existing, False
                continue
            return row, True
        assert error is not None
        raise error

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
                .update(**_claimed_fields(token_case, worker_id, lease_seconds))
            )
            if updated != len(rows):  # the rows are locked by us: this would be a bug
                raise RuntimeError(f"claimed {updated} of {len(rows)} locked rows")
        claimed = []
        for row in rows:
            values = list(row)
            values[dialects.CLAIM_COLUMNS.index("attempts")] += 1
            values[dialects.CLAIM_COLUMNS.index("claim_token")] = tokens[row[0]]
            values[dialects.CLAIM_COLUMNS.index("lease_seconds")] = lease_seconds
            claimed.append(dialects.claimed_from_row(values, json_decoded=True))
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
            lambda: self._fenced(job_id, claim_token).update(**_lease_fields(lease_seconds)),
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
                    if not self._fenced(job_id, token).update(**_lease_fields(lease_seconds))
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

    # --- one specific job (django_arcature.testing, eager mode) ---------------------

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
        from .models import JobStatus

        lease_seconds = _whole_seconds(lease)
        token = uuid.uuid4()

        def operation() -> ClaimedJob | None:
            with transaction.atomic(using=self.db):
                updated = (
                    self.using(self.db)
                    .filter(id=job_id, status=JobStatus.PENDING)
                    .update(**_claimed_fields(token, worker_id, lease_seconds))
                )
                if not updated:
                    return None
                # Through the ORM, so JSON columns arrive decoded on every database.
                row = (
                    self.using(self.db)
                    .filter(id=job_id, claim_token=token)
                    .values_list(*dialects.CLAIM_COLUMNS)
                    .get()
                )
            return dialects.claimed_from_row(row, json_decoded=True)

        return dialects.retry_on_lock_conflict(self.db, operation)

    # --- batched completions (the worker's hot path) ------------------------------------

    def complete_batch(self, completions: Sequence[Completion]) -> list[ClaimTransition]:
        """Like :meth:`complete_many`, in one UPDATE per transition where the database can.

        Same fields (``_transition_fields``), same per-row fence on id, token and
        ``status = 'running'``, same events after the commit; on PostgreSQL and
        SQLite each group of same-kind completions is a single ``UPDATE … FROM
        (VALUES …) RETURNING id`` instead of one statement per job. Elsewhere it
        is :meth:`complete_many`.
        """
        if not completions:
            return []
        if not dialects.supports_batch_completion(connections[self.db].vendor):
            return self.complete_many(completions)
        groups: dict[tuple[str, ...], list[tuple[uuid.UUID, uuid.UUID, dict[str, Any]]]] = {}
        for completion in completions:
            fields = self._transition_fields(completion)
            groups.setdefault(tuple(fields), []).append(
                (completion.job_id, completion.claim_token, fields)
            )
        size = dialects.BATCH_COMPLETION_ROWS

        def operation() -> set[uuid.UUID]:
            updated: set[uuid.UUID] = set()
            with transaction.atomic(using=self.db):
                for rows in groups.values():
                    for start in range(0, len(rows), size):
                        updated |= dialects.complete_in_one_statement(
                            self.db, self.model, rows[start : start + size]
                        )
            return updated

        updated = dialects.retry_on_lock_conflict(self.db, operation)
        outcomes = [
            ClaimTransition.UPDATED if c.job_id in updated else ClaimTransition.LOST
            for c in completions
        ]
        for completion, outcome in zip(completions, outcomes, strict=True):
            _announce(self.model, completion, outcome)
        return outcomes


# --- Named transitions: the fields each fenced outcome writes, in one place each -------


def _lease_fields(lease_seconds: int) -> dict[str, Any]:
    """A fresh lease from the database's now: what a claim and a heartbeat both stamp."""
    return {
        "locked_at": DatabaseNow(),
        "lease_seconds": lease_seconds,
        "lease_expires_at": DatabaseNow(lease_seconds),
    }


def _claimed_fields(token: Any, worker_id: str, lease_seconds: int) -> dict[str, Any]:
    """pending → running under a new claim token (``token`` may be a per-row CASE)."""
    from .models import JobStatus

    return {
        "status": JobStatus.RUNNING,
        "attempts": F("attempts") + 1,
        "claim_token": token,
        "locked_by": worker_id,
        "started_at": Coalesce("started_at", DatabaseNow()),
        **_lease_fields(lease_seconds),
    }


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


def _save(row: Job, using: str) -> Job:
    row.save(force_insert=True, using=using)
    return row


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


class _RowMaker:
    """Unsaved job rows of one enqueue call, which differ only in a few fields.

    A bulk enqueue builds thousands of rows, and ``Model.__init__`` with keyword
    arguments was a fifth of its time. The values every row shares are read
    once from a row built the ordinary way, so each default is the ORM's own; a
    callable default (``attempt_log=list``) is called per row, so no two rows
    share a mutable value. While nobody listens to ``pre_init``/``post_init``
    for the model, a row is assembled the way ``Model.__init__`` leaves it (its
    field values and a fresh ``ModelState``), without the per-field loop;
    otherwise it goes through ``__init__`` with positional values, which sends
    the signals.
    """

    #: Set per row by :meth:`make`, in its argument order.
    PER_ROW = ("id", "payload", "available_at", "created_at", "unique_key")

    def __init__(self, model: type[Job], **shared: Any) -> None:
        fields = model._meta.concrete_fields
        sample = model(**shared)
        self.model = model
        self.template = {field.attname: getattr(sample, field.attname) for field in fields}
        fresh = [
            field
            for field in fields
            if field.attname not in shared
            and field.attname not in self.PER_ROW
            and field.has_default()
            and callable(field.default)
        ]
        self.fresh = [(field.attname, field.get_default) for field in fresh]
        #: The fields whose values may differ between rows; the rest are the same in all
        #: (a new empty list or dict in each row is still the same value).
        self.varying = (
            *self.PER_ROW,
            *(field.attname for field in fresh if field.default not in (list, dict)),
        )
        self.plain = not (
            models.signals.pre_init.has_listeners(model)
            or models.signals.post_init.has_listeners(model)
        )

    def make(
        self,
        job_id: uuid.UUID,
        payload: dict[str, Any],
        available_at: datetime,
        created_at: datetime,
        unique_key: str | None,
    ) -> Job:
        values = self.template.copy()
        values["id"] = job_id
        values["payload"] = payload
        values["available_at"] = available_at
        values["created_at"] = created_at
        values["unique_key"] = unique_key
        for attname, default in self.fresh:
            values[attname] = default()
        if not self.plain:
            # The template's keys are in field order: these are the positional values.
            built: Job = self.model(*values.values())  # type: ignore[misc]
            return built
        row = self.model.__new__(self.model)
        values["_state"] = ModelState()
        row.__dict__ = values
        return row


def _delay_offset(delay: float | timedelta | None, run_at: datetime | None) -> timedelta | None:
    """Check ``delay``/``run_at``; the offset from "now" a delay gives, or None."""
    if delay is not None and run_at is not None:
        raise ValueError("Pass either delay or run_at, not both.")
    if run_at is not None:
        if not isinstance(run_at, datetime):
            raise TypeError(f"run_at must be a datetime, not {run_at!r}")
        if timezone.is_naive(run_at):
            raise ValueError("run_at must be timezone-aware (use django.utils.timezone).")
        return None
    if delay is None:
        return None
    if isinstance(delay, bool) or not isinstance(delay, int | float | timedelta):
        raise TypeError(f"delay must be a number of seconds or a timedelta, not {delay!r}")
    seconds = delay.total_seconds() if isinstance(delay, timedelta) else float(delay)
    if not 0 <= seconds <= _MAX_DELAY_SECONDS:  # also refuses NaN
        raise ValueError(f"delay must be from 0 to {_MAX_DELAY_SECONDS} seconds, not {delay!r}")
    return timedelta(seconds=seconds)


def _new_ids(count: int) -> list[uuid.UUID]:
    """``count`` random (version 4) UUIDs, as ``uuid.uuid4()`` makes them.

    From one read of the system's random source instead of one per id: for a
    bulk enqueue that read was a fifth of the time spent building each row.
    """
    if count == 1:
        return [uuid.uuid4()]
    random_bytes = os.urandom(16 * count)
    return [
        uuid.UUID(bytes=random_bytes[start : start + 16], version=4)
        for start in range(0, 16 * count, 16)
    ]

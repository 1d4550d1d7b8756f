"""Every write to a job row goes through here: enqueue, claim, fenced completion, sweep, admin.

The worker, the admin, the django.tasks backend and ``@job`` call these
methods; nothing else issues an UPDATE on the job table. Each completion is a
named transition (``transitions``) applied only through ``_fenced``, so no
caller can forget the fence or mix two outcomes. Vendor differences are the
database driver's (``db``); this class is the same on every database.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db import IntegrityError, connections, models, transaction
from django.db.models import F
from django.utils import timezone

from . import signals
from .conf import get_settings
from .core.decide import ErrorKind as DecidedErrorKind
from .db import CLAIM_COLUMNS, ClaimedJob, DatabaseNow, claimed_from_row, driver_for
from .db import retry_on_lock_conflict as _retry_on_lock_conflict
from .enqueueing import RowMaker, delay_offset, new_ids, save_new, split_arguments
from .states import ACTIVE_STATUSES, JobStatus
from .transitions import (
    ClaimTransition,
    Completion,
    announce,
    claimed_fields,
    dead_fields,
    lease_fields,
    transition_fields,
    whole_seconds,
)

if TYPE_CHECKING:
    from .models import Job

__all__ = ["ClaimTransition", "ClaimedJob", "Completion", "JobManager", "set_eager_runner"]

#: How often an enqueue of a unique job retries when the key's holder finished
#: between our failed insert and our read (each retry needs that race again).
_UNIQUE_INSERT_ATTEMPTS = 10

#: Runs one just-enqueued job inline (``ARCATURE["EAGER"]``); installed by the app's
#: ``ready()`` so that the manager does not depend on the worker's dispatcher.
_eager_runner: Callable[[Job], Job] | None = None


def set_eager_runner(runner: Callable[[Job], Job] | None) -> None:
    global _eager_runner
    _eager_runner = runner


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
            _retry_on_lock_conflict(self.db, lambda: row.save(force_insert=True, using=self.db))
            job, created = row, True
        else:
            job, created = _retry_on_lock_conflict(self.db, lambda: self._insert_unique(row))
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
        items = [split_arguments(item) for item in arguments]
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
                driver_for(using).insert_rows(self.model, rows, varying, batch_size)

        _retry_on_lock_conflict(using, insert)
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
                    self._insert_unique(row) if row.unique_key else (save_new(row, self.db), True)
                    for row in rows
                ]

        results = _retry_on_lock_conflict(self.db, insert)
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
        if _eager_runner is None:
            raise RuntimeError(
                "ARCATURE['EAGER'] is on but no eager runner is installed: is "
                "'django_arcature' in INSTALLED_APPS (its ready() installs it)?"
            )
        return [_eager_runner(job) for job in jobs]

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
        offset = delay_offset(delay, run_at)
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
        maker = RowMaker(
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
        for job_id, (args, kwargs) in zip(new_ids(len(items)), items, strict=True):
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
        lease_seconds = whole_seconds(lease)
        if batch < 1:
            return []
        using = self.db
        driver = driver_for(using)
        picked_queues = list(queues) if queues else None

        def stamp(token: Any) -> dict[str, Any]:
            return claimed_fields(token, worker_id, lease_seconds)

        return _retry_on_lock_conflict(
            using,
            lambda: driver.claim(self.model, worker_id, lease_seconds, batch, picked_queues, stamp),
        )

    # --- fenced transitions --------------------------------------------------------

    def _fenced(self, job_id: uuid.UUID, claim_token: uuid.UUID) -> models.QuerySet[Job]:
        """The fence: this job, still running, still under this claim."""
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
        announce(self.model, completion, outcome)
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

        def operation() -> set[uuid.UUID]:
            with transaction.atomic(using=self.db):
                return {
                    job_id
                    for job_id, token in claims
                    if not self._fenced(job_id, token).update(**lease_fields(lease_seconds))
                }

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

    def _write_one(self, completion: Completion) -> ClaimTransition:
        fields = transition_fields(completion)
        return _retry_on_lock_conflict(self.db, lambda: self._apply(completion, fields))

    def complete_many(self, completions: Sequence[Completion]) -> list[ClaimTransition]:
        """Apply many fenced completions in one transaction (one commit for a batch).

        Each row is still fenced on its own id and token, and each gets its own
        UPDATED/LOST; observer events are sent after the commit, for UPDATED
        rows only.
        """
        if not completions:
            return []
        field_sets = [transition_fields(c) for c in completions]

        def operation() -> list[ClaimTransition]:
            with transaction.atomic(using=self.db):
                return [
                    ClaimTransition.from_rowcount(
                        self._fenced(c.job_id, c.claim_token).update(**fields)
                    )
                    for c, fields in zip(completions, field_sets, strict=True)
                ]

        outcomes = _retry_on_lock_conflict(self.db, operation)
        for completion, outcome in zip(completions, outcomes, strict=True):
            announce(self.model, completion, outcome)
        return outcomes

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

    # --- operator actions -----------------------------------------------------------

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
                # Through the ORM, so JSON columns arrive decoded on every database.
                row = (
                    self.using(self.db)
                    .filter(id=job_id, claim_token=token)
                    .values_list(*CLAIM_COLUMNS)
                    .get()
                )
            return claimed_from_row(row, json_decoded=True)

        return _retry_on_lock_conflict(self.db, operation)

    # --- batched completions (the worker's hot path) ------------------------------------

    def complete_batch(self, completions: Sequence[Completion]) -> list[ClaimTransition]:
        """Like :meth:`complete_many`, in one UPDATE per transition where the database can.

        Same fields (``transition_fields``), same per-row fence on id, token and
        ``status = 'running'``, same events after the commit; on PostgreSQL and
        SQLite each group of same-kind completions is a single ``UPDATE … FROM
        (VALUES …) RETURNING id`` instead of one statement per job. Elsewhere it
        is :meth:`complete_many`.
        """
        if not completions:
            return []
        driver = driver_for(self.db)
        if not driver.supports_batch_completion():
            return self.complete_many(completions)
        groups: dict[tuple[str, ...], list[tuple[uuid.UUID, uuid.UUID, dict[str, Any]]]] = {}
        for completion in completions:
            fields = transition_fields(completion)
            groups.setdefault(tuple(fields), []).append(
                (completion.job_id, completion.claim_token, fields)
            )
        size = driver.BATCH_COMPLETION_ROWS

        def operation() -> set[uuid.UUID]:
            updated: set[uuid.UUID] = set()
            with transaction.atomic(using=self.db):
                for rows in groups.values():
                    for start in range(0, len(rows), size):
                        updated |= driver.complete_batch(self.model, rows[start : start + size])
            return updated

        updated = _retry_on_lock_conflict(self.db, operation)
        outcomes = [
            ClaimTransition.UPDATED if c.job_id in updated else ClaimTransition.LOST
            for c in completions
        ]
        for completion, outcome in zip(completions, outcomes, strict=True):
            announce(self.model, completion, outcome)
        return outcomes

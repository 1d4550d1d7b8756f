"""Enqueue: inserting pending jobs, one, many or unique, in the caller's transaction."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db import DatabaseError, IntegrityError, connections, transaction

from django_arcature import signals
from django_arcature.conf import get_settings
from django_arcature.core.eager_hand_off import defer
from django_arcature.core.limits import (
    NAME_MAX_LENGTH,
    QUEUE_MAX_LENGTH,
    max_attempts_problem,
    name_problem,
    priority_problem,
    unique_key_problem,
)
from django_arcature.core.payloads import arguments_fit, ensure_payload_size
from django_arcature.db import DatabaseNow, driver_for
from django_arcature.db import retry_on_lock_conflict as _retry_on_lock_conflict
from django_arcature.db.broken_connection import discard_broken_connection
from django_arcature.db.clock import database_now
from django_arcature.enqueueing import RowMaker, delay_offset, new_ids, save_new, split_all
from django_arcature.exceptions import MalformedPayload
from django_arcature.hints import (
    committing_backend_pid,
    hint_directory,
    is_first_announcement,
    send_hints,
)
from django_arcature.registry import prepare_enqueue

from .base import JobWriter
from .bulk_rows import BulkRows
from .missing_table import add_migrate_hint, migrate_hint
from .row_insert import (
    PreparedInsert,
    RowStatements,
    insert_row,
    prepare_insert,
    preparing_cursor_class,
)

if TYPE_CHECKING:
    from django_arcature.models import Job


_UNIQUE_INSERT_ATTEMPTS = 10

#: "Now" on the database's clock, for a new row's times: the INSERT writes it.
_NOW = DatabaseNow()

#: Runs one just-enqueued job inline (``ARCATURE["EAGER"]``); installed by the app's
#: ``ready()`` so that the manager does not depend on the worker's dispatcher.
_eager_runner: Callable[[Job], Job] | None = None


def set_eager_runner(runner: Callable[[Job], Job] | None) -> None:
    global _eager_runner
    _eager_runner = runner


def eager_runner() -> Callable[[Job], Job]:
    """The installed eager runner; a clear error when none is (the app is not installed)."""
    if _eager_runner is None:
        raise RuntimeError(
            "ARCATURE['EAGER'] is on but no eager runner is installed: is "
            "'django_arcature' in INSTALLED_APPS (its ready() installs it)?"
        )
    return _eager_runner


class EnqueueWrites(JobWriter):
    """pending rows in; ``job_enqueued`` once they commit."""

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
        row, statements = self._build(
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
        using = self.db
        try:  # a try costs nothing until it catches, unlike a context manager per enqueue
            if row.unique_key is None:
                _retry_on_lock_conflict(using, lambda: insert_row(row, using, statements))
                job, created = row, True
            else:
                job, created = _retry_on_lock_conflict(
                    using, lambda: self._insert_unique(row, statements)
                )
        except DatabaseError as exc:
            add_migrate_hint(exc, self.model._meta.db_table, using)
            raise
        if not created:
            return job
        self._announce_enqueued([job], using)
        return self._run_eagerly([job])[0]

    async def aenqueue(
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
        """:meth:`enqueue` from async code, committed when it returns.

        Async code has no transaction of its own to join, so the job is inserted
        in autocommit. Called from sync code through ``async_to_sync`` (which may
        hold a transaction open), it runs :meth:`enqueue` in that thread and joins
        its transaction, as before. Otherwise, on PostgreSQL (psycopg 3) the INSERT goes on an async
        connection driven by the running event loop (:mod:`django_arcature.db.async_pg`),
        not through a worker thread as Django's async ORM does; that INSERT does
        not pass through Django's cursor, so ``execute_wrapper`` hooks and query
        logging do not see it. Elsewhere, and where the sync path must run
        (``pre_save``/``post_save`` listeners, eager mode), the whole
        :meth:`enqueue` runs in a thread (``sync_to_async``).
        """
        from asgiref.sync import sync_to_async

        options: dict[str, Any] = {
            "args": args,
            "kwargs": kwargs,
            "queue": queue,
            "priority": priority,
            "delay": delay,
            "run_at": run_at,
            "max_attempts": max_attempts,
            "unique_key": unique_key,
            "backend": backend,
        }
        using = self.db
        if not _native_async(using):
            return await sync_to_async(self.enqueue, thread_sensitive=True)(task, **options)
        row, statements = self._build(task, **options)
        prepared = prepare_insert(row, using, statements)
        if prepared is None:
            return await sync_to_async(self._insert_then_announce, thread_sensitive=True)(
                row, statements
            )
        try:
            job, created = await _ainsert(self, row, prepared)
        except DatabaseError as exc:
            add_migrate_hint(exc, self.model._meta.db_table, using)
            raise
        if created:
            await _aannounce(self.model, job, using)
        return job

    def _insert_then_announce(self, row: Job, statements: RowStatements | None) -> Job:
        """The sync path's insert and announcement for a row built in async code."""
        using = self.db
        if row.unique_key is None:
            _retry_on_lock_conflict(using, lambda: insert_row(row, using, statements))
            job, created = row, True
        else:
            job, created = _retry_on_lock_conflict(
                using, lambda: self._insert_unique(row, statements)
            )
        if created:
            self._announce_enqueued([job], using)
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
        """Insert many pending jobs of one task, in the caller's transaction if there is one.

        Each item of ``arguments`` is a sequence of positional arguments, a
        mapping of keyword arguments, or an ``(args, kwargs)`` pair. Every item is
        validated (a chunk at a time, as its rows are made) and a bad one inserts
        nothing: on PostgreSQL it aborts the COPY the rows before it went into. The
        result lines up with ``arguments``; for a ``unique`` task an item whose key
        is already held (by an older job or an earlier item) gets the holder.

        On PostgreSQL the rows go in one ``COPY``, streamed while they are made
        (:meth:`PostgreSQLDriver.stream_rows`); MySQL/MariaDB take ``batch_size``
        rows per INSERT, SQLite one prepared INSERT run for every row.
        """
        items = split_all(arguments)
        if not items:
            return []
        prepared, _, _ = self._prepare_rows(
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
        assert isinstance(prepared, BulkRows)  # not single: the rows are made later
        bulk = prepared
        if bulk.derive_key is not None:
            rows = bulk.all()
            if any(row.unique_key is not None for row in rows):
                with migrate_hint(self.model._meta.db_table, self.db):
                    return self._enqueue_many_unique(rows)
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, not {batch_size!r}")
        using = self.db
        driver = driver_for(using)
        connection = connections[using]

        def insert() -> list[Job]:
            # One statement (PostgreSQL's COPY) is a transaction of its own in autocommit:
            # no BEGIN and COMMIT round trips around it (two of a 1,000-row call's five).
            # Inside the caller's transaction a savepoint still keeps a failure from
            # spoiling it; several statements (MariaDB, SQLite) always get a transaction.
            if (
                driver.streams_in_one_statement(bulk)
                and connection.get_autocommit()
                and not connection.in_atomic_block
            ):
                return driver.stream_rows(self.model, bulk, batch_size)
            with transaction.atomic(using=using):
                return driver.stream_rows(self.model, bulk, batch_size)

        with migrate_hint(self.model._meta.db_table, using):
            rows = _retry_on_lock_conflict(using, insert)
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

    def _announce_enqueued(self, jobs: Sequence[Job], using: str | None = None) -> None:
        """Once the insert is committed (at once outside a transaction), nudge this
        host's idle workers and send ``job_enqueued``.

        An enqueue rolled back with the caller's transaction never happened, so
        neither workers nor observers are told about it.
        """
        if not jobs:
            return
        model = self.model
        if using is None:
            using = self.db
        conf = get_settings()
        hints = hint_directory(using, conf) if conf.wake_hints else None
        # The PID pairs this hint with the INSERT trigger's NOTIFY (PostgreSQL): only
        # one hint per transaction may carry it, as there is one NOTIFY per transaction.
        pairable = hints is not None and is_first_announcement(using)

        def send() -> None:
            if hints is not None:
                pid = committing_backend_pid(using) if pairable else None
                send_hints(using, hints, backend_pid=pid)
            # Asked once, not per job: a bulk enqueue's thousand sends to no receiver
            # were 0.15-0.25 ms of client CPU per 1,000 rows.
            if signals.job_enqueued.has_listeners(model):
                for job in jobs:
                    signals.job_enqueued.send(sender=model, job=job)

        transaction.on_commit(send, using=using)

    def enqueue_stored_name(self, task_name: str, *, args: Sequence[Any] = ()) -> Job:
        """Insert a pending job of ``task_name`` even if this process cannot run it.

        For names stored long before they are enqueued (a batch's callbacks), where
        a refusal would come too late to help anyone: raised inside the completion
        that fires the callback, it would abort that completion on every worker
        that claims the member again. The row goes in with only its JSON checked;
        the worker that claims it dead-letters an unknown name, or arguments its
        handler refuses, with the reason, where an operator can requeue it once
        the deploy is fixed.
        """
        row, statements = self._build(
            task_name,
            args=args,
            kwargs=None,
            queue=None,
            priority=None,
            delay=None,
            run_at=None,
            max_attempts=None,
            unique_key=None,
            backend="",
            checked=False,
        )
        using = self.db
        _retry_on_lock_conflict(using, lambda: insert_row(row, using, statements))
        self._announce_enqueued([row], using)
        return self._run_eagerly([row])[0]

    def _run_eagerly(self, jobs: list[Job]) -> list[Job]:
        """With ``ARCATURE = {"EAGER": True}``, run each new job now, in this process.

        The row is inserted and validated first, and each run goes through the
        same claim, dispatch and fenced write as a worker's, so a test sees the
        job's real end state (result, error, attempts) on the returned object.
        Jobs enqueued by a completion the eager runner is writing (a batch's
        callbacks) run just after it instead, from the eager drain
        (:mod:`django_arcature.core.eager_hand_off`), not inside its transaction.
        """
        if not jobs or not get_settings().eager:
            return jobs
        runner = eager_runner()
        if defer(job.pk for job in jobs):
            return jobs
        return [runner(job) for job in jobs]

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
        checked: bool | None = None,
    ) -> tuple[Job, RowStatements | None]:
        """Validate everything about one job and build its row (unsaved); with the
        kept INSERTs for rows built like it, if it may use them."""
        if isinstance(args, str | bytes) or not isinstance(args, Sequence):
            raise TypeError(f"args must be a list or tuple of arguments, not {args!r}")
        if kwargs is not None and not isinstance(kwargs, Mapping):
            raise TypeError(f"kwargs must be a dict of keyword arguments, not {kwargs!r}")
        rows, _, statements = self._build_rows(
            task,
            [(list(args), dict(kwargs or {}))],
            single=True,
            queue=queue,
            priority=priority,
            delay=delay,
            run_at=run_at,
            max_attempts=max_attempts,
            unique_key=unique_key,
            backend=backend,
            checked=checked,
        )
        return rows[0], statements

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
        single: bool = False,
        checked: bool | None = None,
    ) -> tuple[list[Job], tuple[str, ...], RowStatements | None]:
        """:meth:`_prepare_rows` with every row made an instance (unsaved)."""
        rows, varying, statements = self._prepare_rows(
            task,
            items,
            queue=queue,
            priority=priority,
            delay=delay,
            run_at=run_at,
            max_attempts=max_attempts,
            unique_key=unique_key,
            backend=backend,
            single=single,
            checked=checked,
        )
        return (rows.all() if isinstance(rows, BulkRows) else rows), varying, statements

    def _prepare_rows(
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
        single: bool = False,
        checked: bool | None = None,
    ) -> tuple[list[Job] | BulkRows, tuple[str, ...], RowStatements | None]:
        """Validate every item's arguments, then the options once, and build the rows (unsaved).

        ``items`` are ``(args, kwargs)`` pairs, already a list and a dict each.
        Settings are read and the options checked once per call, so a bulk
        enqueue pays per row only for the argument check, an id, a clock reading
        and the row itself. Returns the rows (for many, a :class:`BulkRows` that
        makes them on demand, chunk by chunk), the names of the fields that
        differ between them (everything else is the same in every row) and, for
        ``single``, the kept INSERTs of rows built like these (None when a
        ``pre_init``/``post_init`` receiver could have changed a value).
        """
        if checked is None:
            checked = not backend
        plan = prepare_enqueue(task, *items[0], checked=checked)
        conf = get_settings()
        limit = conf.max_payload_bytes

        def check(start: int, stop: int) -> None:
            """Items ``start`` to ``stop``: each one's arguments, then each one's size
            (the first item's arguments were checked by ``prepare_enqueue`` above)."""
            if plan.spec is None:  # the django.tasks backend's rows: JSON checks only
                for args, kwargs in items[max(start, 1) : stop]:
                    prepare_enqueue(task, args, kwargs, checked=checked)
            else:  # the task is resolved; each further item needs only its argument check
                validate = plan.spec.validate
                # Plain positional values that surely fit skip the full check (which
                # binds the signature: most of a bulk enqueue's Python work per row).
                fits = plan.spec.fits_plainly
                for args, kwargs in items[max(start, 1) : stop]:
                    if fits is not None and not kwargs and fits(args):
                        continue
                    try:
                        validate(args, kwargs)
                    except MalformedPayload as exc:  # worded as prepare_enqueue words it
                        raise MalformedPayload(f"cannot enqueue {plan.name}: {exc}") from None
            for args, kwargs in items[start:stop]:
                if not arguments_fit(args, kwargs, limit):  # then measured exactly
                    ensure_payload_size(
                        {"args": args, "kwargs": kwargs},
                        limit,
                        f"cannot enqueue {plan.name}: its arguments",
                    )

        # Many items are checked a chunk at a time as their rows are made (BulkRows), so
        # on PostgreSQL the server stores one chunk while the next is checked; a bad
        # item still inserts nothing (the COPY is aborted) and raises what it raised.
        # A tracer is told about the call (jobs_enqueuing) only once every item passed.
        deferred = not single and not signals.jobs_enqueuing.has_listeners(self.model)
        if not deferred:
            check(0, len(items))
        try:
            offset = delay_offset(delay, run_at)
            attempts_allowed = next(
                value
                for value in (max_attempts, plan.max_attempts, conf.max_attempts)
                if value is not None
            )
            if priority is not None and (
                isinstance(priority, bool) or not isinstance(priority, int)
            ):
                raise TypeError(f"priority must be an int, not {priority!r}")
            # An empty queue name is refused, not replaced by the default.
            queue_name = queue if queue is not None else (plan.queue or conf.default_queue)
            problem = (
                max_attempts_problem(attempts_allowed)
                or (priority_problem(priority) if priority is not None else None)
                or name_problem(queue_name, "queue", QUEUE_MAX_LENGTH)
                or (unique_key_problem(unique_key) if unique_key is not None else None)
                or (name_problem(plan.name, "the task name", NAME_MAX_LENGTH) if backend else None)
            )
            if problem:
                raise ValueError(problem)
        except (TypeError, ValueError):
            if deferred:  # a bad item is reported before a bad option, as always
                check(0, len(items))
            raise
        traced = _trace_context(self.model, plan.name, queue_name, len(items))
        maker, statements = _row_maker(
            self.model,
            traced,
            task_name=plan.name,
            queue=queue_name,
            priority=plan.priority if priority is None else priority,
            attempts=0,
            max_attempts=attempts_allowed,
            lease_seconds=conf.lease_seconds,
            backend=backend,
        )
        derive_key = plan.unique and unique_key is None
        ids = new_ids(1 if single else 0)
        if single:
            # One row: its times are the database's clock, written by the INSERT itself.
            [(args, kwargs)] = items
            delay_seconds = offset.total_seconds() if offset is not None else 0.0
            plain = maker.plain
            row = maker.make(
                ids[0],
                {"args": args, "kwargs": kwargs},
                run_at
                if run_at is not None
                else (DatabaseNow(delay_seconds) if delay_seconds else _NOW),
                _NOW,
                plan.unique_key(args, kwargs) if derive_key else unique_key,
                plain,
            )
            return [row], maker.varying, statements if plain else None
        bulk = self._bulk(maker, items, offset, run_at, plan, derive_key, unique_key)
        bulk.check = check if deferred else None
        return bulk, bulk.varying, None

    def _bulk(
        self,
        maker: RowMaker,
        items: Sequence[tuple[list[Any], dict[str, Any]]],
        offset: timedelta | None,
        run_at: datetime | None,
        plan: Any,
        derive_key: bool,
        unique_key: str | None,
    ) -> BulkRows:
        """Many rows: the database's clock read once, each chunk of rows offset from it
        by the time spent making the rows before it (its rows a microsecond apart), so
        the rows become available (and are claimed) in the order given, as if enqueued
        one by one."""
        varying = maker.varying
        if not derive_key:  # one key (or none) for every row
            varying = tuple(name for name in varying if name != "unique_key")
        # The clock read is the bulk path's first statement, before the insert's own
        # check (``retry_on_lock_conflict``); a single row reads nothing before it.
        discard_broken_connection(connections[self.db])
        return BulkRows(
            self.model,
            maker,
            items,
            db_now=database_now(self.db),
            offset=offset,
            run_at=run_at,
            derive_key=plan.unique_key if derive_key else None,
            unique_key=None if derive_key else unique_key,
            varying=varying,
        )

    def _insert_unique(self, row: Job, statements: RowStatements | None = None) -> tuple[Job, bool]:
        """Insert ``row``, or return the live job that already holds its unique key.

        The database's unique constraint decides, not a check-then-insert, so two
        racing enqueues cannot both win; the loser's insert fails under its own
        savepoint and it reads the winner. If the holder finishes between that
        failure and the read, the key is free again and the insert is retried.
        Returns ``(job, created)``.
        """
        error: IntegrityError | None = None
        assert row.unique_key is not None
        with driver_for(self.db).one_inserter_per_key(row.unique_key):
            for _ in range(_UNIQUE_INSERT_ATTEMPTS):
                try:
                    with transaction.atomic(using=self.db):
                        insert_row(row, self.db, statements)
                except IntegrityError as exc:
                    error = exc
                    existing = self.using(self.db).filter(unique_key=row.unique_key).first()
                    if existing is not None:
                        return existing, False
                    continue
                return row, True
        assert error is not None
        raise error


#: Row makers (and their kept INSERTs) per model and shared values: a one-by-one
#: enqueue of the same job reuses them instead of building them afresh per call.
_makers: dict[tuple[Hashable, ...], tuple[RowMaker, RowStatements]] = {}

#: How many row makers are kept (one per task, queue, priority and so on in use).
_MAKERS_KEPT = 256


def _row_maker(
    model: type[Job], traced: dict[str, str], **shared: Hashable
) -> tuple[RowMaker, RowStatements | None]:
    """The row maker for rows with these shared values, kept while nothing per call
    (a trace context) is among them; with its kept INSERTs."""
    if traced:
        return RowMaker(model, **shared, trace_context=traced), None
    key = (model, *shared.items())
    found = _makers.get(key)
    if found is None:
        maker = RowMaker(model, **shared)
        if len(_makers) >= _MAKERS_KEPT:
            _makers.clear()
        found = _makers[key] = (maker, RowStatements(maker.varying))
    return found


def _trace_context(model: type[Any], task_name: str, queue: str, count: int) -> dict[str, str]:
    """What ``jobs_enqueuing`` receivers (tracing) want stored with this call's jobs."""
    if not signals.jobs_enqueuing.receivers:  # nobody connected: skip the sender lookup
        return {}
    carrier: dict[str, str] = {}
    for _receiver, response in signals.notify(
        signals.jobs_enqueuing, model, task_name=task_name, queue=queue, count=count
    ):
        if isinstance(response, dict):
            carrier.update(response)
    return carrier


def _native_async(using: str) -> bool:
    """Whether :meth:`EnqueueWrites.aenqueue` may insert on the event loop's own
    connection: PostgreSQL under psycopg 3, with nothing that needs the sync path."""
    from asgiref.sync import AsyncToSync
    from django.db import connections

    from django_arcature.db.async_pg import supports_native_async

    if not supports_native_async(using) or get_settings().eager:
        return False
    # Under async_to_sync, sync code is waiting on this coroutine and may hold a
    # transaction open (a test case, a sync view calling async code): the sync path,
    # run in that thread, joins it as enqueue() would; a connection of our own could not.
    if getattr(AsyncToSync.executors, "current", None) is not None:
        return False
    return not connections[using].in_atomic_block


async def _ainsert(writer: EnqueueWrites, row: Job, prepared: PreparedInsert) -> tuple[Job, bool]:
    """INSERT on the loop's connection; for a unique key, the live holder if it has one.

    Each INSERT is its own transaction (autocommit), so one that loses its key
    leaves nothing behind; the holder is then read, and if it finished meanwhile
    (the key is free again) the insert is tried again, as :meth:`_insert_unique` does.
    """
    from asgiref.sync import sync_to_async

    for _ in range(_UNIQUE_INSERT_ATTEMPTS):
        try:
            returned = await _aexecute(prepared)
        except IntegrityError:
            if row.unique_key is None:
                raise
            holder = await sync_to_async(_holder, thread_sensitive=True)(writer, row.unique_key)
            if holder is not None:
                return holder, False
            continue
        prepared.finish(row, returned)
        return row, True
    raise IntegrityError(f"unique key {row.unique_key!r}: still contended after retries")


def _holder(writer: EnqueueWrites, key: str) -> Job | None:
    return writer.using(writer.db).filter(unique_key=key).first()


async def _aexecute(prepared: PreparedInsert) -> Any:
    """One INSERT on this loop's connection, retried after a lock conflict; psycopg's
    errors become Django's (IntegrityError, DataError ...), as through Django's cursor."""
    import asyncio
    import random

    import psycopg

    from django_arcature.db import async_pg
    from django_arcature.db.conflicts import LOCK_RETRY_ATTEMPTS, is_lock_conflict

    using, connection = prepared.using, prepared.connection
    # Where the project allows prepared statements but binds on the client, the INSERT
    # goes through a server-binding cursor (which psycopg prepares), as on the sync path.
    preparing = preparing_cursor_class(connection) is not None
    for attempt in range(1, LOCK_RETRY_ATTEMPTS + 1):
        try:
            try:
                conn = await async_pg.async_connection(using)
                try:
                    if preparing:
                        cursor = await psycopg.AsyncCursor(conn).execute(
                            prepared.sql, prepared.params
                        )
                    else:
                        cursor = await conn.execute(prepared.sql, prepared.params)
                    return await cursor.fetchone() if prepared.returns else None
                except psycopg.OperationalError:
                    await async_pg.discard(using)  # the connection may be gone
                    raise
            except psycopg.Error as exc:
                raise async_pg.as_django_error(exc) from exc
        except DatabaseError as exc:
            if attempt == LOCK_RETRY_ATTEMPTS or not is_lock_conflict(exc, connection.vendor):
                raise
            await asyncio.sleep(min(0.005 * 2**attempt, 0.5) * (0.5 + random.random()))
    raise AssertionError("unreachable")  # pragma: no cover


async def _aannounce(model: type[Job], job: Job, using: str) -> None:
    """What :meth:`EnqueueWrites._announce_enqueued` does once the row is committed:
    nudge this host's idle workers, then ``job_enqueued`` (sync receivers run in a
    thread, as ``Signal.asend`` runs them)."""
    conf = get_settings()
    if conf.wake_hints:
        send_hints(using, hint_directory(using, conf))
    await signals.job_enqueued.asend(sender=model, job=job)

"""Enqueue: inserting pending jobs, one, many or unique, in the caller's transaction."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db import IntegrityError, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import DateField, Field
from django.db.models.signals import post_save, pre_save
from django.utils import timezone

from django_arcature import signals
from django_arcature.conf import get_settings
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
from django_arcature.db.clock import database_now, now_sql
from django_arcature.enqueueing import RowMaker, delay_offset, new_ids, save_new, split_arguments
from django_arcature.hints import hint_directory, send_hints

from .base import JobWriter

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
        using = self.db
        if row.unique_key is None:
            _retry_on_lock_conflict(using, lambda: _insert_row(row, using))
            job, created = row, True
        else:
            job, created = _retry_on_lock_conflict(using, lambda: self._insert_unique(row))
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
        """Once the insert is committed (at once outside a transaction), nudge this
        host's idle workers and send ``job_enqueued``.

        An enqueue rolled back with the caller's transaction never happened, so
        neither workers nor observers are told about it.
        """
        if not jobs:
            return
        model = self.model
        using = self.db
        conf = get_settings()
        hints = hint_directory(using, conf) if conf.wake_hints else None

        def send() -> None:
            if hints is not None:
                send_hints(using, hints)
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
            single=True,
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
        single: bool = False,
    ) -> tuple[list[Job], tuple[str, ...]]:
        """Validate every item's arguments, then the options once, and build the rows (unsaved).

        ``items`` are ``(args, kwargs)`` pairs, already a list and a dict each.
        Settings are read and the options checked once per call, so a bulk
        enqueue pays per row only for the argument check, an id, a clock reading
        and the row itself. Returns the rows and the names of the fields that
        differ between them (everything else is the same in every row).
        """
        from django_arcature.exceptions import MalformedPayload
        from django_arcature.registry import prepare_enqueue

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
        limit = conf.max_payload_bytes
        for args, kwargs in items:
            if not arguments_fit(args, kwargs, limit):  # then measured exactly
                ensure_payload_size(
                    {"args": args, "kwargs": kwargs},
                    limit,
                    f"cannot enqueue {plan.name}: its arguments",
                )
        offset = delay_offset(delay, run_at)
        attempts_allowed = next(
            value
            for value in (max_attempts, plan.max_attempts, conf.max_attempts)
            if value is not None
        )
        if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)):
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
        traced = _trace_context(self.model, plan.name, queue_name, len(items))
        maker = RowMaker(
            self.model,
            task_name=plan.name,
            queue=queue_name,
            priority=plan.priority if priority is None else priority,
            attempts=0,
            max_attempts=attempts_allowed,
            lease_seconds=conf.lease_seconds,
            backend=backend,
            **({"trace_context": traced} if traced else {}),
        )
        derive_key = plan.unique and unique_key is None
        ids = new_ids(len(items))
        if single:
            # One row: its times are the database's clock, written by the INSERT itself.
            [(args, kwargs)] = items
            delay_seconds = offset.total_seconds() if offset is not None else 0.0
            row = maker.make(
                ids[0],
                {"args": args, "kwargs": kwargs},
                run_at
                if run_at is not None
                else (DatabaseNow(delay_seconds) if delay_seconds else _NOW),
                _NOW,
                plan.unique_key(args, kwargs) if derive_key else unique_key,
            )
            return [row], maker.varying
        # Many rows: the database's clock read once, each row offset from it by the time
        # spent building the rows before it, so the rows become available (and are
        # claimed) in the order given, as if enqueued one by one.
        db_now = database_now(self.db)
        started = timezone.now()
        rows = []
        for job_id, (args, kwargs) in zip(ids, items, strict=True):
            now = db_now + (timezone.now() - started)
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
                    _insert_row(row, self.db)
            except IntegrityError as exc:
                error = exc
                existing = self.using(self.db).filter(unique_key=row.unique_key).first()
                if existing is not None:
                    return existing, False
                continue
            return row, True
        assert error is not None
        raise error


class _InsertShape:
    """What one model's single-row INSERT needs that does not change between calls."""

    def __init__(self, model: type[Job], connection: BaseDatabaseWrapper) -> None:
        ops = connection.ops
        meta = model._meta
        self.table = ops.quote_name(meta.db_table)
        #: (field, its quoted column, how a plain value is written: "int" as a literal,
        #: "text" as a literal when empty, "json" as a literal when an empty list or
        #: dict, else a parameter). Fewer parameters: less for the driver to quote.
        self.fields: list[tuple[Field[Any, Any], str, str]] = []
        for field in meta.concrete_fields:
            internal = field.get_internal_type()
            if internal in ("IntegerField", "SmallIntegerField", "BigIntegerField"):
                kind = "int"
            elif internal in ("CharField", "TextField"):
                kind = "text"
            elif internal == "JSONField":
                kind = "json"
            else:
                kind = ""
            self.fields.append((field, ops.quote_name(field.column or field.attname), kind))
        #: Nullable columns without a database default: a NULL is left to the table.
        self.omit_null = {
            field.attname
            for field, _, _ in self.fields
            if field.null and not field.has_db_default()
        }
        self.returns = connection.features.can_return_columns_from_insert
        self.converters = {}
        for field, _, _ in self.fields:
            col = field.get_col(meta.db_table)
            found = [*ops.get_db_converters(col), *field.get_db_converters(connection)]
            self.converters[field.attname] = (col, found)
        # A field whose pre_save hook does more than read the attribute (auto_now, a
        # custom field) keeps the ORM's path, which calls it.
        self.plain = all(
            type(field).pre_save is Field.pre_save
            or (isinstance(field, DateField) and not (field.auto_now or field.auto_now_add))
            for field, _, _ in self.fields
        )


#: Values that are never an SQL expression (checked first: most of a row's values).
_PLAIN_TYPES = frozenset({str, int, float, bool, dict, list, uuid.UUID, datetime})

#: Empty text, and the JSON of an empty list or dict, as SQL literals (what the
#: fields would send as parameters).
_EMPTY: dict[type, str] = {str: "''", list: "'[]'", dict: "'{}'"}
_EMPTY_KIND: dict[type, str] = {str: "text", list: "json", dict: "json"}

#: Per (database alias, model): its INSERT's fixed part.
_shapes: dict[tuple[str, type[Any]], _InsertShape] = {}


def _insert_row(row: Job, using: str) -> None:
    """INSERT one new row and read back the clock fields it stamped, in one round trip.

    What ``row.save(force_insert=True)`` does for this table, without the ORM's
    general INSERT compiler, which was most of a one-by-one enqueue's Python time.
    The SQL is the same: every column, each value prepared by its own field, the
    database's clock (``DatabaseNow``) written by the INSERT itself and returned
    with ``RETURNING`` (read back right after where the database cannot return
    it). It goes through Django's cursor, so query logging, execute wrappers and
    error wrapping apply as they do to any query. While anyone listens to
    ``pre_save``/``post_save`` for the model, the row is saved by the ORM, which
    sends them.
    """
    if not _insert_directly(row, using):
        save_new(row, using)  # the ORM's path: it sends the signals and compiles expressions
    _read_clock_fields(row, using)


def _insert_directly(row: Job, using: str) -> bool:
    """The INSERT itself; False (nothing sent) where the ORM's ``save()`` must do it."""
    model = type(row)
    if pre_save.has_listeners(model) or post_save.has_listeners(model):
        return False
    connection = connections[using]
    shape = _shapes.get((using, model))
    if shape is None:
        shape = _shapes[(using, model)] = _InsertShape(model, connection)
    if not shape.plain:
        return False
    values = row.__dict__
    vendor = connection.vendor
    omit_null = shape.omit_null
    columns: list[str] = []
    slots: list[str] = []
    params: list[Any] = []
    stamped: list[tuple[Field[Any, Any], str]] = []
    for field, column, kind in shape.fields:
        value = values[field.attname]
        if value is None:
            if field.attname in omit_null:
                continue
            slot = "NULL"
        elif isinstance(value, DatabaseNow):
            slot = now_sql(vendor, value.seconds)
            stamped.append((field, column))
        elif type(value) not in _PLAIN_TYPES and hasattr(value, "resolve_expression"):
            return False  # another expression: the ORM compiles it (nothing sent yet)
        elif kind == "int" and type(value) is int:
            slot = str(value)  # an int's own digits: nothing to quote
        elif _EMPTY_KIND.get(type(value)) == kind and not value:
            slot = _EMPTY[type(value)]
        else:
            slot = "%s"
            params.append(field.get_db_prep_save(value, connection))
        columns.append(column)
        slots.append(slot)
    sql = f"INSERT INTO {shape.table} ({', '.join(columns)}) VALUES ({', '.join(slots)})"
    if stamped and shape.returns:
        # Spelled out rather than through the backend's helper, which Django 6.0 renamed.
        returned_columns = ", ".join(column for _, column in stamped)
        sql = f"{sql} RETURNING {returned_columns}"
    with transaction.mark_for_rollback_on_error(using), connection.cursor() as cursor:
        cursor.execute(sql, params)
        returned = cursor.fetchone() if stamped and shape.returns else None
    row._state.adding = False
    row._state.db = using
    if returned is None:
        return True  # the database cannot return them: the caller reads them back
    for (field, _), value in zip(stamped, returned, strict=True):
        col, converters = shape.converters[field.attname]
        for convert in converters:
            value = convert(value, col, connection)
        values[field.attname] = value
    return True


def _read_clock_fields(job: Job, using: str) -> None:
    """Replace the ``DatabaseNow`` values an INSERT wrote with the times it stored.

    Where the database returns them from the INSERT (PostgreSQL, SQLite and MariaDB
    on Django 6), that is already done; elsewhere they are read back.
    """
    pending = [
        name
        for name in ("available_at", "created_at")
        if isinstance(getattr(job, name), DatabaseNow)
    ]
    if pending:
        job.refresh_from_db(using=using, fields=pending)


def _trace_context(model: type[Any], task_name: str, queue: str, count: int) -> dict[str, str]:
    """What ``jobs_enqueuing`` receivers (tracing) want stored with this call's jobs."""
    carrier: dict[str, str] = {}
    for _receiver, response in signals.notify(
        signals.jobs_enqueuing, model, task_name=task_name, queue=queue, count=count
    ):
        if isinstance(response, dict):
            carrier.update(response)
    return carrier

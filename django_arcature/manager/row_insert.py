"""One new job row's INSERT, without the ORM's general INSERT compiler.

A one-by-one enqueue is one INSERT, and the ORM's compiler, run afresh for
every call, was most of its Python time. Here the statement for a row is
worked out once per *shape* (which columns are sent, which are written as
literals, which are the database's clock) and kept: the rows one
:class:`~django_arcature.enqueueing.RowMaker` builds share every value but a
few per-row fields, so for them only those few values are prepared per call.

The SQL is what ``save(force_insert=True)`` sends, minus the NULLs the table
fills in itself: each value prepared by its own field, the database's clock
(``DatabaseNow``) written by the INSERT and returned with ``RETURNING`` (read
back right after where the database cannot return it). It goes through
Django's cursor, so the connection's own binding mode (and with it psycopg's
prepared statements, where a project turned them on), query logging, execute
wrappers and error wrapping apply as they do to any query.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import DateField, Field
from django.db.models.signals import post_save, pre_save

from django_arcature.db import DatabaseNow
from django_arcature.db.clock import now_sql
from django_arcature.enqueueing import save_new

if TYPE_CHECKING:
    from django_arcature.models import Job

__all__ = [
    "PreparedInsert",
    "RowStatements",
    "insert_row",
    "prepare_insert",
    "preparing_cursor_class",
]

#: Values that are never an SQL expression (checked first: most of a row's values).
_PLAIN_TYPES = frozenset({str, int, float, bool, dict, list, uuid.UUID, datetime})

#: Text written into the SQL as a literal where it is the same for every row (a task
#: or queue name, usually): nothing in it that any dialect or quoting mode reads
#: differently (no quote, backslash, percent sign, space or non-ASCII character).
#: Anything else is a parameter.
_PLAIN_TEXT = re.compile(r"[A-Za-z0-9_.:/@+-]{1,100}")

#: Empty text, and the JSON of an empty list or dict, as SQL literals (what the
#: fields would send as parameters).
_EMPTY: dict[type, str] = {str: "''", list: "'[]'", dict: "'{}'"}
_EMPTY_KIND: dict[type, str] = {str: "text", list: "json", dict: "json"}

#: How many statements one :class:`RowStatements` keeps (one per alias and row
#: shape; a delay is part of the SQL, so many different delays make many shapes).
_STATEMENTS_KEPT = 64


class _InsertShape:
    """What one model's single-row INSERT needs on one database, whatever the row."""

    def __init__(self, model: type[Job], connection: BaseDatabaseWrapper) -> None:
        ops = connection.ops
        meta = model._meta
        self.vendor = connection.vendor
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


def preparing_cursor_class(connection: BaseDatabaseWrapper) -> type[Any] | None:
    """Django's server-binding psycopg cursor, where the project allows prepared
    statements on this connection but binds parameters on the client; else None.

    A project that sets ``OPTIONS["prepare_threshold"]`` on a PostgreSQL alias says
    its connections may hold prepared statements (no transaction-mode pooler in the
    way), yet with Django's default client-side binding psycopg never prepares
    anything. The INSERT then goes through a server-binding cursor of the same
    connection, wrapped by Django as any cursor is (execute wrappers, query logging,
    error wrapping), so psycopg prepares it after that many executions and the
    server no longer parses and plans it per enqueue. With ``server_side_binding``
    Django's own cursor prepares already; without the option (Django's default)
    nothing changes, so PgBouncer in transaction mode keeps working. Read per call
    (two lookups): a test may change the options of a closed connection.
    """
    if connection.vendor != "postgresql":
        return None
    options = connection.settings_dict.get("OPTIONS") or {}
    if options.get("prepare_threshold") is None or options.get("server_side_binding") is True:
        return None
    global _server_binding_cursor
    if _server_binding_cursor is None:
        from django.db.backends.postgresql.psycopg_any import is_psycopg3

        if not is_psycopg3:
            return None
        from django.db.backends.postgresql.base import ServerBindingCursor

        _server_binding_cursor = ServerBindingCursor
    return _server_binding_cursor


_server_binding_cursor: type[Any] | None = None


#: Per (database alias, model): its INSERT's fixed part.
_shapes: dict[tuple[str, type[Any]], _InsertShape] = {}


def _shape(model: type[Job], using: str, connection: BaseDatabaseWrapper) -> _InsertShape:
    shape = _shapes.get((using, model))
    if shape is None or shape.vendor != connection.vendor:
        shape = _shapes[(using, model)] = _InsertShape(model, connection)
    return shape


class _Statement:
    """One row shape's INSERT: its SQL, the parameters, and which of them each row
    fills in (``(position, attname, field)``), and the columns it stamps."""

    __slots__ = ("params", "per_row", "sql", "stamped")

    def __init__(
        self,
        sql: str,
        params: list[Any],
        per_row: list[tuple[int, str, Field[Any, Any]]],
        stamped: list[Field[Any, Any]],
    ) -> None:
        self.sql = sql
        self.params = params
        self.per_row = per_row
        self.stamped = stamped


class RowStatements:
    """The INSERTs of rows that share every value outside ``per_row`` (one
    :class:`~django_arcature.enqueueing.RowMaker`'s rows), one per database alias
    and per kind of the per-row values (a NULL is left out, the database's clock
    with its offset is written into the SQL)."""

    def __init__(self, per_row: tuple[str, ...]) -> None:
        self.per_row = per_row
        self._by_key: dict[tuple[object, ...], _Statement] = {}

    def key(self, using: str, values: dict[str, Any]) -> tuple[object, ...]:
        """What decides the SQL for a row with these ``values``."""
        return (using, *map(_kind, map(values.__getitem__, self.per_row)))

    def get(self, key: tuple[object, ...]) -> _Statement | None:
        return self._by_key.get(key)

    def keep(self, key: tuple[object, ...], statement: _Statement) -> None:
        if len(self._by_key) >= _STATEMENTS_KEPT:
            self._by_key.clear()
        self._by_key[key] = statement


def _kind(value: Any) -> object:
    """A per-row value as far as the SQL depends on it."""
    if value is None:
        return None
    if isinstance(value, DatabaseNow):
        return ("now", value.seconds)
    return type(value)


def insert_row(row: Job, using: str, statements: RowStatements | None = None) -> None:
    """INSERT one new row and read back the clock fields it stamped, in one round trip.

    ``statements`` are the kept INSERTs of the rows built like this one (by the
    same row maker, without ``pre_init``/``post_init`` receivers that could have
    changed a value): then only the row's own values are prepared. While anyone
    listens to ``pre_save``/``post_save`` for the model, the row is saved by the
    ORM, which sends them.
    """
    if not _insert_directly(row, using, statements):
        save_new(row, using)  # the ORM's path: it sends the signals and compiles expressions
    _read_clock_fields(row, using)


def _has_listeners(model: type[Job]) -> bool:
    # ``receivers`` first: with nobody connected at all, the full lookup is skipped.
    return bool(
        (pre_save.receivers and pre_save.has_listeners(model))
        or (post_save.receivers and post_save.has_listeners(model))
    )


def _insert_directly(row: Job, using: str, statements: RowStatements | None) -> bool:
    """The INSERT itself; False (nothing sent) where the ORM's ``save()`` must do it."""
    prepared = prepare_insert(row, using, statements)
    if prepared is None:
        return False  # an expression the ORM compiles, or listeners (nothing sent yet)
    connection = prepared.connection
    # What transaction.mark_for_rollback_on_error() does, without a generator per call.
    try:
        cursor_class = preparing_cursor_class(connection)
        kept = _kept_cursor(connection, cursor_class)
        if kept is not None:
            kept.execute(prepared.sql, prepared.params)
            returned = kept.fetchone() if prepared.returns else None
        else:
            with _cursor(connection, cursor_class) as cursor:
                cursor.execute(prepared.sql, prepared.params)
                returned = cursor.fetchone() if prepared.returns else None
    except Exception:
        if connection.in_atomic_block:
            connection.needs_rollback = True
        raise
    prepared.finish(row, returned)
    return True


def _cursor(connection: BaseDatabaseWrapper, cursor_class: type[Any] | None) -> Any:
    """Django's cursor, or (``cursor_class``) one of that class on the same connection,
    opened and wrapped the way ``connection.cursor()`` opens and wraps its own."""
    if cursor_class is None or _cursor_replaced(connection):
        return connection.cursor()
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    with connection.wrap_database_errors:
        return connection._prepare_cursor(cursor_class(connection.connection))  # type: ignore[attr-defined]


def _cursor_replaced(connection: BaseDatabaseWrapper) -> bool:
    """Whether something replaced ``cursor()`` on this connection wrapper itself.

    Django's test cases do, for every alias a test does not list in ``databases``
    (the replacement raises "Database queries to 'jobs' are not allowed in this
    test"); so do SQL-recording tools. A cursor made around it (kept, or of a
    preparing class) would slip past them: on an open connection such an INSERT was
    neither refused nor inside the test's transaction, so the job stayed in the test
    database and the next test's ``drain()`` ran it. Then the INSERT goes through
    ``connection.cursor()``, which does what the replacement says. Once a test case
    has removed its guard the wrapper keeps the class's own method as an attribute
    (Django puts the bound method back), which is not a replacement.
    """
    own = connection.__dict__.get("cursor")
    return own is not None and getattr(own, "__func__", None) is not type(connection).cursor


#: Where a PostgreSQL connection wrapper keeps its single-row INSERT's psycopg cursor.
_KEPT_CURSOR = "_arcature_insert_cursor"


def _kept_cursor(connection: BaseDatabaseWrapper, cursor_class: type[Any] | None) -> Any:
    """On PostgreSQL, Django's wrapper around a psycopg cursor kept on ``connection``
    for its single-row INSERTs; elsewhere None (a fresh ``connection.cursor()``).

    A one-by-one enqueue opened and closed a cursor per call: a psycopg cursor with
    its own adapter map (whose dumpers it then looked up again) and Django's time
    zone check on it. Only the psycopg cursor is kept; every call still does what
    ``connection.cursor()`` does around it: the health check, ``ensure_connection``
    (which also refuses a call from async code), and ``_prepare_cursor``, which
    checks the thread and wraps the cursor in Django's (debug) wrapper, so execute
    wrappers, query logging, error wrapping and the broken-transaction check see
    every INSERT as before. The cursor is made again when anything it was made from
    changed: the psycopg connection (reconnected), the cursor class (``OPTIONS``), or
    the time zone its timestamps are read in. Keeping the bare cursor, not Django's
    wrapper (which holds the connection wrapper), adds no reference cycle. Only on
    PostgreSQL, where psycopg has read the whole result when ``execute`` returns:
    elsewhere an unclosed cursor may keep its statement open (SQLite) or its result
    unread (MySQL).
    """
    if connection.vendor != "postgresql" or _cursor_replaced(connection):
        return None
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    raw = connection.connection
    timezone = connection.timezone
    kept = connection.__dict__.get(_KEPT_CURSOR)
    if kept is None or kept[0] is not raw or kept[1] is not cursor_class or kept[2] is not timezone:
        with connection.wrap_database_errors:
            made = connection.create_cursor() if cursor_class is None else cursor_class(raw)
        kept = connection.__dict__[_KEPT_CURSOR] = (raw, cursor_class, timezone, made)
    return connection._prepare_cursor(kept[3])  # type: ignore[attr-defined]


class PreparedInsert:
    """One row's INSERT, ready to send on any connection to the database, and how to
    bring back into the row what it stamped."""

    __slots__ = ("connection", "params", "returns", "shape", "sql", "statement", "using")

    def __init__(
        self,
        shape: _InsertShape,
        statement: _Statement,
        params: list[Any],
        using: str,
        connection: BaseDatabaseWrapper,
    ) -> None:
        self.shape = shape
        self.statement = statement
        self.sql = statement.sql
        self.params = params
        self.returns = bool(statement.stamped) and shape.returns
        self.using = using
        self.connection = connection

    def finish(self, row: Job, returned: Sequence[Any] | None) -> None:
        """Mark ``row`` saved; store the stamped values the INSERT returned (if any)."""
        row._state.adding = False
        row._state.db = self.using
        if returned is None:
            return  # nothing stamped, or the database cannot return it: read back later
        values = row.__dict__
        for field, value in zip(self.statement.stamped, returned, strict=True):
            col, converters = self.shape.converters[field.attname]
            for convert in converters:
                value = convert(value, col, self.connection)
            values[field.attname] = value


def prepare_insert(
    row: Job, using: str, statements: RowStatements | None = None
) -> PreparedInsert | None:
    """The SQL and parameters of ``row``'s INSERT; None where only the ORM's ``save()``
    may write it (``pre_save``/``post_save`` listeners, a custom field, an expression).
    Touches no database."""
    model = type(row)
    if _has_listeners(model):
        return None
    connection = connections[using]
    shape = _shape(model, using, connection)
    if not shape.plain:
        return None
    values = row.__dict__
    if statements is None:
        statement = _compile(shape, values, (), connection)
    else:
        key = statements.key(using, values)
        statement = statements.get(key)
        if statement is None:
            statement = _compile(shape, values, statements.per_row, connection)
            if statement is not None:
                statements.keep(key, statement)
    if statement is None:
        return None
    params = statement.params
    if statement.per_row:
        params = params.copy()
        for index, attname, field in statement.per_row:
            params[index] = field.get_db_prep_save(values[attname], connection)
    return PreparedInsert(shape, statement, params, using, connection)


def _compile(
    shape: _InsertShape,
    values: dict[str, Any],
    per_row: tuple[str, ...],
    connection: BaseDatabaseWrapper,
) -> _Statement | None:
    """The INSERT for a row like ``values``; the fields named in ``per_row`` are left as
    parameters each row fills in (unless NULL or the database's clock, which the SQL
    says itself). None where the ORM must write the row: a value is another expression.
    """
    omit_null = shape.omit_null
    columns: list[str] = []
    slots: list[str] = []
    params: list[Any] = []
    per_row_slots: list[tuple[int, str, Field[Any, Any]]] = []
    stamped: list[tuple[Field[Any, Any], str]] = []
    for field, column, kind in shape.fields:
        attname = field.attname
        value = values[attname]
        if value is None:
            if attname in omit_null:
                continue
            slot = "NULL"
        elif isinstance(value, DatabaseNow):
            slot = now_sql(shape.vendor, value.seconds)
            stamped.append((field, column))
        elif type(value) not in _PLAIN_TYPES and hasattr(value, "resolve_expression"):
            return None
        elif attname in per_row:
            slot = "%s"
            per_row_slots.append((len(params), attname, field))
            params.append(None)
        elif kind == "int" and type(value) is int:
            slot = str(value)  # an int's own digits: nothing to quote
        elif _EMPTY_KIND.get(type(value)) == kind and not value:
            slot = _EMPTY[type(value)]
        else:
            prepared = field.get_db_prep_save(value, connection)
            # A str subclass (a choices enum such as the status) is sent as its text.
            text = str.__str__(prepared) if isinstance(prepared, str) else None
            if text is not None and _PLAIN_TEXT.fullmatch(text):
                slot = f"'{text}'"  # the same text in every dialect and quoting mode
            else:
                slot = "%s"
                params.append(prepared)
        columns.append(column)
        slots.append(slot)
    sql = f"INSERT INTO {shape.table} ({', '.join(columns)}) VALUES ({', '.join(slots)})"
    if stamped and shape.returns:
        # Spelled out rather than through the backend's helper, which Django 6.0 renamed.
        sql = f"{sql} RETURNING {', '.join(column for _, column in stamped)}"
    return _Statement(sql, params, per_row_slots, [field for field, _ in stamped])


def _read_clock_fields(job: Job, using: str) -> None:
    """Replace the ``DatabaseNow`` values an INSERT wrote with the times it stored.

    Where the database returns them from the INSERT (PostgreSQL, SQLite and MariaDB
    on Django 6), that is already done; elsewhere they are read back.
    """
    values = job.__dict__
    pending = [
        name for name in ("available_at", "created_at") if isinstance(values.get(name), DatabaseNow)
    ]
    if pending:
        job.refresh_from_db(using=using, fields=pending)

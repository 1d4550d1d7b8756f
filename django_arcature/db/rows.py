"""Turning unsaved job rows into the values a bulk insert sends, converted once per field.

The ORM's ``bulk_create`` spent most of a bulk enqueue compiling 25 parameters
per row. Only the fields named "varying" may differ between the rows of one
enqueue call; every other value is converted for the database once, from the
first row, by its field. A varying value goes through the same conversion its
field's ``get_db_prep_save`` applies, so each stored row is the one ``save()``
would write.
"""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils import timezone

from .claimed import as_uuid

#: ``(position, attname, convert)`` for each field whose value varies by row.
Converter = tuple[int, str, Callable[[Any], Any]]


@dataclass
class PreparedRows:
    """The columns of an insert, the values all rows share, and how to make each row."""

    fields: list[Any]
    shared: list[Any]
    converters: list[Converter]
    objs: Sequence[Any]

    def __iter__(self) -> Iterator[list[Any]]:
        for obj in self.objs:
            row = self.shared.copy()
            for position, attname, convert in self.converters:
                row[position] = convert(getattr(obj, attname))
            yield row


def prepare_rows(
    connection: BaseDatabaseWrapper,
    model: Any,
    objs: Sequence[Any],
    varying: Collection[str],
    *,
    json_as_text: Callable[[Any], Any] | None = None,
) -> PreparedRows:
    """Convert the shared values once and pick a converter for each varying field.

    ``json_as_text`` renders a driver's JSON parameter as its text (for COPY,
    which takes text, not the driver's wrapper); shared values go through it too.
    """
    # An auto primary key is the database's to assign: left out of the columns.
    auto = model._meta.auto_field
    fields = [field for field in model._meta.concrete_fields if field is not auto]
    first = objs[0]
    shared: list[Any] = []
    converters: list[Converter] = []
    for position, model_field in enumerate(fields):
        attname = model_field.attname
        if attname in varying:
            shared.append(None)
            convert = db_value_converter(model_field, connection, json_as_text=json_as_text)
            converters.append((position, attname, convert))
        else:
            value = model_field.get_db_prep_save(getattr(first, attname), connection)
            shared.append(json_as_text(value) if json_as_text else value)
    return PreparedRows(fields, shared, converters, objs)


def db_value_converter(
    model_field: Any,
    connection: BaseDatabaseWrapper,
    *,
    json_as_text: Callable[[Any], Any] | None = None,
) -> Callable[[Any], Any]:
    """``field.get_db_prep_save(value, connection)`` for the values an enqueue stores.

    The general method checks and coerces its input on every call; for values
    already of the field's type (UUIDs, aware datetimes, JSON-ready data) it comes
    down to the one backend step taken here.
    """
    kind = model_field.get_internal_type()
    if kind == "UUIDField":
        if connection.features.has_native_uuid_field:
            return _same
        return _uuid_hex
    if kind == "DateTimeField" and settings.USE_TZ:
        adapt_datetime = connection.ops.adapt_datetimefield_value

        def datetime_value(value: Any) -> Any:
            if value is None:
                return None
            if timezone.is_naive(value):  # let the field warn and convert, as save() would
                return model_field.get_db_prep_save(value, connection)
            return adapt_datetime(value)

        method = type(connection.ops).adapt_datetimefield_value
        if getattr(method, "__module__", "") in _NAIVE_TEXT_OPERATIONS:
            return _naive_datetime_text(connection.timezone, datetime_value)
        return datetime_value
    if kind == "JSONField":
        adapt_json = connection.ops.adapt_json_value
        encoder = model_field.encoder

        def json_value(value: Any) -> Any:
            if value is None or hasattr(value, "as_sql"):
                return model_field.get_db_prep_save(value, connection)
            return adapt_json(value, encoder)

        if json_as_text is not None:
            # The backend's wrapper carries the dumps() Django chose for this encoder.
            dumps = _fast_dumps(getattr(adapt_json({}, encoder), "dumps", None))
            if dumps is not None:

                def json_text(value: Any) -> Any:
                    if value is None or hasattr(value, "as_sql"):
                        return json_as_text(model_field.get_db_prep_save(value, connection))
                    return dumps(value)

                return json_text
        return json_value
    return functools.partial(model_field.get_db_prep_save, connection=connection)


#: The modules whose ``adapt_datetimefield_value`` is the one :func:`_naive_datetime_text`
#: repeats (Django's own MySQL and SQLite backends; a subclass that overrides it keeps its own).
_NAIVE_TEXT_OPERATIONS = frozenset(
    {"django.db.backends.mysql.operations", "django.db.backends.sqlite3.operations"}
)


def _naive_datetime_text(zone: Any, general: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """MySQL's and SQLite's ``adapt_datetimefield_value`` of an aware ``datetime``:
    ``str()`` of it made naive in the connection's time zone, without the checks
    around it.

    A bulk enqueue's two times per row went through ``is_aware``, ``make_naive`` and
    the backend's method: a quarter of a MariaDB bulk enqueue's client CPU. A row's
    two times are most often the same object (no delay): the last text made, by any
    of these converters, is kept with its value and zone (:data:`_LAST_NAIVE_TIME`, one
    tuple, replaced whole: a thread that reads another's sees a consistent triple), so
    the second conversion is a lookup. Anything but an aware ``datetime`` goes to
    ``general``.
    """

    def datetime_text(value: Any) -> Any:
        seen, seen_zone, text = _LAST_NAIVE_TIME[0]
        if value is seen and zone is seen_zone and seen is not None:
            return text
        if type(value) is not datetime or value.utcoffset() is None:
            return general(value)
        text = str(value.astimezone(zone).replace(tzinfo=None))
        _LAST_NAIVE_TIME[0] = (value, zone, text)
        return text

    return datetime_text


#: ``(datetime, zone, text)`` of the last time :func:`_naive_datetime_text` rendered.
_LAST_NAIVE_TIME: list[tuple[Any, Any, Any]] = [(None, None, None)]


def _fast_dumps(dumps: Any) -> Any:
    """``json.dumps(value, cls=Encoder)`` as one encoder's ``encode``: the same text
    (``dumps`` with no other option builds ``Encoder()`` and calls ``encode``), without
    building an encoder per row."""
    if (
        isinstance(dumps, functools.partial)
        and dumps.func is json.dumps
        and not dumps.args
        and set(dumps.keywords) == {"cls"}
    ):
        return dumps.keywords["cls"]().encode
    if dumps is json.dumps:
        return json.JSONEncoder().encode
    return dumps


def _same(value: Any) -> Any:
    return value


def _uuid_hex(value: Any) -> Any:
    if isinstance(value, uuid.UUID):
        return value.hex
    return value if value is None else as_uuid(value).hex

"""A bulk enqueue's rows as ``COPY … FROM STDIN`` text, the shared columns rendered once.

The rows of one ``enqueue_many`` call differ only in a few columns (the id, the
payload, the two times, perhaps the unique key). Handing psycopg a list of 25
values per row made it look up a dumper and escape every value of every row: a
third of a bulk enqueue's client time. Here the columns every row shares are
rendered to COPY text once per call, the NULL ones are left out of the column
list (the table fills them in, as it would for an INSERT that omits them), and
per row only the varying values are turned into text, each by a function picked
once for its column. The text is the server's to parse, as for any COPY: an
impossible value fails the whole statement and nothing is written.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Collection, Iterator, Sequence
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db.backends.base.base import BaseDatabaseWrapper

from .rows import prepare_rows

__all__ = ["CopyText", "copy_text", "escape"]

#: How many rows go into one write to the COPY stream.
ROWS_PER_WRITE = 1000

_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def escape(text: str) -> str:
    """Text as one COPY text-format field (backslash, tab, newline and CR escaped)."""
    if "\\" in text or "\t" in text or "\n" in text or "\r" in text:
        return text.translate(_ESCAPES)
    return text


class CopyText:
    """The column list and the text lines of one bulk insert."""

    def __init__(self, columns: list[str], lines: Iterator[str]) -> None:
        self.columns = columns
        self.lines = lines

    def chunks(self) -> Iterator[str]:
        """The lines, ``ROWS_PER_WRITE`` to a string."""
        batch: list[str] = []
        for line in self.lines:
            batch.append(line)
            if len(batch) >= ROWS_PER_WRITE:
                yield "".join(batch)
                batch = []
        if batch:
            yield "".join(batch)


def copy_text(
    connection: BaseDatabaseWrapper,
    raw_cursor: Any,
    model: Any,
    objs: Sequence[Any],
    varying: Collection[str],
    json_as_text: Callable[[Any], Any],
) -> CopyText:
    """The COPY text of ``objs``: varying columns first, then the shared non-NULL ones."""
    prepared = prepare_rows(connection, model, objs, varying, json_as_text=json_as_text)
    qn = connection.ops.quote_name
    render = _Renderer(raw_cursor)
    columns: list[str] = []
    converters = []
    for position, attname, convert in prepared.converters:
        field = prepared.fields[position]
        columns.append(qn(field.column))
        converters.append((attname, render.for_field(field, convert)))
    tail: list[str] = []
    for position, field in enumerate(prepared.fields):
        if field.attname in varying:
            continue
        value = prepared.shared[position]
        if value is None and not field.has_db_default():
            continue  # NULL: what the column holds when the COPY leaves it out
        columns.append(qn(field.column))
        tail.append(render.value(value))
    # The shared columns' text, after the varying ones (a tab between the two parts
    # only if both have columns).
    suffix = ("\t" if converters and tail else "") + "\t".join(tail) + "\n"

    def lines() -> Iterator[str]:
        for obj in objs:
            values = obj.__dict__
            yield "\t".join([text(values[attname]) for attname, text in converters]) + suffix

    return CopyText(columns, lines())


class _Renderer:
    """COPY text for a value: psycopg's own text dumper, except for the types an enqueue's
    varying columns hold, whose text is written directly."""

    def __init__(self, raw_cursor: Any) -> None:
        from psycopg.adapt import PyFormat, Transformer

        self.transformer = Transformer(raw_cursor)
        self.format = PyFormat.TEXT
        self.native_uuid = True

    def value(self, value: Any) -> str:
        if value is None:
            return "\\N"
        if isinstance(value, str):  # a str subclass (a choices enum) as its text
            return escape(str.__str__(value))
        if isinstance(value, bool):
            return "t" if value else "f"
        if type(value) is int:
            return str(value)
        if type(value) is uuid.UUID:
            return str(value)
        if type(value) is datetime:
            return value.isoformat()
        dumped = self.transformer.get_dumper(value, self.format).dump(value)
        return escape(bytes(dumped or b"").decode())

    def for_field(self, field: Any, convert: Callable[[Any], Any]) -> Callable[[Any], str]:
        """The text function of one varying column, from the row's own attribute value:
        a direct one for the usual type of its value; anything else is prepared by
        ``convert`` (the field's ``get_db_prep_save``) and rendered by :meth:`value`."""
        kind = field.get_internal_type()
        general = self.value

        def prepared(value: Any) -> str:
            return general(convert(value))

        if kind == "UUIDField" and self.native_uuid:

            def uuid_text(value: Any) -> str:
                # 32 hex digits: PostgreSQL reads a UUID without its dashes too.
                return value.hex if type(value) is uuid.UUID else prepared(value)

            return uuid_text
        if kind == "DateTimeField" and settings.USE_TZ:

            def datetime_text(value: Any) -> str:
                if type(value) is datetime and value.tzinfo is not None:
                    return value.isoformat()
                return prepared(value)  # None, naive (the field warns), an expression

            return datetime_text
        if kind == "JSONField":
            dumps = json_dumps(field, convert)
            if dumps is not None:

                def json_text(value: Any) -> str:
                    if type(value) is dict or type(value) is list:
                        return escape(dumps(value))
                    return prepared(value)

                return json_text
        return prepared


def json_dumps(field: Any, convert: Callable[[Any], Any]) -> Callable[[Any], str] | None:
    """What ``convert`` (the JSON column's converter) does to a dict: the encoder's
    text. None if it is something else."""
    encoder = field.encoder or json.JSONEncoder
    probe = {"probe": [1.5, "x"]}
    encode = encoder().encode
    try:
        same = convert(probe) == encode(probe)
    except Exception:
        return None
    return encode if same else None

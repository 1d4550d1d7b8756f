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
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import models
from django.db.backends.base.base import BaseDatabaseWrapper

from .rows import prepare_rows

__all__ = ["ChunkText", "CopyText", "copy_text", "escape"]

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


def _shared_columns(
    connection: BaseDatabaseWrapper,
    render: _Renderer,
    prepared: Any,
    varying: Collection[str],
) -> tuple[list[str], list[str]]:
    """The shared non-NULL columns (quoted) and their text, rendered once per call."""
    qn = connection.ops.quote_name
    columns: list[str] = []
    tail: list[str] = []
    for position, field in enumerate(prepared.fields):
        if field.attname in varying:
            continue
        value = prepared.shared[position]
        if value is None and not field.has_db_default():
            continue  # NULL: what the column holds when the COPY leaves it out
        columns.append(qn(field.column))
        tail.append(render.value(value))
    return columns, tail


class ChunkText:
    """COPY text of a bulk enqueue rendered from each row's values, not its instance.

    A chunk (:class:`django_arcature.manager.bulk_rows.Chunk`) holds its rows as
    column lists: the ids' 128-bit values, the payloads, the times, perhaps the
    keys. Each is rendered as the instance's value would be (the same payload
    text, by the field's own encoder; the same ISO times), so the stored row is the
    one :func:`copy_text` would have sent for the instance made afterwards.
    """

    def __init__(
        self,
        connection: BaseDatabaseWrapper,
        raw_cursor: Any,
        model: Any,
        sample: Any,
        varying: Collection[str],
        json_as_text: Callable[[Any], Any],
    ) -> None:
        prepared = prepare_rows(connection, model, [sample], varying, json_as_text=json_as_text)
        qn = connection.ops.quote_name
        render = _Renderer(raw_cursor)
        by_name = {
            attname: (position, convert) for position, attname, convert in prepared.converters
        }
        text_of = {
            attname: render.for_field(prepared.fields[position], convert)
            for attname, (position, convert) in by_name.items()
        }
        self.keyed = "unique_key" in by_name
        order = ["id", "payload", "available_at", "created_at"] + (
            ["unique_key"] if self.keyed else []
        )
        if set(order) != set(by_name):
            raise ValueError(f"rows varying in {sorted(by_name)} are rendered from instances")
        columns = [qn(prepared.fields[by_name[name][0]].column) for name in order]
        shared_columns, tail = _shared_columns(connection, render, prepared, varying)
        self.columns = columns + shared_columns
        self.suffix = ("\t" + "\t".join(tail) if tail else "") + "\n"
        self.payload_text = text_of["payload"]
        #: The payloads' JSON text a chunk at a time (dicts only), or None.
        self.payload_texts: Callable[[list[Any]], list[str] | None] | None = getattr(
            self.payload_text, "many", None
        )
        self.time_text = text_of["available_at"]
        self.key_text = text_of.get("unique_key")
        #: Aware datetimes are written as their ISO text (what :class:`_Renderer` does).
        self.iso_times = bool(settings.USE_TZ)

    def text(self, chunk: Any) -> str:
        """The lines of one chunk's rows.

        Column by column, each a list comprehension: a chunk's payloads are dicts
        encoded by one C encoder, its times aware datetimes written as ISO text (once
        per row when a row's two times are one), so a row costs few Python calls.
        Anything else (a payload the encoder refuses, a naive time) takes the
        per-value functions, which give the same text or raise the same error.
        """
        payloads = self._payloads(chunk.payloads)
        available, created = chunk.available, chunk.created
        evenly = getattr(chunk, "evenly", False)
        if (
            self.iso_times
            and _aware(available, evenly)
            and (created is available or _aware(created, evenly))
        ):
            available_texts = _iso_texts(available, evenly)
            created_texts = available_texts if created is available else _iso_texts(created, evenly)
        else:
            time_text = self.time_text
            available_texts = [time_text(moment) for moment in available]
            created_texts = [time_text(moment) for moment in created]
        # 32 hex digits: PostgreSQL reads a UUID without its dashes too.
        lines = [
            f"{value:032x}\t{payload}\t{available_at}\t{created_at}"
            for value, payload, available_at, created_at in zip(
                chunk.ids, payloads, available_texts, created_texts, strict=True
            )
        ]
        if self.keyed:
            key_text = self.key_text
            assert key_text is not None
            keys = chunk.keys if chunk.keys is not None else [chunk.owner.unique_key] * len(lines)
            lines = [f"{line}\t{key_text(key)}" for line, key in zip(lines, keys, strict=True)]
        suffix = self.suffix
        return suffix.join(lines) + suffix

    def _payloads(self, payloads: list[Any]) -> list[str]:
        """Each payload's COPY field: JSON text, backslashes escaped (the encoder writes
        no tab, newline or CR: it escapes them, as every control character)."""
        many = self.payload_texts
        texts = many(payloads) if many is not None and _all_dicts(payloads) else None
        if texts is None:
            payload_text = self.payload_text
            return [payload_text(payload) for payload in payloads]
        # One search of the joined text (C), not a test per row; a hit is rare.
        if "\\" in "".join(texts):
            return [escape(text) for text in texts]
        return texts


#: The UTC offset an ISO time from ``isoformat()`` ends with.
_UTC_SUFFIX = "+00:00"


def _iso_texts(moments: list[datetime], evenly: bool) -> list[str]:
    """Each moment's ``isoformat()`` text, or text the server reads as the same moment.

    ``evenly`` (a chunk's times: one moment and the microseconds after it, or one moment
    for every row) lets the text be written from the first moment's: its date and time
    to the second, then each row's microseconds. ``isoformat()`` per row was the
    largest single cost of rendering a chunk. Only in UTC and within one second; any
    other chunk is written moment by moment.
    """
    first = moments[0]
    count = len(moments)
    if not evenly:
        return [moment.isoformat() for moment in moments]
    if first == moments[-1]:  # one moment (run_at), or one row
        return [first.isoformat()] * count
    start = first.microsecond
    head = first.isoformat(timespec="seconds")
    if (
        start + count > 1_000_000  # the next second: its seconds' digits change
        or not head.endswith(_UTC_SUFFIX)
        or moments[-1] - first != timedelta(microseconds=count - 1)
    ):
        return [moment.isoformat() for moment in moments]
    prefix = head[: -len(_UTC_SUFFIX)] + "."
    return [f"{prefix}{micro:06d}{_UTC_SUFFIX}" for micro in range(start, start + count)]


def _aware(moments: list[Any], evenly: bool = False) -> bool:
    """Every one an aware ``datetime`` (what :class:`_Renderer` writes as ISO text).

    ``evenly`` (a chunk's times: one moment, or one moment plus offsets) asks only the
    first: the others are that moment or sums with it, of its type and zone.
    """
    if evenly:
        moments = moments[:1]
    return all(type(moment) is datetime and moment.tzinfo is not None for moment in moments)


def _all_dicts(values: list[Any]) -> bool:
    """Every one exactly a ``dict``: the types gathered in C, not a test per row."""
    return {*map(type, values)} <= _DICT_ONLY


_DICT_ONLY = frozenset({dict})


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
    shared_columns, tail = _shared_columns(connection, render, prepared, varying)
    columns.extend(shared_columns)
    # The shared columns' text, after the varying ones (a tab between the two parts
    # only if both have columns).
    suffix = ("\t" if converters and tail else "") + "\t".join(tail) + "\n"

    def lines() -> Iterator[str]:
        for obj in objs:
            values = obj.__dict__
            yield "\t".join([text(values[attname]) for attname, text in converters]) + suffix

    return CopyText(columns, lines())


#: Field classes (exactly these, no subclass that may convert) whose ``str`` value is
#: stored unchanged.
_PLAIN_TEXT_FIELDS: tuple[type[models.Field[Any, Any]], ...] = (models.CharField, models.TextField)


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
        if type(field) in _PLAIN_TEXT_FIELDS:
            # A plain CharField/TextField stores a str as it is (a node's name, an
            # edge's ``when``): the generic path converted each one through the field.

            def str_text(value: Any) -> str:
                return escape(value) if type(value) is str else prepared(value)

            return str_text
        if type(field) is models.BooleanField:

            def bool_text(value: Any) -> str:
                if value is True:
                    return "t"
                if value is False:
                    return "f"
                return prepared(value)

            return bool_text
        if kind == "JSONField":
            dumps = json_dumps(field, convert)
            if dumps is not None:

                def json_text(value: Any) -> str:
                    if type(value) is dict or type(value) is list:
                        return escape(dumps(value))
                    return prepared(value)

                json_text.many = getattr(dumps, "many", None)  # type: ignore[attr-defined]
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
    if not same:
        return None
    return _one_encoder(encoder(), encode) or encode


#: ``encode`` methods that are ``json.JSONEncoder.encode`` on a dict (the one below
#: also rewrites large floats, which its text shows as "e+": then it is called itself).
_PLAIN_ENCODES = (json.JSONEncoder.encode,)


def _one_encoder(instance: json.JSONEncoder, encode: Callable[[Any], str]) -> Any:
    """``encode`` of a dict without building a C encoder per call.

    ``JSONEncoder.encode`` builds the C accelerator's encoder afresh for every value:
    a third of the time it takes for a small payload. Here one is built once, as
    ``iterencode`` builds it, for an encoder whose class changes none of what it is
    made from; its text is checked against ``encode`` on a probe, and any value it
    fails on (or whose text has "e+", which :class:`ExactJSONEncoder` rewrites) goes
    to ``encode`` itself, so the text and the errors are always ``encode``'s.
    """
    from django_arcature.core.payloads import ExactJSONEncoder

    make = getattr(json.encoder, "c_make_encoder", None)
    kind = type(instance)
    if (
        make is None
        or instance.indent is not None
        or not instance.ensure_ascii
        or kind.iterencode is not json.JSONEncoder.iterencode
        or kind.encode not in (*_PLAIN_ENCODES, ExactJSONEncoder.encode)
    ):
        return None

    def build() -> Any:
        return make(
            {} if instance.check_circular else None,
            instance.default,
            json.encoder.encode_basestring_ascii,
            None,
            instance.key_separator,
            instance.item_separator,
            instance.sort_keys,
            instance.skipkeys,
            instance.allow_nan,
        )

    try:
        state = [build()]
        probe = {"args": [1.5, 'é\t"', None, True, 2**70], "kwargs": {"k": {}}}
        if "".join(state[0](probe, 0)) != encode(probe):
            return None
    except Exception:
        return None

    def encode_dict(value: Any) -> str:
        if type(value) is not dict:
            return encode(value)
        try:
            text = "".join(state[0](value, 0))
        except Exception:
            state[0] = build()  # its circular-reference markers may hold this value
            return encode(value)  # the error (or text) encode gives
        return encode(value) if "e+" in text else text

    def encode_dicts(values: list[Any]) -> list[str] | None:
        """:func:`encode_dict` of each of ``values`` (dicts), in one comprehension; None
        if any of them fails (the caller then takes them one by one, for the error)."""
        join, current = "".join, state[0]
        try:
            texts = [join(current(value, 0)) for value in values]
        except Exception:
            state[0] = build()
            return None
        if "e+" in "".join(texts):  # one search (a hit across two texts only costs a look)
            texts = [
                encode(value) if "e+" in text else text
                for value, text in zip(values, texts, strict=True)
            ]
        return texts

    separators = instance.key_separator + instance.item_separator
    if not any(char in separators for char in "\\\t\n\r"):  # then only strings escape
        encode_dict.many = encode_dicts
    return encode_dict

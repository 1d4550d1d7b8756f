"""The rows of one ``enqueue_many`` call, made a chunk at a time: values first, jobs after.

A bulk enqueue used to make every row a ``Job`` instance, then turn the
instances into COPY text, then send it, and only then did the server start its
own work: client and server ran one after the other. Here the rows of a chunk
exist first as plain values (id, payload, times), which is all the COPY text
needs; a driver that streams (PostgreSQL) sends every chunk's text and then makes
the ``Job`` instances (:meth:`Chunk.make`) while the server is still parsing and
indexing the rows. Everywhere else the chunks are made into instances first and
inserted as before (:meth:`BulkRows.all`).

The values of a row are exactly what its instance holds, so what is sent and
what is returned are the same row.
"""

from __future__ import annotations

import os
import struct
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from itertools import repeat
from typing import TYPE_CHECKING, Any

from django.db.models.base import ModelState

from django_arcature.enqueueing import RowMaker

if TYPE_CHECKING:
    from django_arcature.models import Job

__all__ = ["BulkRows", "Chunk", "uuid7_values"]

#: The varying columns a streaming driver renders itself; rows with others go the long way.
STREAMED = frozenset({"id", "payload", "available_at", "created_at", "unique_key"})

_MICROSECOND = timedelta(microseconds=1)
UUID = uuid.UUID
_new_uuid = uuid.UUID.__new__
_set = object.__setattr__
_UNKNOWN = uuid.SafeUUID.unknown


#: ``timedelta(microseconds=i)`` for i from 0: the offsets of a chunk's rows from its
#: one clock reading, made once per process (replaced by a longer list if a chunk is
#: larger: never extended in place, which two threads could interleave).
_STEPS: list[timedelta] = [timedelta(microseconds=i) for i in range(1000)]


def _steps(count: int) -> list[timedelta]:
    """The first ``count`` offsets of :data:`_STEPS`."""
    global _STEPS
    steps = _STEPS
    if len(steps) < count:
        steps = _STEPS = [timedelta(microseconds=i) for i in range(count)]
    return steps if len(steps) == count else steps[:count]


#: Byte tables for ``bytes.translate``: the version nibble (7) into byte 6 of a UUID,
#: the RFC 9562 variant bits (0b10) into byte 8, the other bits of each kept as drawn.
_VERSION_7 = bytes((byte & 0x0F) | 0x70 for byte in range(256))
_VARIANT = bytes((byte & 0x3F) | 0x80 for byte in range(256))
_unpack_all = struct.Struct(">QQ").iter_unpack


def uuid7_values(count: int) -> list[int]:
    """The 128-bit values of ``count`` new version-7 UUIDs, as :func:`uuid7_ints` draws
    them (this millisecond, 74 random bits each), made a whole chunk at a time.

    The random bytes are drawn at once and the fixed bits written into every 16-byte
    record by slice assignments and ``bytes.translate`` (C loops over the chunk); per
    row only the two halves are joined. Half the time of :func:`uuid7_ints`' per-row
    shifts and masks.
    """
    if count <= 0:
        return []
    millis = time.time_ns() // 1_000_000
    records = bytearray(os.urandom(16 * count))
    stamp = (millis & 0xFFFF_FFFF_FFFF).to_bytes(6)
    for position in range(6):  # unix_ts_ms: the first 48 bits
        records[position::16] = stamp[position : position + 1] * count
    records[6::16] = records[6::16].translate(_VERSION_7)
    records[8::16] = records[8::16].translate(_VARIANT)
    return [(high << 64) | low for high, low in _unpack_all(records)]


class Chunk:
    """A run of consecutive rows as column lists, and how to make their instances."""

    __slots__ = ("available", "created", "evenly", "ids", "keys", "owner", "payloads")

    def __init__(
        self,
        owner: BulkRows,
        ids: list[int],
        payloads: list[dict[str, Any]],
        available: list[datetime],
        created: list[datetime],
        keys: list[str | None] | None,
        evenly: bool = False,
    ) -> None:
        self.owner = owner
        #: The ids' 128-bit values (a ``UUID`` is made for the instance only).
        self.ids = ids
        self.payloads = payloads
        self.available = available
        #: The same list as :attr:`available` when no delay or ``run_at`` applies.
        self.created = created
        #: One key per row, or None when every row has the call's one key (or none).
        self.keys = keys
        #: :attr:`created` is one moment and the microseconds after it, one per row;
        #: :attr:`available` too, or one moment for every row (``run_at``).
        self.evenly = evenly

    def make(self) -> None:
        """This chunk's ``Job`` instances, appended to the call's rows.

        Without ``pre_init``/``post_init`` receivers (:attr:`BulkRows.plain`) each row is
        assembled here, as :meth:`RowMaker.make` assembles one (the maker's template
        copied, the per-row values and fresh defaults set, a ``ModelState``), in one
        loop without a call per row, and its state is made saved on the database at
        once: the call per row and the two attribute look-ups after it were a fifth of
        making an instance. With receivers each row goes through the maker (and so
        through ``Model.__init__``, which sends the signals).
        """
        owner = self.owner
        if not owner.plain:
            self._make_each()
            return
        using = owner.saved_on
        maker = owner.maker
        copy = maker.template.copy
        fresh = maker.fresh
        model = maker.model
        new_row = model.__new__
        key = owner.unique_key
        keys = self.keys if self.keys is not None else repeat(key)
        append = owner.rows.append
        # Not strict: ``keys`` may be endless (one key for all); the four lists were made
        # for these rows together, one value per row each.
        for value, payload, available_at, created_at, row_key in zip(
            self.ids, self.payloads, self.available, self.created, keys, strict=False
        ):
            job_id = _new_uuid(UUID)
            _set(job_id, "int", value)  # what UUID(int=value) stores, without its checks
            _set(job_id, "is_safe", _UNKNOWN)
            values = copy()
            values["id"] = job_id
            values["payload"] = payload
            values["available_at"] = available_at
            values["created_at"] = created_at
            values["unique_key"] = row_key
            for attname, default in fresh:
                values[attname] = default()
            state = ModelState()
            if using is not None:  # as bulk_create leaves them: saved, and on this database
                state.adding = False
                state.db = using
            values["_state"] = state
            row = new_row(model)
            row.__dict__ = values
            append(row)

    def _make_each(self) -> None:
        """:meth:`make` through the row maker, one call per row (receivers listening)."""
        owner = self.owner
        make = owner.maker.make
        using = owner.saved_on
        plain = owner.plain
        key = owner.unique_key
        keys = self.keys
        append = owner.rows.append
        for index, (value, payload, available_at, created_at) in enumerate(
            zip(self.ids, self.payloads, self.available, self.created, strict=True)
        ):
            job_id = _new_uuid(UUID)
            _set(job_id, "int", value)
            _set(job_id, "is_safe", _UNKNOWN)
            row_key = keys[index] if keys is not None else key
            row = make(job_id, payload, available_at, created_at, row_key, plain)
            if using is not None:
                row._state.adding = False
                row._state.db = using
            append(row)


class BulkRows:
    """The validated items of one call and everything shared by their rows.

    Each chunk reads the clock (the database's, read once per call, plus the time
    elapsed on this host since) when its values are made, and its rows take that
    time a microsecond apart, each chunk's first row later than the last one before
    it, so the rows become available in the order given.
    """

    def __init__(
        self,
        model: type[Job],
        maker: RowMaker,
        items: Sequence[tuple[list[Any], dict[str, Any]]],
        *,
        db_now: datetime,
        offset: timedelta | None,
        run_at: datetime | None,
        derive_key: Callable[[list[Any], dict[str, Any]], str | None] | None,
        unique_key: str | None,
        varying: tuple[str, ...],
    ) -> None:
        self.model = model
        self.maker = maker
        self.items = items
        self.db_now = db_now
        self.offset = offset
        self.run_at = run_at
        self.derive_key = derive_key
        self.unique_key = unique_key
        #: The fields whose values may differ between rows.
        self.varying = varying
        #: No ``pre_init``/``post_init`` receivers: instances are assembled directly.
        self.plain = maker.plain
        self.rows: list[Job] = []
        self.saved_on: str | None = None
        #: Checks items ``start`` to ``stop`` (raising what enqueue would), called for
        #: each chunk before its rows are made; None when every item was checked already.
        self.check: Callable[[int, int], None] | None = None

    def __len__(self) -> int:
        return len(self.items)

    @property
    def streamable(self) -> bool:
        """Whether a driver may render the rows from their values (:data:`STREAMED`)
        instead of from the instances (which a ``post_init`` receiver may change)."""
        return self.plain and STREAMED.issuperset(self.varying)

    def sample(self) -> Job:
        """A row holding every shared value (its varying ones are placeholders)."""
        now = self.db_now
        return self.maker.make(uuid.UUID(int=0), {}, now, now, self.unique_key, self.plain)

    def chunks(self, size: int, saved_on: str | None = None) -> Iterator[Chunk]:
        """The rows ``size`` at a time, from the first; starts the call's rows afresh.

        With ``saved_on`` the instances are marked saved on that database as they are
        made (the caller makes them only inside the insert that writes them).
        """
        self.rows = []
        self.saved_on = saved_on
        items = self.items
        offset, run_at, derive_key = self.offset, self.run_at, self.derive_key
        # db_now + (now - started), as one addition per row.
        skew = self.db_now - datetime.now(UTC)
        now_utc = datetime.now
        last = self.db_now - _MICROSECOND
        check = self.check
        for start in range(0, len(items), size):
            if check is not None:
                check(start, start + size)
            part = items[start : start + size]
            ids = uuid7_values(len(part))
            payloads = [{"args": args, "kwargs": kwargs} for args, kwargs in part]
            # One reading of the clock per chunk, its rows a microsecond apart. Read per
            # row, the clock had mostly not moved on by a microsecond between two rows
            # (so each was set one past the last anyway), and now() with an addition
            # was 0.5-0.7 ms per 1,000 rows. The next chunk reads the clock again and
            # starts after this one's last row.
            now = now_utc(UTC) + skew
            if now <= last:  # the clock stood still (or stepped back): keep the order
                now = last + _MICROSECOND
            created = [now + step for step in _steps(len(part))]
            last = created[-1]
            if run_at is not None:
                available = [run_at] * len(part)
            elif offset is not None:
                available = [moment + offset for moment in created]
            else:
                available = created
            keys = None
            if derive_key is not None:
                keys = [derive_key(args, kwargs) for args, kwargs in part]
            yield Chunk(self, ids, payloads, available, created, keys, evenly=True)

    def all(self, size: int = 1000) -> list[Job]:
        """Every row's instance (unsaved), for a driver that inserts instances."""
        for chunk in self.chunks(size):
            chunk.make()
        return self.rows

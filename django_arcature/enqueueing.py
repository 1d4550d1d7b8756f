"""Building the unsaved rows of one enqueue call: ids, arguments, availability.

Kept apart from the manager's writes: nothing here touches the database, so a
bulk enqueue's per-row cost (an id, a clock reading, the row itself) is easy to
read and to profile.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.db import models
from django.db.models import Func
from django.db.models.base import ModelState
from django.utils import timezone

if TYPE_CHECKING:
    from .models import Job

__all__ = [
    "RowMaker",
    "delay_offset",
    "new_ids",
    "save_new",
    "split_all",
    "split_arguments",
    "uuid7_ints",
]

#: The furthest ahead a delayed job may be scheduled (as for retries).
MAX_DELAY_SECONDS = 10 * 365 * 24 * 3600


def save_new(row: Job, using: str) -> Job:
    row.save(force_insert=True, using=using)
    return row


def split_all(items: Iterable[Any]) -> list[tuple[list[Any], dict[str, Any]]]:
    """:func:`split_arguments` of every item of a bulk enqueue.

    A plain list of positional arguments (the usual item) is taken by an exact type
    test, in the comprehension itself: the ``Mapping`` check that comes first in
    :func:`split_arguments` is an ABC ``isinstance``, and with the call it was a
    quarter of a millisecond per 1,000 items. A list is never an ``(args, kwargs)``
    pair (only a tuple is), so the result is :func:`split_arguments`'s.
    """
    return [([*item], {}) if type(item) is list else split_arguments(item) for item in items]


def split_arguments(item: Any) -> tuple[list[Any], dict[str, Any]]:
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


class _ModelTemplate:
    """A model's field defaults as ``Model.__init__`` leaves them, read from one sample row.

    ``values`` holds every concrete field's value in field order; ``fresh`` the
    fields whose default is a callable (called again for every row, so no two
    rows share a mutable value) and ``varying`` those of them whose value is not
    the same in every row (a new ``uuid4``, unlike a new empty list).
    """

    def __init__(self, model: type[Job]) -> None:
        fields = model._meta.concrete_fields
        sample = model()
        self.values = {field.attname: getattr(sample, field.attname) for field in fields}
        fresh = [
            field
            for field in fields
            if field.attname not in RowMaker.PER_ROW
            and field.has_default()
            and callable(field.default)
        ]
        # A ``list``/``dict`` default is called as the type itself (what the field's
        # ``get_default`` would call), one call less per row.
        self.fresh = [
            (field.attname, field.default if field.default in (list, dict) else field.get_default)
            for field in fresh
        ]
        self.varying = tuple(field.attname for field in fresh if field.default not in (list, dict))


_templates: dict[type[Any], _ModelTemplate] = {}


class RowMaker:
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
    The defaults are read once per model (:class:`_ModelTemplate`): a one-by-one
    enqueue builds one row per call, and building a sample row each time cost
    as much as the row itself.
    """

    #: Set per row by :meth:`make`, in its argument order.
    PER_ROW = ("id", "payload", "available_at", "created_at", "unique_key")

    def __init__(self, model: type[Job], **shared: Any) -> None:
        base = _templates.get(model)
        if base is None:
            base = _templates[model] = _ModelTemplate(model)
        self.model = model
        self.template = base.values.copy()
        self.template.update(shared)  # field name == attname: the job table has no relations
        self.fresh = [(name, default) for name, default in base.fresh if name not in shared]
        #: The fields whose values may differ between rows; the rest are the same in all
        #: (a new empty list or dict in each row is still the same value).
        self.varying = (*self.PER_ROW, *(name for name in base.varying if name not in shared))

    @property
    def plain(self) -> bool:
        """No ``pre_init``/``post_init`` receivers for the model (asked per row: a maker
        is kept between calls, receivers come and go): rows are assembled directly and
        hold exactly the values given."""
        pre_init, post_init = models.signals.pre_init, models.signals.post_init
        return not (
            (pre_init.receivers and pre_init.has_listeners(self.model))
            or (post_init.receivers and post_init.has_listeners(self.model))
        )

    def make(
        self,
        job_id: uuid.UUID,
        payload: dict[str, Any],
        available_at: datetime | Func,
        created_at: datetime | Func,
        unique_key: str | None,
        plain: bool,
    ) -> Job:
        """One unsaved row; a time may be an expression (the database's clock), which the
        INSERT writes. ``plain`` is :attr:`plain`, asked once per call by the caller."""
        values = self.template.copy()
        values["id"] = job_id
        values["payload"] = payload
        values["available_at"] = available_at
        values["created_at"] = created_at
        values["unique_key"] = unique_key
        for attname, default in self.fresh:
            values[attname] = default()
        if not plain:
            # The template's keys are in field order: these are the positional values.
            built: Job = self.model(*values.values())  # type: ignore[misc]
            return built
        row = self.model.__new__(self.model)
        values["_state"] = ModelState()
        row.__dict__ = values
        return row


def delay_offset(delay: float | timedelta | None, run_at: datetime | None) -> timedelta | None:
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
    if not 0 <= seconds <= MAX_DELAY_SECONDS:  # also refuses NaN
        raise ValueError(f"delay must be from 0 to {MAX_DELAY_SECONDS} seconds, not {delay!r}")
    return timedelta(seconds=seconds)


def new_ids(count: int) -> list[uuid.UUID]:
    """``count`` new job ids: time-ordered UUIDs (version 7, RFC 9562).

    The first 48 bits are the Unix time in milliseconds and the other 74 are
    random, so ids stay unguessable and unique while new rows land at the right
    end of the primary-key index instead of on a random page of it. On a table of
    a million rows a random id made each one-by-one enqueue touch a leaf page that
    was rarely in memory: SQLite enqueued at 0.74 of its speed on an empty table.
    The ids of one call are drawn from one read of the system's random source.
    """
    return [uuid.UUID(int=value) for value in uuid7_ints(count)]


def uuid7_ints(count: int) -> list[int]:
    """The 128-bit values of ``count`` new version-7 UUIDs (see :func:`new_ids`).

    A bulk enqueue renders an id's text from its value before it makes the
    ``UUID`` object (after the row has gone to the database), so it draws these.
    """
    millis = time.time_ns() // 1_000_000
    random_bytes = os.urandom(10 * count)
    head = (millis << 80) | (0x7 << 76) | (0b10 << 62)
    from_bytes = int.from_bytes
    values = []
    for start in range(0, 10 * count, 10):
        rand = from_bytes(random_bytes[start : start + 10])  # 80 bits, 74 used
        # rand_a: the top 12 bits, at bits 64-75; rand_b: the low 62 bits.
        values.append(head | ((rand >> 68) << 64) | (rand & _LOW_62))
    return values


_LOW_62 = (1 << 62) - 1

"""What a claim hands a worker: the job's identity, payload and the token that fences it."""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ClaimedJob:
    """What a worker needs to run a job it now owns, and to fence its writes."""

    id: uuid.UUID
    task_name: str
    queue: str
    priority: int
    payload: Any
    attempts: int
    max_attempts: int
    claim_token: uuid.UUID
    lease_seconds: int
    backend: str = ""
    attempt_log: list[Any] = field(default_factory=list)
    #: When the job became claimable (for the queue-wait metric).
    available_at: datetime | None = None
    #: The enqueuing span's context, when tracing is on (django_arcature.contrib.otel).
    trace_context: dict[str, Any] = field(default_factory=dict)

    #: Why the stored row could not be read ("" when it could). Such a job is
    #: never run: the worker writes it off as ``dead`` ``malformed`` with this reason.
    undecodable: str = ""

    def log_extra(self) -> dict[str, Any]:
        """The ``extra`` fields of every log record about this job (job id, task, queue,
        attempt), for JSON formatters and structlog (docs/observability.md)."""
        return {
            "job_id": str(self.id),
            "task": self.task_name,
            "queue": self.queue,
            "attempt": self.attempts,
        }


CLAIM_COLUMNS = (
    "id",
    "task_name",
    "queue",
    "priority",
    "payload",
    "attempts",
    "max_attempts",
    "claim_token",
    "lease_seconds",
    "backend",
    "attempt_log",
    "available_at",
    "trace_context",
)


#: Each column's position in a claimed row.
_AT = {column: index for index, column in enumerate(CLAIM_COLUMNS)}

#: Columns a claim reads as text, and those of them that hold JSON. The trace
#: context only serves tracing: when it cannot be read it is dropped, and the job runs.
TEXT_COLUMNS = frozenset(
    {"task_name", "queue", "payload", "backend", "attempt_log", "trace_context"}
)
JSON_COLUMNS = frozenset({"payload", "attempt_log", "trace_context"})
_OPTIONAL_COLUMNS = frozenset({"trace_context"})
#: (position, column, holds JSON, optional) of each text column of a claimed row.
_TEXT_AT = tuple(
    (index, column, column in JSON_COLUMNS, column in _OPTIONAL_COLUMNS)
    for index, column in enumerate(CLAIM_COLUMNS)
    if column in TEXT_COLUMNS
)


def as_uuid(value: object) -> uuid.UUID:
    return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))


def _as_datetime(value: object) -> datetime | None:
    """A raw SQLite row carries the timestamp as text, in UTC; the others a datetime."""
    if value is None or isinstance(value, datetime):
        moment = value
    else:
        moment = datetime.fromisoformat(str(value))
    if moment is not None and moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment


#: The texts most claimed rows carry in their JSON columns (no attempt log yet, no
#: trace context), decoded without the parser: a fresh object each time, as
#: ``json.loads`` would give, since the caller may change it.
_EMPTY_JSON: dict[str, type[dict[str, Any]] | type[list[Any]]] = {"{}": dict, "[]": list}


def _as_json(value: object) -> Any:
    if isinstance(value, str):
        empty = _EMPTY_JSON.get(value)
        return empty() if empty is not None else json.loads(value)
    return json.loads(value) if isinstance(value, bytes) else value


class _Unreadable(ValueError):
    """One column of a claimed row could not be decoded; the message says which and why."""


def _text(column: str, value: object) -> Any:
    """A text column as ``str``. SQLite hands it over as bytes, so that text that is
    not UTF-8 fails here, for this row alone, instead of failing the whole fetch."""
    if not isinstance(value, bytes | bytearray | memoryview):
        return value
    try:
        return bytes(value).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _Unreadable(
            f"its {column} is not valid UTF-8 ({exc.reason} at byte {exc.start})"
        ) from None


def _json(column: str, value: object) -> Any:
    """A JSON column decoded, or the reason it cannot be (deep nesting, huge integers…)."""
    try:
        return _as_json(value)
    except RecursionError:
        raise _Unreadable(f"its {column} is JSON nested too deeply to decode") from None
    except (ValueError, TypeError) as exc:
        raise _Unreadable(f"its {column} is not JSON that Python can read: {exc}") from None


def claimed_from_row(row: Sequence[Any], *, json_decoded: bool = False) -> ClaimedJob:
    """Build the claimed job from a row of ``CLAIM_COLUMNS``; a bad column marks it, no more.

    Rows from a raw cursor carry JSON columns as text (Django has the drivers
    leave decoding to the field); rows from ``values_list`` are decoded already,
    and decoding those again would turn a payload that is a bare JSON string
    into something else, or fail. ``json_decoded`` says which kind this is.

    A row this process cannot read (text that is not UTF-8, JSON nested deeper
    than Python decodes, an integer with more digits than Python converts)
    comes back with ``undecodable`` saying why, so that the worker writes that
    one job off as ``malformed`` and runs the rest of its batch. Only an id or
    claim token that is not a UUID raises: without them no write can be fenced.
    """
    if len(row) != len(CLAIM_COLUMNS):
        raise ValueError(f"a claimed row has {len(row)} columns, not {len(CLAIM_COLUMNS)}")
    # Read by position (_AT), not through a dict of the row: once per claimed row.
    job_id = as_uuid(row[_AT["id"]])
    token = as_uuid(row[_AT["claim_token"]])
    problems: list[str] = []
    decoded: dict[str, Any] = {}
    # Once per claimed row of every drain: the columns' positions and kinds are
    # worked out once (_TEXT_AT), not looked up in sets column by column.
    for index, column, is_json, optional in _TEXT_AT:
        value = row[index]
        try:
            if not isinstance(value, str):
                value = _text(column, value)
            if is_json and not json_decoded:
                value = _json(column, value)
        except _Unreadable as exc:
            if not optional:
                problems.append(str(exc))
            value = None
        decoded[column] = value
    trace_context = decoded["trace_context"]
    name = decoded["task_name"]
    if not isinstance(name, str):  # kept readable for the logs and the admin
        name = bytes(row[_AT["task_name"]]).decode("utf-8", "replace")
    log = decoded["attempt_log"]
    return ClaimedJob(
        id=job_id,
        task_name=name,
        queue=decoded["queue"] if isinstance(decoded["queue"], str) else "",
        priority=row[_AT["priority"]],
        payload=decoded["payload"],
        attempts=row[_AT["attempts"]],
        max_attempts=row[_AT["max_attempts"]],
        claim_token=token,
        lease_seconds=row[_AT["lease_seconds"]],
        backend=decoded["backend"] or "",
        attempt_log=log if isinstance(log, list) else [],
        available_at=_as_datetime(row[_AT["available_at"]]),
        trace_context=trace_context if isinstance(trace_context, dict) else {},
        undecodable=(
            "the stored job could not be read: " + "; ".join(problems) if problems else ""
        ),
    )


def claimed_from_rows(
    rows: Iterable[Sequence[Any]], *, json_decoded: bool = False
) -> list[ClaimedJob]:
    """:func:`claimed_from_row` for a claimed batch; a row without a usable id is left out.

    No write can be fenced on such a row: it stays ``running`` until its lease
    expires and a sweep counts the attempt, as if its worker had died. The rest
    of the batch is returned, so it runs.
    """
    claimed = []
    for row in rows:
        try:
            claimed.append(claimed_from_row(row, json_decoded=json_decoded))
        except Exception:
            logger.exception("a claimed row has no usable id or claim token: %r", list(row[:1]))
    return claimed


def claim_select_columns(vendor: str) -> list[Any]:
    """``CLAIM_COLUMNS`` for ``values_list``, with the JSON left undecoded.

    The ORM decodes JSON while fetching, where one row that cannot be decoded
    fails the whole query (and on MySQL/MariaDB, the claim's transaction, so
    the same poison row would block every claim); :func:`claimed_from_row`
    decodes each row itself. On SQLite every text column comes as bytes for the
    same reason: its driver refuses text that is not UTF-8 while fetching.
    """
    from django.db.models import BinaryField, TextField
    from django.db.models.functions import Cast

    columns: list[Any] = []
    for column in CLAIM_COLUMNS:
        if vendor == "sqlite" and column in TEXT_COLUMNS:
            columns.append(Cast(column, BinaryField()))
        elif column in JSON_COLUMNS:
            columns.append(Cast(column, TextField()))
        else:
            columns.append(column)
    return columns


def returning_columns(vendor: str, quote: Any, prefix: str = "") -> str:
    """The ``RETURNING`` list of a raw claim (``prefix``: the table, where it must be named).

    SQLite's text comes back as bytes, decoded row by row: text that is not UTF-8
    would otherwise fail the whole fetch, after the claim was made.
    """
    return ", ".join(
        f"CAST({prefix}{quote(c)} AS BLOB)"
        if vendor == "sqlite" and c in TEXT_COLUMNS
        else prefix + quote(c)
        for c in CLAIM_COLUMNS
    )

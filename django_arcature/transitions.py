"""The named transitions: what each fenced outcome writes, built in one place each.

A completion is a ``Completion`` (which outcome, for which claim); its fields
come from ``transition_fields`` and nowhere else, so no caller can mix fields of
two outcomes, and every text and JSON value in them has been through the one
sanitizer (``core.text``). ``announce`` sends the one observer event a fenced
write earns: its own if it landed, ``job_claim_lost`` if it was fenced out,
never both; ``send_event`` sends it so that no receiver can break the writer.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import F
from django.db.models.functions import Coalesce
from django.dispatch import Signal

from . import signals
from .conf import MAX_LEASE_SECONDS, ArcatureSettings, get_settings
from .core.attempt_log import bound_attempt_log, needs_bounding
from .core.decide import ErrorKind as DecidedErrorKind
from .core.text import (
    DEFAULT_RESULT_MAX_BYTES,
    UnstorableValue,
    check_result_size,
    clean_json,
    clean_json_sized,
    clean_text,
    json_size,
    truncate_for_storage,
)
from .db import DatabaseNow
from .states import JobStatus

logger = logging.getLogger(__name__)

__all__ = [
    "CLAIM_MARKER",
    "ClaimTransition",
    "Completion",
    "Written",
    "announce",
    "claimed_fields",
    "dead_fields",
    "lease_fields",
    "refused_completion",
    "retry_fields",
    "send_event",
    "succeeded_fields",
    "transition_fields",
    "whole_seconds",
    "wrote_claim",
]


class ClaimTransition(enum.Enum):
    """Whether a fenced write changed the row (``UPDATED``) or was fenced out (``LOST``)."""

    UPDATED = "updated"
    LOST = "lost"

    @classmethod
    def from_rowcount(cls, rows: int) -> ClaimTransition:
        return cls.UPDATED if rows > 0 else cls.LOST


@dataclass(frozen=True)
class Completion:
    """One fenced write for :meth:`JobManager.complete_many`.

    ``kind`` is ``"succeeded"``, ``"retry"`` or ``"dead"``; the other fields are
    those the matching ``mark_*`` method takes.
    """

    job_id: uuid.UUID
    claim_token: uuid.UUID
    kind: str
    result: Any = None
    available_at: datetime | None = None
    error_kind: str = ""
    message: str = ""
    traceback: str = ""
    attempt_log: list[Any] | None = None
    #: A retry's wait in seconds, counted on the database's clock when the write lands
    #: (``available_at`` is then only the worker's estimate, for observers). Without
    #: it, a retry is written for ``available_at`` as given.
    retry_delay: float | None = None
    #: ``time.monotonic()`` when ``retry_delay`` was decided: a batched write that lands
    #: later waits only what is left of the backoff, still on the database's clock.
    decided_monotonic: float | None = None
    #: A snooze (``raise Snooze``) gives its attempt back: the attempts to store, else None.
    attempts: int | None = None


@dataclass(frozen=True)
class Written:
    """What became of one completion: ``outcome``, and the ``completion`` actually written.

    That is the one given, unless the database refused its data: then it is the
    ``dead`` completion that replaced it (see :func:`refused_completion`).
    """

    outcome: ClaimTransition
    completion: Completion


#: The key, in the attempt-log entry a completion writes, holding its claim token (hex).
#: Tokens are never reused, so finding it in a row proves that this claim's write landed:
#: how a worker whose connection broke around COMMIT learns whether its write took.
CLAIM_MARKER = "claim"


def wrote_claim(attempt_log: object, claim_token: uuid.UUID) -> bool:
    """Whether a stored attempt log holds the entry written by the claim ``claim_token``."""
    if not isinstance(attempt_log, list):
        return False
    marker = claim_token.hex
    return any(
        isinstance(entry, dict) and entry.get(CLAIM_MARKER) == marker for entry in attempt_log
    )


def lease_fields(lease_seconds: int) -> dict[str, Any]:
    """A fresh lease from the database's now: what a claim and a heartbeat both stamp."""
    return {
        "locked_at": DatabaseNow(),
        "lease_seconds": lease_seconds,
        "lease_expires_at": DatabaseNow(lease_seconds),
    }


def claimed_fields(token: Any, worker_id: str, lease_seconds: int) -> dict[str, Any]:
    """pending → running under a new claim token (``token`` may be a per-row CASE)."""
    return {
        "status": JobStatus.RUNNING,
        "attempts": F("attempts") + 1,
        "claim_token": token,
        "locked_by": worker_id,
        "started_at": Coalesce("started_at", DatabaseNow()),
        **lease_fields(lease_seconds),
    }


#: The database's "now" that finished jobs are stamped with, built once: an expression
#: is never changed by the queries that use it (Django resolves a copy), and building
#: one (``Func.__init__``, ``deconstructible``) cost about 4 us, per job of a drain.
_FINISHED_NOW = DatabaseNow()


def succeeded_fields(result: Any) -> dict[str, Any]:
    return {
        "status": JobStatus.SUCCEEDED,
        "claim_token": None,
        "unique_key": None,
        "lease_expires_at": None,
        "finished_at": _FINISHED_NOW,
        "result": result,
    }


def retry_fields(
    available_at: datetime | DatabaseNow, message: str, traceback: str
) -> dict[str, Any]:
    return {
        "status": JobStatus.PENDING,
        "claim_token": None,
        "lease_expires_at": None,
        "available_at": available_at,
        "last_error": message,
        "last_traceback": traceback,
    }


def dead_fields(error_kind: str, message: str, traceback: str) -> dict[str, Any]:
    return {
        "status": JobStatus.DEAD,
        "claim_token": None,
        "unique_key": None,
        "lease_expires_at": None,
        "error_kind": str(error_kind),
        "last_error": message,
        "last_traceback": traceback,
        "failed_at": _FINISHED_NOW,
        "finished_at": _FINISHED_NOW,
    }


def known_error_kind(value: str) -> str:
    try:
        return DecidedErrorKind(value).value
    except ValueError:
        known = ", ".join(kind.value for kind in DecidedErrorKind)
        raise ValueError(f"unknown error kind {value!r}; use one of {known}") from None


def announce(sender: type[Any], completion: Completion, outcome: ClaimTransition) -> None:
    """Send the observer event for a fenced write: its own event if it landed,
    ``job_claim_lost`` if it was fenced out (and never both)."""
    if outcome is ClaimTransition.LOST:
        send_event(
            signals.job_claim_lost,
            sender,
            job_id=completion.job_id,
            claim_token=completion.claim_token,
            attempted=completion.kind,
        )
        return
    signal = {
        "succeeded": signals.job_succeeded,
        "retry": signals.job_retried,
        "dead": signals.job_dead,
    }[completion.kind]
    send_event(signal, sender, job_id=completion.job_id, completion=completion)


def send_event(signal: Signal, sender: type[Any], **kwargs: Any) -> None:
    """Send ``signal`` to every receiver, whatever some of them raise.

    Events are sent after the write they report has landed: a receiver that
    raises (a broken metrics hook) cannot undo it, and must neither stop the
    receivers after it nor break the worker, whose next step would otherwise run
    the job again. Each failure is logged with its traceback.
    """
    for receiver, response in signal.send_robust(sender=sender, **kwargs):
        if isinstance(response, Exception):
            logger.error(
                "a receiver of %s (%s) raised %s: %s; ignored (the write it reports has landed)",
                _signal_name(signal),
                getattr(receiver, "__qualname__", receiver),
                type(response).__name__,
                response,
                exc_info=(type(response), response, response.__traceback__),
            )


def _signal_name(signal: Signal) -> str:
    for name, value in vars(signals).items():
        if value is signal:
            return name
    return repr(signal)


def refused_completion(completion: Completion, reason: str) -> Completion:
    """The ``dead`` write that replaces a completion whose data the database refused.

    The job ends ``dead`` (``permanent``: running it again would produce the
    same data) with ``reason`` saying what could not be stored; its result is
    dropped and its attempt-log entry records the refusal instead of the error
    that could not be stored. Every part of it is storable by construction.
    """
    message = f"the job's {_what(completion)} could not be stored: {reason}"
    log: list[Any] | None = None
    if completion.attempt_log is not None:
        earlier = completion.attempt_log[:-1]
        last = completion.attempt_log[-1] if completion.attempt_log else {}
        worker = last.get("worker", "") if isinstance(last, dict) else ""
        try:
            log = clean_json(earlier)
        except UnstorableValue:
            log = []
        log.append(
            {
                "worker": clean_text(str(worker)),
                "error": {
                    "exception_class_path": f"{UnstorableValue.__module__}.UnstorableValue",
                    "traceback": message,
                },
            }
        )
    return Completion(
        completion.job_id,
        completion.claim_token,
        "dead",
        error_kind=DecidedErrorKind.PERMANENT.value,
        message=message,
        attempt_log=log,
    )


def _what(completion: Completion) -> str:
    return "result" if completion.kind == "succeeded" else "error report"


def whole_seconds(lease: float | timedelta) -> int:
    seconds = lease.total_seconds() if isinstance(lease, timedelta) else float(lease)
    if not 1 <= seconds <= MAX_LEASE_SECONDS:  # also refuses NaN
        raise ValueError(f"a lease must be from 1 to {MAX_LEASE_SECONDS} seconds, not {lease!r}")
    return round(seconds)


def result_max_bytes(conf: Any) -> int:
    """The result size limit: ``ARCATURE["MAX_PAYLOAD_BYTES"]`` where that setting exists."""
    limit = getattr(conf, "max_payload_bytes", None)
    return limit if isinstance(limit, int) and limit > 0 else DEFAULT_RESULT_MAX_BYTES


def transition_fields(completion: Completion) -> dict[str, Any]:
    """The fields one fenced completion writes (see :func:`transition_fields_sized`)."""
    return transition_fields_sized(completion)[0]


def transition_fields_sized(
    completion: Completion, conf: ArcatureSettings | None = None
) -> tuple[dict[str, Any], int]:
    """The fields one fenced completion writes: its named transition, every value sanitized.

    Texts are cleaned and cut to size (``core.text``), the result and the attempt
    log cleaned as JSON; the attempt log's last entry (this attempt's) carries
    the claim token (``CLAIM_MARKER``). Raises :class:`UnstorableValue` when a
    value cannot be stored at all (NaN, a huge int…): see :func:`refused_completion`.
    Also returns about how many characters of values the fields carry. ``conf``
    (read once for a whole batch) defaults to the current settings.
    """
    conf = conf or get_settings()
    size = 0
    if completion.kind == "succeeded":
        result, size = clean_json_sized(completion.result)
        check_result_size(result, result_max_bytes(conf), size)
        fields = succeeded_fields(result)
    elif completion.kind == "retry":
        when: datetime | DatabaseNow
        if completion.retry_delay is not None:
            waited = 0.0
            if completion.decided_monotonic is not None:
                waited = time.monotonic() - completion.decided_monotonic
            when = DatabaseNow(max(0.0, completion.retry_delay - waited))
        elif completion.available_at is not None:
            when = completion.available_at
        else:
            raise ValueError("a retry needs retry_delay or available_at")
        fields = retry_fields(
            when,
            truncate_for_storage(completion.message, conf.message_max_bytes),
            truncate_for_storage(completion.traceback, conf.traceback_max_bytes),
        )
        if completion.attempts is not None:
            fields["attempts"] = completion.attempts
    elif completion.kind == "dead":
        fields = dead_fields(
            known_error_kind(completion.error_kind),
            truncate_for_storage(completion.message, conf.message_max_bytes),
            truncate_for_storage(completion.traceback, conf.traceback_max_bytes),
        )
    else:
        raise ValueError(f"unknown completion kind {completion.kind!r}")
    if completion.kind != "succeeded":
        size += len(fields["last_error"]) + len(fields["last_traceback"])
    if completion.attempt_log is not None:
        log, log_size = clean_json_sized(
            completion.attempt_log, max_text_bytes=conf.traceback_max_bytes
        )
        log = list(log)
        if needs_bounding(log, log_size):
            log = bound_attempt_log(log)
            log_size = json_size(log)
        if log and isinstance(log[-1], dict):
            log[-1] = {**log[-1], CLAIM_MARKER: completion.claim_token.hex}
        fields["attempt_log"] = log
        size += log_size + 48
    return fields, size


#: The smallest sizes :func:`shrunk_completion` cuts to: a failure report stays readable.
_SHRUNK_MIN_TEXT = 1024
_SHRUNK_MIN_LOG = 4096


def shrunk_completion(completion: Completion, budget: int, step: int) -> Completion:
    """A smaller version of ``completion`` for a row over the statement budget (``step`` ≥ 1).

    Each step halves what the attempt log and the error texts may take (cut with a
    marker, the log's middle entries counted as dropped); the result is never cut,
    since a cut JSON value is a wrong value: a succeeded row still over the budget
    with its smallest log becomes the ``dead`` write of :func:`refused_completion`.
    """
    share = budget >> (step + 1)
    log = completion.attempt_log
    if log is not None:
        clean = clean_json(log, max_text_bytes=max(share // 8, _SHRUNK_MIN_TEXT))
        log = bound_attempt_log(
            clean, keep_latest=max(1, 20 >> step), max_bytes=max(share, _SHRUNK_MIN_LOG)
        )
    text = max(share // 2, _SHRUNK_MIN_TEXT)
    return dataclasses.replace(
        completion,
        attempt_log=log,
        message=truncate_for_storage(clean_text(completion.message), text),
        traceback=truncate_for_storage(clean_text(completion.traceback), text),
    )


#: The statement budget :func:`smallest_completion` cuts for: a few KiB of log and texts.
_SMALLEST_BUDGET = 64 * 1024


def smallest_completion(completion: Completion) -> Completion:
    """``completion`` with its attempt log and texts cut to a few KiB (the result kept).

    What a worker writes after the same write failed several times: the server may be
    refusing the row's size (MariaDB drops the connection instead of saying so).
    """
    return shrunk_completion(completion, _SMALLEST_BUDGET, 6)

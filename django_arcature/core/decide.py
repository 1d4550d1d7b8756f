"""What a run's outcome means for the job: succeed, retry later, or dead with a kind.

Pure: no I/O and no ``django.db`` import. The clock and the retry policy come in
as arguments, so every branch is a table test (DESIGN §3).
"""

from __future__ import annotations

import enum
import traceback as traceback_module
from dataclasses import dataclass
from datetime import datetime

from django_arcature.exceptions import Permanent, Snooze

from .retry import RetryPolicy


class ErrorKind(enum.StrEnum):
    """Why a job died. Same values as ``models.ErrorKind`` (a test keeps them equal)."""

    PERMANENT = "permanent"
    EXHAUSTED = "exhausted"
    MALFORMED = "malformed"
    UNKNOWN = "unknown"
    PANIC = "panic"
    TIMEOUT = "timeout"


@dataclass(frozen=True)
class JobState:
    """The part of a job the decision needs: ``attempts`` already counts this run."""

    attempts: int
    max_attempts: int

    @property
    def exhausted(self) -> bool:
        return self.attempts >= self.max_attempts


# --- What running the handler gave ------------------------------------------


@dataclass(frozen=True)
class Succeeded:
    """The handler returned; ``result`` is its JSON-ready return value."""

    result: object = None


@dataclass(frozen=True)
class Malformed:
    """The payload does not bind to the handler: retrying would fail the same way."""

    reason: str


@dataclass(frozen=True)
class Unknown:
    """No handler is registered under the job's task name on this worker.

    ``reason`` says why, when more is known than "nothing by that name" (a
    django.tasks row whose module the worker refuses to import, say); it stays
    out of the quoted name so the message reads as a sentence. ``detail`` is the
    registry's own sentence for a name it does not have (the nearest names, or
    where handlers are found), used as the message whole so it says what to change.
    """

    task_name: str
    reason: str = ""
    detail: str = ""

    @property
    def message(self) -> str:
        if self.reason:
            return f"not running {self.task_name!r}: {self.reason}"
        if self.detail:
            return self.detail
        return f"no job handler is registered under {self.task_name!r}"


@dataclass(frozen=True)
class Timeout:
    """The attempt ran past its per-attempt timeout."""

    seconds: float


@dataclass(frozen=True)
class HandlerError:
    """The handler raised an ``Exception``."""

    message: str
    permanent: bool = False
    traceback: str = ""
    exception_type: str = ""
    #: Seconds asked for by ``raise Snooze(seconds)``; None for any other error.
    snooze: float | None = None

    @classmethod
    def from_exception(cls, exc: BaseException) -> HandlerError:
        return cls(
            message=describe_exception(exc),
            permanent=isinstance(exc, Permanent),
            traceback=format_traceback(exc),
            exception_type=qualified_name(type(exc)),
            snooze=exc.seconds if isinstance(exc, Snooze) else None,
        )


@dataclass(frozen=True)
class Panic:
    """Something that is not an ``Exception`` escaped, or the worker failed mid-run."""

    message: str
    traceback: str = ""
    exception_type: str = ""

    @classmethod
    def from_exception(cls, exc: BaseException) -> Panic:
        return cls(
            message=describe_exception(exc),
            traceback=format_traceback(exc),
            exception_type=qualified_name(type(exc)),
        )


DispatchOutcome = Succeeded | Malformed | Unknown | Timeout | HandlerError | Panic


# --- What to write ------------------------------------------------------------


@dataclass(frozen=True)
class Retry:
    """Back to ``pending``, claimable again at ``available_at``."""

    available_at: datetime
    message: str
    traceback: str = ""


@dataclass(frozen=True)
class Dead:
    """Terminal failure, kept for the dead-letter page."""

    error_kind: ErrorKind
    message: str
    traceback: str = ""


Outcome = Succeeded | Retry | Dead


def decide(
    state: JobState, dispatch: DispatchOutcome, policy: RetryPolicy, now: datetime
) -> Outcome:
    """Map one attempt's dispatch outcome to the job's next state."""
    match dispatch:
        case Succeeded():
            return dispatch
        case Malformed(reason=reason):
            return Dead(ErrorKind.MALFORMED, f"payload does not fit the handler: {reason}")
        case Unknown():
            return Dead(ErrorKind.UNKNOWN, dispatch.message)
        case Panic(message=message, traceback=tb):
            return Dead(ErrorKind.PANIC, message, tb)
        case Timeout(seconds=seconds):
            message = f"attempt {state.attempts} exceeded its timeout of {seconds:g}s"
            if state.exhausted:
                return Dead(
                    ErrorKind.TIMEOUT, f"{message}; no attempts left of {state.max_attempts}"
                )
            return Retry(now + policy.delay_for(state.attempts), message)
        case HandlerError(message=message, permanent=permanent, traceback=tb):
            if permanent:
                return Dead(ErrorKind.PERMANENT, message, tb)
            if state.exhausted:
                return Dead(ErrorKind.EXHAUSTED, message, tb)
            return Retry(now + policy.delay_for(state.attempts), message, tb)
    raise TypeError(f"not a dispatch outcome: {dispatch!r}")  # pragma: no cover


# --- Helpers for what is stored ---------------------------------------------------


def qualified_name(cls: type) -> str:
    """``module.QualName`` of a class, as django.tasks reports exception classes."""
    return f"{cls.__module__}.{cls.__qualname__}"


def describe_exception(exc: BaseException) -> str:
    """``TypeName: message``, or just the type name when the message is empty."""
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def format_traceback(exc: BaseException) -> str:
    return "".join(traceback_module.format_exception(exc))

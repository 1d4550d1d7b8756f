"""Exceptions users raise or catch."""

from __future__ import annotations


class ArcatureError(Exception):
    """Base class for errors raised by django-arcature itself."""


class Permanent(Exception):
    """Raise from a handler to send the job straight to ``dead`` without retrying.

    Use it for failures no retry can fix (a deleted user, an invalid address):
    retrying them only delays the alert and wastes attempts.
    """


class UnknownTask(ArcatureError, LookupError):
    """No job handler is registered under the given name."""


class MalformedPayload(ArcatureError, ValueError):
    """A job's arguments do not fit its handler (signature, JSON or annotations)."""


class Snooze(Exception):
    """Raise from a handler to run the job again in ``seconds`` without using an attempt.

    For work that is not ready yet (a file still uploading, a rate limit's window):
    the job goes back to ``pending`` and its attempt is given back. A job may
    snooze ``ARCATURE["MAX_SNOOZES"]`` times (100 by default); past that, each
    snooze uses an attempt like any retry, so a job that snoozes forever ends
    ``dead`` (``exhausted``) where someone will see it.
    """

    def __init__(self, seconds: float = 60.0) -> None:
        if (
            not isinstance(seconds, int | float)
            or isinstance(seconds, bool)
            or not (0 <= seconds <= 7 * 24 * 3600)
        ):
            raise ValueError(f"Snooze takes 0 to 604800 seconds, not {seconds!r}")
        super().__init__(f"snoozed for {seconds:g}s")
        self.seconds = float(seconds)


class JobWaitTimeout(ArcatureError, TimeoutError):
    """``Job.wait()`` gave up: the job had not finished within its timeout."""

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

"""Text that will be stored: cleaned of what a database refuses, and cut to a size.

Pure, so every writer (the worker's completions, the admin, the django.tasks
backend) stores a message the same way on every database.
"""

from __future__ import annotations

import re

#: Default cap for stored messages; ``ARCATURE['MESSAGE_MAX_BYTES']`` overrides it.
DEFAULT_MESSAGE_MAX_BYTES = 2048
_TRUNCATION_MARK = "… [truncated]"
_REPLACEMENT = "\ufffd"
#: What a database cannot store in a text column: NUL (PostgreSQL) and lone surrogates.
_NEEDS_CLEANING = re.compile("[\x00\ud800-\udfff]")


def truncate_for_storage(text: str, max_bytes: int = DEFAULT_MESSAGE_MAX_BYTES) -> str:
    """Cut ``text`` to at most ``max_bytes`` UTF-8 bytes, still a valid string.

    A message is cut on a character boundary (never in the middle of a
    multi-byte character) and says it was cut, so nobody mistakes the end of
    a truncated traceback for the real one. Lone surrogates (``surrogateescape``
    file names) and NUL characters, which PostgreSQL refuses to store in text,
    become U+FFFD: a failure report must never fail to be written.
    """
    if max_bytes < 0:
        raise ValueError("max_bytes must not be negative")
    text = _NEEDS_CLEANING.sub(_REPLACEMENT, text)
    encoded = text.encode("utf-8")
    if len(encoded) <= max_bytes:
        return text
    mark = _TRUNCATION_MARK.encode("utf-8")
    if max_bytes <= len(mark):
        return encoded[:max_bytes].decode("utf-8", errors="ignore")
    return encoded[: max_bytes - len(mark)].decode("utf-8", errors="ignore") + _TRUNCATION_MARK

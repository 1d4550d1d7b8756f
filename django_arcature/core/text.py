"""Text that will be stored: cleaned of what a database refuses, and cut to a size.

Pure, so every writer (the worker's completions, the admin, the django.tasks
backend) stores a message the same way on every database.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

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


# --- JSON values a worker stores (results, attempt logs) -------------------------------

#: Levels of nesting a stored JSON value may have: MariaDB's JSON_VALID refuses a 32nd
#: (checked on 10.11), so every database refuses the same values.
JSON_MAX_DEPTH = 31


class UnstorableValue(ValueError):
    """A value no database could store as JSON (a non-finite float, a huge int, deep nesting)."""


def clean_text(text: str, max_bytes: int | None = None) -> str:
    """NUL and lone surrogates replaced by U+FFFD; cut to ``max_bytes`` if given.

    The one rule for every text the worker stores: the same on every database,
    where PostgreSQL would refuse the text and the others keep it.
    """
    if max_bytes is not None:
        return truncate_for_storage(text, max_bytes)
    return _NEEDS_CLEANING.sub(_REPLACEMENT, text)


def clean_json(value: object, *, max_text_bytes: int | None = None) -> Any:
    """The JSON ``value`` with every string (and key) passed through ``clean_text``.

    Numbers, booleans and None are kept as they are. Raises :class:`UnstorableValue`
    for what JSON cannot carry at all — NaN and infinities (refused by every
    database's JSON column), integers too long to print, nesting deeper than
    ``JSON_MAX_DEPTH``, non-JSON types — naming where in the value it sits.
    """
    return clean_json_sized(value, max_text_bytes=max_text_bytes)[0]


#: One encoder for every check (``json.dumps`` with options builds a new one per call).
_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False)


def clean_json_sized(value: object, *, max_text_bytes: int | None = None) -> tuple[Any, int]:
    """:func:`clean_json`, and about how many characters the value takes as JSON text.

    The worker's hot path: the value is serialised once, in C; only a value that
    needs cleaning (or is suspiciously deep, or has long strings to cut) is walked
    and copied. A clean value comes back as it was given, not copied.
    """
    if value is None or isinstance(value, bool):
        return value, 5
    if (
        isinstance(value, str)
        and (max_text_bytes is None or len(value) * 4 <= max_text_bytes)
        and _NEEDS_CLEANING.search(value) is None
    ):
        return value, len(value) + 2
    try:
        text = _ENCODER.encode(value)
    except (ValueError, TypeError, RecursionError) as exc:
        _clean(value, "", 0, max_text_bytes)  # names the culprit, if it can
        raise UnstorableValue(str(exc) or type(exc).__name__) from None
    clean = (
        (max_text_bytes is None or len(text) * 4 <= max_text_bytes)
        and "\\u0000" not in text
        and _NEEDS_CLEANING.search(text) is None
        and text.count("[") + text.count("{") <= JSON_MAX_DEPTH
    )
    if clean:
        return value, len(text)
    cleaned = _clean(value, "", 0, max_text_bytes)
    return cleaned, len(_ENCODER.encode(cleaned))


def _clean(value: object, path: str, depth: int, limit: int | None) -> Any:
    if isinstance(value, str):
        return clean_text(value, limit)
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        if value.bit_length() > _MAX_INT_BITS:
            raise UnstorableValue(f"the integer at {path or 'top level'} is too long to store")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise UnstorableValue(
                f"{value!r} at {path or 'top level'} is not a JSON number (NaN and "
                "infinities cannot be stored)"
            )
        return value
    if depth >= JSON_MAX_DEPTH:
        raise UnstorableValue(f"the value nests more than {JSON_MAX_DEPTH} levels deep")
    if isinstance(value, dict):
        cleaned: dict[str, Any] = {}
        for key, item in value.items():
            if isinstance(key, int | float | bool) or key is None:
                key = json.dumps(key)  # as JSON writes a number, boolean or null key
            elif not isinstance(key, str):
                raise UnstorableValue(f"the key {key!r} at {path or 'top level'} is not a string")
            cleaned[clean_text(key, limit)] = _clean(item, f"{path}[{key!r}]", depth + 1, limit)
        return cleaned
    if isinstance(value, list | tuple):
        return [
            _clean(item, f"{path}[{index}]", depth + 1, limit) for index, item in enumerate(value)
        ]
    raise UnstorableValue(f"a {type(value).__name__} at {path or 'top level'} is not a JSON value")


#: Python refuses to print integers of more than 4300 digits (``sys.int_info``); stay under.
_MAX_INT_BITS = 4300 * 3


#: The largest result (as stored JSON) a job may return, in bytes, unless
#: ``ARCATURE["MAX_PAYLOAD_BYTES"]`` says otherwise: the same bound as a job's arguments.
#: MariaDB refuses a statement over ``max_allowed_packet`` (16 MiB by default) and drops
#: the connection, which would look like an outage and be retried for ever.
DEFAULT_RESULT_MAX_BYTES = 1024 * 1024


def json_size(value: object) -> int:
    """How many bytes ``value`` takes as compact JSON text (as near as the databases store it)."""
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


def check_result_size(value: object, max_bytes: int, chars: int | None = None) -> None:
    """:class:`UnstorableValue` if the result is over ``max_bytes`` of JSON.

    ``chars``, the length of its JSON text when known, spares serialising a value
    that is clearly small (a character takes at most 4 bytes).
    """
    if chars is not None and chars * 4 <= max_bytes:
        return
    size = json_size(value)
    if size > max_bytes:
        raise UnstorableValue(
            f"it is {size} bytes of JSON, over the limit of {max_bytes} "
            "(ARCATURE['MAX_PAYLOAD_BYTES']); store large data elsewhere and return a reference"
        )

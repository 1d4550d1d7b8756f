"""The attempt log kept to a bounded size: its first entries, its latest, and a count.

Why: the worker appends one entry per attempt, each with a traceback of up to
``TRACEBACK_MAX_BYTES``. Unbounded, a job retried hundreds of times grew a row
over MariaDB's ``max_allowed_packet``; the server then drops the connection and
the write can never land. The first entry says how the trouble began, the
latest ones how it goes now; the ones between are replaced by one marker entry
``{"dropped": n}`` (no ``worker`` key) placed after the first ones, and the
count adds up over later writes. Pure, so every writer bounds a log the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .text import clean_json, json_size

#: Entries kept from the start of the log (how the trouble began).
ATTEMPT_LOG_KEEP_FIRST = 1
#: Entries kept from the end of the log (how it goes now; the last is this attempt's).
ATTEMPT_LOG_KEEP_LATEST = 20
#: The most bytes of JSON a stored attempt log takes: older entries go first, then
#: the kept entries' texts are cut. Far under the smallest server packet we support.
ATTEMPT_LOG_MAX_BYTES = 512 * 1024
#: The key of the marker entry counting the entries dropped from the log.
DROPPED_KEY = "dropped"
#: Room left for what a write adds to the last entry after bounding (the claim marker).
_RESERVED = 128
#: Texts of kept entries are never cut below this many bytes.
_MIN_TEXT = 64


def is_marker(entry: object) -> bool:
    """Whether ``entry`` is the ``{"dropped": n}`` marker, not an attempt's entry."""
    return isinstance(entry, dict) and DROPPED_KEY in entry and "worker" not in entry


def dropped_count(log: object) -> int:
    """How many attempts' entries were dropped from a stored log."""
    if not isinstance(log, list):
        return 0
    total = 0
    for entry in log:
        if is_marker(entry):
            value = entry.get(DROPPED_KEY)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                total += value
    return total


def needs_bounding(log: Sequence[Any], chars: int, max_bytes: int = ATTEMPT_LOG_MAX_BYTES) -> bool:
    """A cheap test for the hot path: ``chars`` is the length of the log's JSON text."""
    return (
        len(log) > ATTEMPT_LOG_KEEP_FIRST + ATTEMPT_LOG_KEEP_LATEST
        or chars * 4 > max_bytes - _RESERVED
    )


def bound_attempt_log(
    log: Sequence[Any],
    *,
    keep_first: int = ATTEMPT_LOG_KEEP_FIRST,
    keep_latest: int = ATTEMPT_LOG_KEEP_LATEST,
    max_bytes: int = ATTEMPT_LOG_MAX_BYTES,
) -> list[Any]:
    """``log`` (already cleaned JSON) within ``keep_first + keep_latest`` entries and
    ``max_bytes`` of JSON; the first and the last entries are always kept."""
    keep_latest = max(keep_latest, 1)
    dropped = dropped_count(list(log))
    entries = [entry for entry in log if not is_marker(entry)]
    if len(entries) > keep_first + keep_latest:
        dropped += len(entries) - keep_first - keep_latest
        entries = entries[:keep_first] + entries[-keep_latest:]
    limit = max_bytes - _RESERVED
    head = min(keep_first, max(len(entries) - 1, 0))

    def assemble() -> list[Any]:
        if not dropped:
            return list(entries)
        return [*entries[:head], {DROPPED_KEY: dropped}, *entries[head:]]

    bounded = assemble()
    size = json_size(bounded)
    # Oldest of the latest first; the first and the last stay.
    while size > limit and len(entries) > head + 1:
        removed = entries.pop(head)
        dropped += 1
        size -= json_size(removed) + 1
        if dropped == 1:
            size += json_size({DROPPED_KEY: dropped}) + 1
    bounded = assemble()
    size = json_size(bounded)
    text_bytes = limit
    while size > limit and text_bytes > _MIN_TEXT:
        text_bytes = max(text_bytes // 2, _MIN_TEXT)
        entries = [clean_json(entry, max_text_bytes=text_bytes) for entry in entries]
        bounded = assemble()
        size = json_size(bounded)
    if size > limit:  # an entry of very many keys: keep only who ran it
        entries = [_bare(entry) for entry in entries]
        bounded = assemble()
    return bounded


def _bare(entry: object) -> dict[str, Any]:
    worker = entry.get("worker", "") if isinstance(entry, dict) else ""
    succeeded = isinstance(entry, dict) and entry.get("error", "") is None
    return {
        "worker": str(worker)[:_MIN_TEXT],
        "error": None if succeeded else {"traceback": "[the entry was too large to keep]"},
    }

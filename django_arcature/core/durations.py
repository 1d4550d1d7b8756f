"""Durations as operators write them: ``90``, ``"90s"``, ``"15m"``, ``"7d"``, ``"2w"``."""

from __future__ import annotations

import re
from datetime import timedelta

__all__ = ["parse_duration"]

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")


def parse_duration(value: object) -> timedelta:
    """A non-negative :class:`~datetime.timedelta` from seconds, a timedelta or a short string.

    Raises ``ValueError`` with the accepted forms, so a setting or a command-line
    option can report it as it is.
    """
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str) and (match := _PATTERN.match(value.lower())):
        seconds = float(match.group(1)) * _UNITS[match.group(2) or "s"]
    else:
        raise ValueError(
            f"{value!r} is not a duration: use seconds (90) or a number with a unit "
            "s, m, h, d or w ('15m', '7d')"
        )
    if seconds < 0 or seconds != seconds or seconds == float("inf"):
        raise ValueError(f"{value!r} is not a duration of zero or more seconds")
    return timedelta(seconds=seconds)

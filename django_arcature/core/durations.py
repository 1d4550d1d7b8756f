"""Durations as operators write them: ``90``, ``"90s"``, ``"15m"``, ``"7d"``, ``"2w"``."""

from __future__ import annotations

import math
import re
from datetime import timedelta

__all__ = ["MAX_DURATION", "parse_duration"]

#: The longest duration any setting or option takes: 100 years (of 365.25 days).
#: Past it, ``timedelta`` overflows (a traceback instead of a message), and a
#: retention cutoff of "now minus N" leaves the databases' timestamp ranges in
#: different ways (PostgreSQL refuses it, SQLite quietly matches nothing), so one
#: bound keeps the behaviour the same on every database.
MAX_DURATION = timedelta(days=36525)

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
_MAX_SECONDS = MAX_DURATION.total_seconds()


def parse_duration(value: object) -> timedelta:
    """A :class:`~datetime.timedelta` from zero to :data:`MAX_DURATION`.

    Takes seconds, a timedelta or a short string. Raises ``ValueError`` (never
    ``OverflowError``) with the accepted forms, so a setting or a command-line
    option can report it as it is.
    """
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, int) and not isinstance(value, bool):
        # float() of an int past 1e308 raises OverflowError; anything that large is
        # past the bound anyway.
        seconds = float(value) if abs(value) < 10**300 else (math.inf if value > 0 else -math.inf)
    elif isinstance(value, float):
        seconds = value
    elif isinstance(value, str) and (match := _PATTERN.match(value.lower())):
        seconds = float(match.group(1)) * _UNITS[match.group(2) or "s"]
    else:
        raise ValueError(
            f"{value!r} is not a duration: use seconds (90) or a number with a unit "
            "s, m, h, d or w ('15m', '7d')"
        )
    if seconds < 0 or math.isnan(seconds):
        raise ValueError(f"{value!r} is not a duration of zero or more seconds")
    if seconds > _MAX_SECONDS:
        raise ValueError(
            f"{value!r} is too long a duration: at most 100 years "
            f"({MAX_DURATION.days}d, {_MAX_SECONDS:.0f} seconds)"
        )
    return timedelta(seconds=seconds)

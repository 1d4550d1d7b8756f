"""The limits every enqueue is checked against, the same on every database.

Each limit is what the strictest supported database can store unchanged, so a
value is accepted or refused at enqueue identically on PostgreSQL, MariaDB and
SQLite, before any SQL runs (a refusal by the database would abort the
caller's transaction on PostgreSQL). Pure: nothing here touches the database.
"""

from __future__ import annotations

import unicodedata

#: ``priority`` and ``max_attempts`` are 32-bit integer columns on every database
#: (SQLite would store more, PostgreSQL and MariaDB refuse it).
PRIORITY_MIN = -(2**31)
PRIORITY_MAX = 2**31 - 1
MAX_ATTEMPTS_MAX = 2**31 - 1
#: Column sizes of the job table (``Job.task_name``, ``.queue``, ``.unique_key``).
NAME_MAX_LENGTH = 255
QUEUE_MAX_LENGTH = 100
UNIQUE_KEY_MAX_LENGTH = 255
#: The longest per-attempt timeout that may be declared: a week, like the longest
#: lease. Far above any real attempt (leave the timeout unset for unbounded work);
#: far below what ``threading`` can wait for (about 9.2e9 seconds).
MAX_TIMEOUT_SECONDS = 7 * 24 * 3600

#: Unicode categories a name may not contain: controls, format characters
#: (zero-width spaces, direction marks), surrogates, private use, unassigned.
_INVISIBLE = frozenset({"Cc", "Cf", "Cs", "Co", "Cn"})


def name_problem(value: object, what: str, max_length: int) -> str | None:
    """Why ``value`` cannot be a task or queue name, or None.

    A name is 1 to ``max_length`` characters of visible text, without
    whitespace at either end: what an operator types after ``--queue``, and
    what every database compares the same way.
    """
    if not isinstance(value, str):
        return f"{what} must be a string, not {type(value).__name__}"
    if not 0 < len(value) <= max_length:
        return f"{what} must be a name of 1 to {max_length} characters, not {value[:80]!r}"
    if value != value.strip():
        return f"{what} {value!r} begins or ends with whitespace"
    if value.isascii() and value.isprintable():  # the usual name: no character to look up
        return None
    for char in value:
        if unicodedata.category(char) in _INVISIBLE:
            return (
                f"{what} {value!r} contains U+{ord(char):04X}, a control, invisible, "
                "surrogate or unassigned character"
            )
    return None


def unique_key_problem(value: object) -> str | None:
    """Why ``value`` cannot be a unique key, or None: any text PostgreSQL stores."""
    if not isinstance(value, str):
        return f"unique_key must be a string, not {type(value).__name__}"
    if not 0 < len(value) <= UNIQUE_KEY_MAX_LENGTH:
        return (
            f"unique_key must be a string of 1 to {UNIQUE_KEY_MAX_LENGTH} characters, "
            f"not {value[:80]!r}"
        )
    if "\x00" in value or any("\ud800" <= char <= "\udfff" for char in value):
        return "unique_key contains a NUL character or a lone surrogate"
    return None


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def priority_problem(value: object, what: str = "priority") -> str | None:
    if not is_int(value):
        return f"{what} must be an int, not {value!r}"
    assert isinstance(value, int)
    if not PRIORITY_MIN <= value <= PRIORITY_MAX:
        return f"{what} must be from {PRIORITY_MIN} to {PRIORITY_MAX} (32 bits), not {value}"
    return None


def max_attempts_problem(value: object, what: str = "max_attempts") -> str | None:
    if not is_int(value):
        return f"{what} must be a whole number, at least 1, not {value!r}"
    assert isinstance(value, int)
    if not 1 <= value <= MAX_ATTEMPTS_MAX:
        return (
            f"{what} must be a whole number, at least 1 and at most {MAX_ATTEMPTS_MAX} "
            f"(32 bits), not {value}"
        )
    return None

"""How many bytes one completion statement may carry, and how many a row's values take.

Why: MariaDB and MySQL refuse a statement over ``max_allowed_packet`` by dropping
the connection, which looks like an outage and was retried for ever. The
smallest default among the servers we support is MariaDB's 16 MiB (10.6 and
later; MySQL 8's is 64 MiB); PostgreSQL and SQLite send values apart from the
SQL and take up to a gigabyte. A statement is kept under
``STATEMENT_MAX_BYTES``, 1 MiB under that smallest default, and on MariaDB/MySQL
also under the server's own ``max_allowed_packet``, read once per connection,
in case an operator lowered it.

Sizes are counted as mysqlclient sends them, which is the most any of our
drivers sends: JSON as ``json.dumps`` writes it (non-ASCII as ``\\uXXXX``), and
every character the driver escapes (quote, backslash, NUL, newline…) twice.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from typing import Any

#: MariaDB's default ``max_allowed_packet`` since 10.6: the smallest default we support.
SMALLEST_PACKET_BYTES = 16 * 1024 * 1024
#: The most bytes one completion statement carries, values quoted into the SQL text.
STATEMENT_MAX_BYTES = SMALLEST_PACKET_BYTES - 1024 * 1024
#: Batched rows are grouped into statements of about this size (a bigger one is no faster).
CHUNK_TARGET_BYTES = 4 * 1024 * 1024
#: What a completion statement takes besides its rows' values (SQL text, ids, tokens).
STATEMENT_OVERHEAD_BYTES = 16 * 1024
#: What one row adds besides its large values (id, token, times, the join).
ROW_OVERHEAD_BYTES = 512
#: The columns whose value is stored as JSON.
JSON_COLUMNS = frozenset({"result", "attempt_log"})

_ENCODER = json.JSONEncoder()  # as Django's JSONField sends a value on MySQL/MariaDB
_ESCAPED = (b"\\", b"'", b'"', b"\x00", b"\n", b"\r", b"\x1a")


def quoted_bytes(text: str) -> int:
    """Bytes of ``text`` quoted as a SQL literal by mysqlclient (each escape doubles one)."""
    data = text.encode("utf-8", errors="surrogatepass")
    return len(data) + sum(data.count(char) for char in _ESCAPED) + 2


def value_bytes(name: str, value: Any) -> int:
    """Bytes one field's value takes in a statement."""
    if value is None or isinstance(value, bool | int | float | uuid.UUID):
        return 40
    if name in JSON_COLUMNS:
        try:
            return quoted_bytes(_ENCODER.encode(value))
        except (TypeError, ValueError, RecursionError):
            return 40  # not JSON (an expression): the statement refuses it anyway
    if isinstance(value, str):
        return quoted_bytes(value)
    return 40  # a database expression (the clock): a few bytes of SQL


def row_bytes(fields: Mapping[str, Any]) -> int:
    """Bytes a row of a completion statement takes, at most."""
    return ROW_OVERHEAD_BYTES + sum(value_bytes(name, value) for name, value in fields.items())


def budget_for_packet(packet: int | None) -> int:
    """The statement budget under a server's ``max_allowed_packet`` (None: no such limit)."""
    if packet is None or packet <= 0:
        return STATEMENT_MAX_BYTES
    return max(min(STATEMENT_MAX_BYTES, packet - 64 * 1024, packet * 15 // 16), 1024)


def statement_budget(using: str) -> int:
    """The most bytes one completion statement on ``using`` may carry."""
    from . import driver_for

    return budget_for_packet(driver_for(using).packet_limit())


def row_budget(using: str) -> int:
    """The most bytes one row's values may take: a statement of that row alone fits."""
    return max(statement_budget(using) - STATEMENT_OVERHEAD_BYTES, 1024)

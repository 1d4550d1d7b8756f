"""A list of ids that PostgreSQL looks up by key, whatever the statistics say.

A worker's flush of a wide fan-in's nodes sends statements over a few hundred ids
(the edges leaving them). Written as ``column = ANY(%s)`` with
the list as a constant, PostgreSQL costs each id as a descent of the index plus
a random page, and on tables of the size one workflow of 10,000 nodes makes
(20,000 edges) it chose a sequential scan of the whole table for every flush:
3-6 ms a statement of 200 ids where the index takes under 1 ms (EXPLAIN ANALYZE,
``benchmarks/fanin_flush.py``); over one drain of the 1 → 10,000 → 1 benchmark,
about a hundred scans of the edge table reading 1.7 million rows
(``pg_stat_user_tables``). The same list behind a sub-select
(``ARRAY(SELECT unnest(%s))``) is a value the planner cannot see into: it plans
for a short list, which is by key, and the statement stays one index scan, no
join (``tests/integration/test_fan_out_release_plan.py``). A list of thousands
then costs a descent each, which is also what the key costs when it is chosen.

Only where the ids are the rows' own key or a key's first column; elsewhere, and
on MariaDB and SQLite, the ``IN`` list of ``dependencies._id_list``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any


def keyed_id_list(
    connection: Any, column: str, ids: Iterable[uuid.UUID]
) -> tuple[str, list[Any]] | None:
    """``column`` is one of ``ids``, planned by key: the SQL and its parameters; None
    where this form is not needed (not PostgreSQL)."""
    if connection.vendor != "postgresql":
        return None
    return f"{column} = ANY(ARRAY(SELECT unnest(%s::uuid[])))", [list(ids)]

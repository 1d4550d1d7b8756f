"""Counts that stay cheap on a table of millions of rows: bounded, then the planner's guess.

Dead and finished jobs pile up until someone prunes them, so an exact
``COUNT(*)`` over them grows with the table. The admin's paginator and dashboard
and the Prometheus queue gauges all count the same way: exactly while the rows
are few (reading at most ``limit + 1`` index entries), and past that the row
estimate PostgreSQL and MySQL/MariaDB already keep. SQLite keeps none, so it is
counted exactly.
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from .base import driver_for


def planner_estimate(queryset: QuerySet[Any]) -> int | None:
    """The planner's guess at how many rows ``queryset`` returns; None where there is none."""
    sql, params = queryset.query.sql_with_params()
    return driver_for(queryset.db).estimate_rows(sql, params)


def bounded_count(queryset: QuerySet[Any], limit: int) -> tuple[int, bool]:
    """Exact count up to ``limit``, else the planner's estimate; (count, is_estimate)."""
    unordered = queryset.order_by()
    bounded = unordered[: limit + 1].count()
    if bounded <= limit:
        return bounded, False
    estimate = planner_estimate(unordered)
    if estimate is None:  # SQLite keeps no estimate
        return unordered.count(), False
    return max(estimate, bounded), True

"""The database drivers: one module per vendor behind the interface in ``base``.

Importing this package registers every driver; ``driver_for(alias)`` then
returns the one for a connection. Adding a vendor is one new module here (a
``Driver`` subclass) and a CI row.
"""

from __future__ import annotations

from . import mysql, postgresql, sqlite  # noqa: F401  (each registers its driver)
from .base import CompletionRow, Driver, driver_for
from .claimed import CLAIM_COLUMNS, ClaimedJob, claimed_from_row
from .clock import DatabaseNow, now_sql
from .conflicts import is_lock_conflict, retry_on_lock_conflict

__all__ = [
    "CLAIM_COLUMNS",
    "ClaimedJob",
    "CompletionRow",
    "DatabaseNow",
    "Driver",
    "claimed_from_row",
    "driver_for",
    "is_lock_conflict",
    "now_sql",
    "retry_on_lock_conflict",
]

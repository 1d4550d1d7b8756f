"""Retrying a statement that lost a lock race, and only that."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable

from django.db import OperationalError, connections

from .base import driver_class
from .broken_connection import discard_broken_connection

logger = logging.getLogger(__name__)

#: How many times a statement that hit a lock conflict is tried in all.
LOCK_RETRY_ATTEMPTS = 8


def is_lock_conflict(exc: BaseException, vendor: str) -> bool:
    """True when ``exc`` means "try again shortly", not "this is wrong"."""
    return driver_class(vendor).is_lock_conflict(exc)


def retry_on_lock_conflict[T](using: str, operation: Callable[[], T]) -> T:
    """Run ``operation``, again after a short random pause if it hit a lock conflict.

    Only when no outer transaction is open: inside one, the failed statement
    has already spoiled the caller's transaction and retrying would hide it.
    Bounded, so a database that stays locked is reported, not waited out forever.
    A connection the server dropped since the last write is replaced first, outside
    a transaction (:mod:`.broken_connection`).
    """
    connection = connections[using]
    discard_broken_connection(connection)
    for attempt in range(1, LOCK_RETRY_ATTEMPTS + 1):
        try:
            return operation()
        except OperationalError as exc:
            if (
                connection.in_atomic_block
                or attempt == LOCK_RETRY_ATTEMPTS
                or not is_lock_conflict(exc, connection.vendor)
            ):
                raise
            pause = min(0.005 * 2**attempt, 0.5) * (0.5 + random.random())
            logger.debug("lock conflict on %s (%s); retry %d in %.3fs", using, exc, attempt, pause)
            time.sleep(pause)
    raise AssertionError("unreachable")  # pragma: no cover

"""A batch callback's ``.using(...)`` options, kept on the batch until it fires.

The callback is enqueued long after ``Batch(...)`` ran, in a worker, from the
task name stored on the batch row. Without its options the callback of
``Batch(on_success=notify.using(queue="high"))`` went to its handler's default
queue: the options are stored beside the name, in a JSON form (``delay`` in
seconds, ``run_at`` as ISO 8601), and read back when it fires.

Reading them back never raises: the completion that fires the callback is the
last member's, and an exception there would abort it on every worker that
claims that member again. An entry that cannot be read (a row edited by hand,
say) is left out, and a warning names it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

logger = logging.getLogger(__name__)


def stored_form(options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` (``workflows.build._options`` of a callback) in their JSON form."""
    found: dict[str, Any] = {}
    for name, value in options.items():
        if isinstance(value, timedelta):
            value = value.total_seconds()
        elif isinstance(value, datetime):
            value = value.isoformat()
        found[name] = value
    return found


def enqueue_options(batch_id: Any, role: str, column: Any) -> dict[str, Any]:
    """Keyword arguments for ``enqueue()`` of the ``role`` callback ("on_success" or
    "on_finish"), from the batch's ``callback_options`` column."""
    if not isinstance(column, dict):
        logger.warning(
            "batch %s: its callback options %r are not an object; ignored", batch_id, column
        )
        return {}
    stored = column.get(role)
    if not isinstance(stored, dict):
        if stored not in (None, {}):
            logger.warning(
                "batch %s: %s options %r are not an object; ignored", batch_id, role, stored
            )
        return {}
    readers = {
        "queue": lambda v: v if isinstance(v, str) else None,
        "priority": _integer,
        "max_attempts": _integer,
        "delay": lambda v: (
            float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None
        ),
        "run_at": _moment,
    }
    options: dict[str, Any] = {}
    for name, value in stored.items():
        read = readers.get(name)
        parsed = read(value) if read is not None else None
        if parsed is None:
            logger.warning(
                "batch %s: %s option %s=%r cannot be used; the callback is enqueued without it",
                batch_id,
                role,
                name,
                value,
            )
            continue
        options[name] = parsed
    return options


def _integer(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _moment(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None

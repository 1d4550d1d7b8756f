"""Structured logs: a JSON formatter and a filter that stamps records with the current job.

Every record the worker writes about a job carries ``job_id``, ``task``,
``queue`` and ``attempt`` as ``extra`` fields. :class:`JobContextFilter` adds
the same fields to any other record emitted while a job runs (your handler's
own ``logger.info(...)``), and :class:`JSONFormatter` writes one JSON object
per line with every extra field, so log shippers index them without parsing
messages. Both are plain :mod:`logging` classes, usable from ``LOGGING``
(see docs/observability.md); structlog's ``ExtraAdder`` picks the same fields up.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from django_arcature.context import current_job

#: The ``extra`` fields describing a job.
JOB_FIELDS = ("job_id", "task", "queue", "attempt")

_STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime", "taskName"}


def job_extra(job: Any, **more: Any) -> dict[str, Any]:
    """The ``extra=`` mapping for a record about ``job`` (a claimed job or a Job row)."""
    return {
        "job_id": str(getattr(job, "id", "")),
        "task": getattr(job, "task_name", ""),
        "queue": getattr(job, "queue", ""),
        "attempt": getattr(job, "attempts", 0),
        **more,
    }


class JobContextFilter(logging.Filter):
    """Adds the running job's fields to records emitted inside a handler (and keeps
    fields a record already has)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "job_id", None) is not None:
            return True
        context = current_job()
        if context is not None:
            record.job_id = str(context.job_id)
            record.task = context.task_name
            record.queue = context.queue
            record.attempt = context.attempt
        return True


class JSONFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, every extra field,
    and the formatted exception if there is one."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                data[key] = value
        if record.exc_info:
            data["exception"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str)

"""django-arcature: a durable, database-backed background job queue for Django.

The public API below is imported on first use (PEP 562), not with the package:
``python -m django_arcature.worker.health`` imports this package first, and
that liveness probe must start without loading Django (a Kubernetes exec probe
has a timeout of a few seconds). None of it loads models either, so
``from django_arcature import job`` is safe in any module, settings included.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .context import JobContext, current_job
    from .core.retry import RetryPolicy
    from .exceptions import (
        ArcatureError,
        JobWaitTimeout,
        MalformedPayload,
        Permanent,
        Snooze,
        UnknownTask,
    )
    from .registry import job
    from .schedules.periodic import periodic
    from .workflows.build import Batch, Workflow, WorkflowError

__version__ = "0.2.0"

#: Public name → the module that defines it.
_LAZY = {
    "ArcatureError": ".exceptions",
    "Batch": ".workflows.build",
    "JobWaitTimeout": ".exceptions",
    "Snooze": ".exceptions",
    "Workflow": ".workflows.build",
    "WorkflowError": ".workflows.build",
    "JobContext": ".context",
    "MalformedPayload": ".exceptions",
    "Permanent": ".exceptions",
    "RetryPolicy": ".core.retry",
    "UnknownTask": ".exceptions",
    "current_job": ".context",
    "job": ".registry",
    "periodic": ".schedules.periodic",
}

__all__ = [
    "ArcatureError",
    "Batch",
    "JobContext",
    "JobWaitTimeout",
    "MalformedPayload",
    "Permanent",
    "RetryPolicy",
    "Snooze",
    "UnknownTask",
    "Workflow",
    "WorkflowError",
    "__version__",
    "current_job",
    "job",
    "periodic",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})

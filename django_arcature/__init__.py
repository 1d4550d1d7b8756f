"""django-arcature: a durable, database-backed background job queue for Django.

Only the public API is imported here, and none of it loads models, so
``from django_arcature import job`` is safe in any module, settings included.
"""

from __future__ import annotations

from .context import JobContext, current_job
from .core.retry import RetryPolicy
from .exceptions import ArcatureError, MalformedPayload, Permanent, UnknownTask
from .registry import job
from .schedules.periodic import periodic

__version__ = "0.1.0.dev0"

__all__ = [
    "ArcatureError",
    "JobContext",
    "MalformedPayload",
    "Permanent",
    "RetryPolicy",
    "UnknownTask",
    "__version__",
    "current_job",
    "job",
    "periodic",
]

"""The worker: the loop that claims and writes (``loop``), running one job (``dispatch``),
the wake-up channel (``wakeup``) and running a chosen job inline (``inline``).

``Worker`` and its companions are imported on first use (PEP 562), so that the
liveness probe ``python -m django_arcature.worker.health`` does not load the loop,
and with it Django, on its way to the one module it runs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .loop import Worker, WorkerStats, default_worker_id

__all__ = ["Worker", "WorkerStats", "default_worker_id"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(".loop", __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})

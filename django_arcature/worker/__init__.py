"""The worker: the loop that claims and writes (``loop``), running one job (``dispatch``),
the wake-up channel (``wakeup``) and running a chosen job inline (``inline``)."""

from __future__ import annotations

from .loop import Worker, WorkerStats, default_worker_id

__all__ = ["Worker", "WorkerStats", "default_worker_id"]

"""Worker-process fixtures shared with the concurrency suite."""

from __future__ import annotations

from tests.concurrency.conftest import events, start_worker

__all__ = ["events", "start_worker"]

"""Helpers of the fault suite: an in-process worker run with a watchdog, shared fixtures."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from django.db import connections

from django_arcature.worker import Worker
from tests.integration.conftest import Recorder, events, make_jobs

__all__ = ["Recorder", "WorkerRun", "events", "make_jobs", "run_worker", "wait_for"]


@dataclass
class WorkerRun:
    worker: Worker
    finished: bool
    status: int | None
    error: BaseException | None


def run_worker(
    timeout: float = 30, *, worker_class: type[Worker] = Worker, **options: Any
) -> WorkerRun:
    """Run a ``Worker`` (``burst`` unless told otherwise) on a thread; stop it past ``timeout``.

    A worker that does not finish on its own is asked to stop, and the run says
    it did not finish: a stuck worker fails its test instead of hanging the suite.
    ``worker_class`` is a subclass that records what the test looks at.
    """
    options.setdefault("burst", True)
    options.setdefault("install_signal_handlers", False)
    options.setdefault("shutdown_timeout", 1.0)
    worker = worker_class(**options)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["status"] = worker.run()
        except BaseException as exc:  # reported to the test, not lost in a thread
            box["error"] = exc
        finally:
            connections.close_all()

    thread = threading.Thread(target=target, name="test-worker")
    thread.start()
    thread.join(timeout)
    finished = not thread.is_alive() and "error" not in box
    if thread.is_alive():
        worker.stop()
        thread.join(10)
    return WorkerRun(worker, finished, box.get("status"), box.get("error"))


def start_worker_thread(**options: Any) -> tuple[Worker, threading.Thread, dict[str, Any]]:
    """A worker running until stopped, for tests that act while it runs."""
    options.setdefault("install_signal_handlers", False)
    options.setdefault("shutdown_timeout", 1.0)
    worker = Worker(**options)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["status"] = worker.run()
        except BaseException as exc:
            box["error"] = exc
        finally:
            connections.close_all()

    thread = threading.Thread(target=target, name="test-worker")
    thread.start()
    return worker, thread, box


def wait_for(condition: Callable[[], object], timeout: float = 30, what: str = "it") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.02)
    pytest.fail(f"timed out after {timeout}s waiting for {what}")

"""Helpers for the handler fault suites: an in-process worker with a time limit, and rows."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterable
from typing import Any

import pytest
from django.db import connections

from django_arcature.models import Job
from django_arcature.worker import Worker


def run_worker(timeout: float = 30, **options: Any) -> tuple[Worker, int]:
    """Run an in-process ``Worker`` (burst unless told otherwise) and return it with its status.

    It runs on its own thread so that a worker that hangs fails the test
    instead of hanging the suite; a thread that dies is reported, not ignored.
    """
    options.setdefault("burst", True)
    options.setdefault("install_signal_handlers", False)
    options.setdefault("shutdown_timeout", 5)
    worker = Worker(**options)
    box: list[int | BaseException] = []

    def target() -> None:
        try:
            box.append(worker.run())
        except BaseException as exc:
            box.append(exc)
        finally:
            connections.close_all()  # this thread's own connection (the worker's main one)

    thread = threading.Thread(target=target, name="test-worker")
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        worker.stop()
        thread.join(10)
        pytest.fail(f"the worker did not finish within {timeout}s: {worker.stats.summary()}")
    if not box:
        pytest.fail("the worker thread ended without a status")
    status = box[0]
    if isinstance(status, BaseException):
        raise AssertionError("the worker raised") from status
    return worker, status


def rows(ids: Iterable[uuid.UUID]) -> dict[uuid.UUID, Job]:
    wanted = list(ids)
    return {row.pk: row for row in Job.objects.filter(pk__in=wanted)}


def outcome(row: Job) -> tuple[str, str, int]:
    """``(status, error_kind, attempts)``: what each fault test asserts exactly."""
    return (row.status, row.error_kind or "", row.attempts)

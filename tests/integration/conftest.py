"""Shared helpers for the conformance suite: the same tests on SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.dispatch import Signal

from django_arcature import signals
from django_arcature.db import ClaimedJob
from django_arcature.models import Job

MakeJobs = Callable[..., list[uuid.UUID]]


@pytest.fixture
def make_jobs() -> MakeJobs:
    """``make_jobs(n, task="tests.noop", **enqueue_options)`` → the new jobs' ids, in order."""

    def make(n: int, task: str = "tests.noop", **options: Any) -> list[uuid.UUID]:
        if task == "tests.noop":
            arguments: list[Any] = [() for _ in range(n)]
        elif task == "tests.add":
            arguments = [(i, 1) for i in range(n)]
        else:
            raise ValueError(f"make_jobs does not know the arguments of {task!r}")
        return [job.id for job in Job.objects.enqueue_many(task, arguments, **options)]

    return make


def claim_one(worker: str = "w1", lease: float = 60, **options: Any) -> ClaimedJob:
    """Claim exactly one job, failing the test if there is none."""
    claimed = Job.objects.claim(worker, lease=lease, batch=1, **options)
    assert len(claimed) == 1, "no job was claimable"
    return claimed[0]


def fresh(job_id: uuid.UUID) -> Job:
    return Job.objects.get(pk=job_id)


@dataclass
class Recorder:
    """Every observer event sent while the fixture is active, as ``(name, kwargs)``."""

    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def names(self) -> list[str]:
        return [name for name, _ in self.events]

    def clear(self) -> None:
        self.events.clear()


#: Events for metrics and tracing (claims, attempts, enqueue headers) are checked by
#: tests/observability; the lifecycle tests watch the outcome events.
INSTRUMENTATION = {"jobs_enqueuing", "jobs_claimed", "job_attempt_started", "job_attempt_finished"}
SIGNALS: dict[str, Signal] = {
    name: value
    for name, value in vars(signals).items()
    if isinstance(value, Signal) and name not in INSTRUMENTATION
}


@pytest.fixture
def events() -> Iterator[Recorder]:
    recorder = Recorder()
    receivers = []
    for name, signal in SIGNALS.items():

        def receive(sender: Any, _name: str = name, **kwargs: Any) -> None:
            kwargs.pop("signal", None)
            recorder.events.append((_name, kwargs))

        signal.connect(receive, weak=False)
        receivers.append((signal, receive))
    yield recorder
    for signal, receive in receivers:
        signal.disconnect(receive)

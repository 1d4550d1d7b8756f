"""Shared helpers for the conformance suite: the same tests on SQLite, PostgreSQL and MariaDB."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from django.db import connection
from django.dispatch import Signal

from django_arcature import Workflow, signals
from django_arcature.db import ClaimedJob
from django_arcature.models import Job
from tests.testapp import workflow_jobs as wf

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


#: A row trigger that fails the statement when a row's first argument is "boom".
BOOM = {
    "postgresql": [
        """CREATE FUNCTION arcature_test_boom() RETURNS trigger AS $$
        BEGIN
            IF NEW.payload->'args'->>0 = 'boom' THEN RAISE EXCEPTION 'boom row'; END IF;
            RETURN NEW;
        END $$ LANGUAGE plpgsql""",
        """CREATE TRIGGER arcature_test_boom BEFORE INSERT ON django_arcature_job
        FOR EACH ROW EXECUTE FUNCTION arcature_test_boom()""",
    ],
    "mysql": [
        """CREATE TRIGGER arcature_test_boom BEFORE INSERT ON django_arcature_job
        FOR EACH ROW BEGIN
            IF JSON_UNQUOTE(JSON_EXTRACT(NEW.payload, '$.args[0]')) = 'boom' THEN
                SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'boom row';
            END IF;
        END"""
    ],
    "sqlite": [
        """CREATE TRIGGER arcature_test_boom BEFORE INSERT ON django_arcature_job
        WHEN json_extract(NEW.payload, '$.args[0]') = 'boom'
        BEGIN SELECT RAISE(ABORT, 'boom row'); END"""
    ],
}
UNBOOM = {
    "postgresql": [
        "DROP TRIGGER IF EXISTS arcature_test_boom ON django_arcature_job",
        "DROP FUNCTION IF EXISTS arcature_test_boom()",
    ],
    "mysql": ["DROP TRIGGER IF EXISTS arcature_test_boom"],
    "sqlite": ["DROP TRIGGER IF EXISTS arcature_test_boom"],
}


@pytest.fixture
def boom_trigger() -> Iterator[None]:
    """A row trigger on the job table that refuses a row whose first argument is
    "boom": a row the database itself refuses, mid-statement, on every database."""
    with connection.cursor() as cursor:
        for sql in BOOM[connection.vendor]:
            cursor.execute(sql)
    yield
    with connection.cursor() as cursor:
        for sql in UNBOOM[connection.vendor]:
            cursor.execute(sql)


@pytest.fixture
def announced() -> Iterator[list[Job]]:
    """The jobs ``job_enqueued`` announced (sent once an enqueue has committed)."""
    seen: list[Job] = []

    def receive(sender: Any, job: Job, **kwargs: Any) -> None:
        seen.append(job)

    signals.job_enqueued.connect(receive, weak=False)
    yield seen
    signals.job_enqueued.disconnect(receive)


def member_flow(name: str) -> tuple[uuid.UUID, uuid.UUID]:
    """A two-node workflow (root, then child after it): the root a member to complete."""
    flow = Workflow(name)
    root = flow.add(wf.step, "root")
    child = flow.add(wf.step, "child", after=[root])
    flow.enqueue()
    return root.job_id, child.job_id

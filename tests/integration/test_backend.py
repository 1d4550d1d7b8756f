"""The django.tasks backend on every database: enqueue → claim → run → result.

Each job is run the way the worker runs it: ``Job.objects.claim``, then
``dispatch.process`` (which calls ``backend.dispatch_task_job`` for these rows)
with the task's retry policy and timeout from ``backend.task_overrides``, then
the fenced ``complete_many``. Real worker processes are in
tests/concurrency/test_backend_worker.py.
"""

from __future__ import annotations

import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from typing import Any

import django
import pytest
from asgiref.sync import async_to_sync
from django.test import override_settings
from django.utils import timezone

from django_arcature.backend import ArcatureBackend, ArcatureTask, task_overrides
from django_arcature.db import ClaimedJob
from django_arcature.models import Job
from django_arcature.tasks.compat import (
    FRAMEWORK,
    TASK_DECORATOR_TAKES_EXTRA_FIELDS,
    InvalidTask,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task_backends,
    task_enqueued,
    task_finished,
    task_started,
)
from django_arcature.tasks.compat import task as framework_task
from django_arcature.tasks.results import LOST_WORKER_ID
from django_arcature.transitions import Completion
from django_arcature.worker.dispatch import process
from tests.integration import backend_tasks as tasks

pytestmark = pytest.mark.django_db


def run_next(worker_id: str = "w1", **claim: Any) -> Completion | None:
    """Claim one job and run it as the worker does; None if nothing was claimable."""
    claimed = Job.objects.claim(worker_id, lease=60, batch=1, **claim)
    if not claimed:
        return None
    job = claimed[0]
    overrides = task_overrides(job)
    completion = process(
        job,
        worker_id=worker_id,
        policy=overrides.retry,
        timeout=overrides.timeout,
        cancel_event=threading.Event(),
    )
    Job.objects.complete_many([completion])
    if completion.kind == "retry":
        Job.objects.run_now(job.id)  # the retry delay is not what these tests are about
    return completion


def drain(worker_id: str = "w1") -> list[Completion]:
    done = []
    while (completion := run_next(worker_id)) is not None:
        done.append(completion)
    return done


# --- the round trip ---------------------------------------------------------------------------


def test_enqueue_then_worker_then_get_result_is_successful() -> None:
    result = tasks.add.enqueue(2, 3)
    assert result.status == TaskResultStatus.READY
    assert result.backend == "default"
    assert (result.args, result.kwargs) == ([2, 3], {})

    row = Job.objects.get(pk=uuid.UUID(result.id))
    assert row.task_name == "tests.integration.backend_tasks.add"
    assert (row.backend, row.queue, row.priority, row.status) == (
        "default",
        "default",
        0,
        "pending",
    )
    assert row.payload == {"args": [2, 3], "kwargs": {}}

    assert [c.kind for c in drain("worker-a")] == ["succeeded"]

    fetched = tasks.add.get_result(result.id)
    assert fetched.status == TaskResultStatus.SUCCESSFUL
    assert fetched.return_value == 5
    assert fetched.worker_ids == ["worker-a"]
    assert fetched.attempts == 1
    assert fetched.errors == []
    assert fetched.is_finished
    assert fetched.enqueued_at == row.created_at
    assert fetched.started_at is not None
    assert fetched.finished_at is not None
    assert fetched.task is tasks.add

    result.refresh()
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, 5)


def test_queue_name_and_priority_are_stored() -> None:
    result = tasks.send_email.enqueue("ada@example.com")
    row = Job.objects.get(pk=uuid.UUID(result.id))
    assert (row.queue, row.priority) == ("email", 10)
    assert run_next(queues=["default"]) is None
    assert run_next(queues=["email"]) is not None
    assert tasks.send_email.get_result(result.id).return_value == "sent to ada@example.com"


def test_async_task_runs_as_a_coroutine() -> None:
    result = tasks.async_add.enqueue(20, 22)
    drain()
    fetched = tasks.async_add.get_result(result.id)
    assert fetched.status == TaskResultStatus.SUCCESSFUL
    assert fetched.return_value == 42  # type: ignore[comparison-overlap]


def test_aenqueue_and_aget_result() -> None:
    result = async_to_sync(tasks.add.aenqueue)(1, 1)
    drain()
    fetched = async_to_sync(tasks.add.aget_result)(result.id)
    assert (fetched.status, fetched.return_value) == (TaskResultStatus.SUCCESSFUL, 2)
    async_to_sync(result.arefresh)()
    assert result.status == TaskResultStatus.SUCCESSFUL


# --- retries ----------------------------------------------------------------------------------


def test_failing_task_is_retried_then_failed_with_one_error_per_attempt() -> None:
    result = tasks.always_fails.enqueue("disk full")
    assert Job.objects.get(pk=uuid.UUID(result.id)).max_attempts == 3

    assert [c.kind for c in drain()] == ["retry", "retry", "dead"]

    fetched = tasks.always_fails.get_result(result.id)
    assert fetched.status == TaskResultStatus.FAILED
    assert fetched.attempts == 3
    assert fetched.worker_ids == ["w1", "w1", "w1"]
    assert len(fetched.errors) == 3
    for error in fetched.errors:
        assert error.exception_class_path == "builtins.RuntimeError"
        assert error.exception_class is RuntimeError
        assert "RuntimeError: disk full" in error.traceback
        assert "backend_tasks.py" in error.traceback
    with pytest.raises(ValueError, match="Task failed"):
        fetched.return_value  # noqa: B018
    row = Job.objects.get(pk=uuid.UUID(result.id))
    assert (row.status, row.error_kind) == ("dead", "exhausted")


def test_permanent_error_fails_at_once() -> None:
    result = tasks.refuses.enqueue("the account is closed")
    assert [c.kind for c in drain()] == ["dead"]
    fetched = tasks.refuses.get_result(result.id)
    assert fetched.status == TaskResultStatus.FAILED
    assert [e.exception_class_path for e in fetched.errors] == [
        "django_arcature.exceptions.Permanent"
    ]


def test_context_sees_the_attempt_number_after_retries() -> None:
    result = tasks.attempt_number.enqueue(3)
    assert [c.kind for c in drain("w9")] == ["retry", "retry", "succeeded"]
    fetched = tasks.attempt_number.get_result(result.id)
    assert fetched.status == TaskResultStatus.SUCCESSFUL
    assert fetched.return_value == {
        "attempt": 3,
        "result_id": result.id,
        "worker_ids": ["w9", "w9", "w9"],
    }
    assert fetched.attempts == 3
    assert [e.exception_class_path for e in fetched.errors] == ["builtins.ValueError"] * 2
    assert "failing attempt 1" in fetched.errors[0].traceback
    assert "failing attempt 2" in fetched.errors[1].traceback


def test_max_attempts_comes_from_task_then_task_options_then_options() -> None:
    assert Job.objects.get(pk=uuid.UUID(tasks.always_fails.enqueue("x").id)).max_attempts == 3
    assert Job.objects.get(pk=uuid.UUID(tasks.add.enqueue(1, 2).id)).max_attempts == 3  # ARCATURE
    config = {
        "default": {
            "BACKEND": "django_arcature.backend.ArcatureBackend",
            "QUEUES": [],
            "OPTIONS": {
                "MODULES": ["tests.integration.backend_tasks"],
                "MAX_ATTEMPTS": 7,
                "TASK_OPTIONS": {
                    "tests.integration.backend_tasks.add": {"max_attempts": 2, "timeout": 9},
                    "tests.integration.backend_tasks.always_fails": {"max_attempts": 5},
                },
            },
        }
    }
    with override_settings(TASKS=config):
        ids = [tasks.add.enqueue(1, 2).id, tasks.always_fails.enqueue("x").id]
        ids.append(tasks.async_add.enqueue(1, 2).id)
        attempts = [Job.objects.get(pk=uuid.UUID(i)).max_attempts for i in ids]
        assert attempts == [2, 3, 7]  # TASK_OPTIONS, the task's own field, OPTIONS
        assert task_overrides(claimed_row(tasks.add.module_path)).timeout == 9
        assert task_overrides(claimed_row(tasks.async_add.module_path)).timeout is None
        assert task_overrides(claimed_row(tasks.async_sleeps.module_path)).timeout == 0.3


def claimed_row(task_name: str) -> ClaimedJob:
    return ClaimedJob(
        id=uuid.uuid4(),
        task_name=task_name,
        queue="default",
        priority=0,
        payload={"args": [], "kwargs": {}},
        attempts=1,
        max_attempts=3,
        claim_token=uuid.uuid4(),
        lease_seconds=30,
        backend="default",
    )


def test_timeout_cancels_a_coroutine_task_and_retries() -> None:
    result = tasks.async_sleeps.enqueue(30)
    kinds = [c.kind for c in drain()]
    assert kinds == ["retry", "dead"]
    row = Job.objects.get(pk=uuid.UUID(result.id))
    assert row.error_kind == "timeout"
    fetched = tasks.async_sleeps.get_result(result.id)
    assert fetched.status == TaskResultStatus.FAILED
    assert [e.exception_class_path for e in fetched.errors] == ["builtins.TimeoutError"] * 2
    # Both attempts were really stopped at their await, not left running for 30 s.
    deadline = time.monotonic() + 10
    while len(tasks.CANCELLED_SLEEPS) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert tasks.CANCELLED_SLEEPS == [30, 30]


def test_the_frameworks_own_decorator_passes_our_fields_where_it_can() -> None:
    expected = django.VERSION >= (6, 1) or FRAMEWORK == "django_tasks"
    assert expected == TASK_DECORATOR_TAKES_EXTRA_FIELDS
    if TASK_DECORATOR_TAKES_EXTRA_FIELDS:
        made = framework_task(max_attempts=4, timeout=5)(tasks.plain_function)  # type: ignore[call-overload]
        assert isinstance(made, ArcatureTask)
        assert (made.max_attempts, made.timeout) == (4, 5)
    else:  # Django 6.0: use django_arcature.backend.task or OPTIONS["TASK_OPTIONS"]
        with pytest.raises(TypeError):
            framework_task(max_attempts=4)(tasks.plain_function)  # type: ignore[call-overload]


# --- priorities and run_after -----------------------------------------------------------------


def test_higher_priority_runs_first() -> None:
    low = tasks.add.using(priority=-5).enqueue(0, 1)
    high = tasks.add.using(priority=50).enqueue(0, 2)
    middle = tasks.add.enqueue(0, 3)
    order = [c.job_id for c in drain()]
    assert order == [uuid.UUID(r.id) for r in (high, middle, low)]
    assert tasks.add.get_result(high.id).task.priority == 50


def test_run_after_is_honoured() -> None:
    later = timezone.now() + timedelta(hours=1)
    deferred = tasks.add.using(run_after=later).enqueue(1, 1)
    now = tasks.add.enqueue(2, 2)
    row = Job.objects.get(pk=uuid.UUID(deferred.id))
    assert row.available_at == later
    assert [c.job_id for c in drain()] == [uuid.UUID(now.id)]
    assert tasks.add.get_result(deferred.id).status == TaskResultStatus.READY
    Job.objects.run_now(row.id)
    assert [c.job_id for c in drain()] == [row.id]
    assert tasks.add.get_result(deferred.id).status == TaskResultStatus.SUCCESSFUL


# --- signals ----------------------------------------------------------------------------------


@pytest.fixture
def task_signals() -> Iterator[list[tuple[str, str, str, bool]]]:
    """(signal, task name, status, whether an exception was being handled) per signal sent."""
    seen: list[tuple[str, str, str, bool]] = []
    receivers = []
    for name, signal in [
        ("enqueued", task_enqueued),
        ("started", task_started),
        ("finished", task_finished),
    ]:

        def receive(sender: Any, task_result: Any, _name: str = name, **kwargs: Any) -> None:
            assert sender is ArcatureBackend
            seen.append(
                (
                    _name,
                    task_result.task.name,
                    str(task_result.status),
                    sys.exc_info()[0] is not None,
                )
            )

        signal.connect(receive, weak=False)
        receivers.append((signal, receive))
    yield seen
    for signal, receive in receivers:
        signal.disconnect(receive)


def test_signals_are_sent_as_the_framework_documents(
    task_signals: list[tuple[str, str, str, bool]],
) -> None:
    tasks.add.enqueue(1, 2)
    drain()
    assert task_signals == [
        ("enqueued", "add", "READY", False),
        ("started", "add", "RUNNING", False),
        ("finished", "add", "SUCCESSFUL", False),
    ]
    task_signals.clear()
    tasks.attempt_number.enqueue(2)
    drain()
    # The failed attempt's task_finished is sent inside the except block; READY
    # because another attempt follows.
    assert task_signals == [
        ("enqueued", "attempt_number", "READY", False),
        ("started", "attempt_number", "RUNNING", False),
        ("finished", "attempt_number", "READY", True),
        ("started", "attempt_number", "RUNNING", False),
        ("finished", "attempt_number", "SUCCESSFUL", False),
    ]
    task_signals.clear()
    tasks.refuses.enqueue("no")
    drain()
    assert task_signals[-1] == ("finished", "refuses", "FAILED", True)


def test_a_failing_signal_receiver_does_not_fail_the_task(caplog: pytest.LogCaptureFixture) -> None:
    def broken(**kwargs: Any) -> None:
        raise RuntimeError("monitoring is down")

    task_started.connect(broken, weak=False)
    task_finished.connect(broken, weak=False)
    try:
        result = tasks.add.enqueue(2, 2)
        assert [c.kind for c in drain()] == ["succeeded"]
    finally:
        task_started.disconnect(broken)
        task_finished.disconnect(broken)
    assert tasks.add.get_result(result.id).return_value == 4
    failures = [r for r in caplog.records if r.name == "django.dispatch"]
    assert len(failures) == 2  # started and finished, each logged by send_robust
    assert all("monitoring is down" in r.getMessage() for r in failures)


# --- what must never run ----------------------------------------------------------------------


def enqueue_row(task_name: str, backend: str = "default", **payload: Any) -> Job:
    """A row as a bad deploy or a hand-edit leaves it, bypassing the backend's checks."""
    return Job.objects.enqueue(task_name, args=payload.get("args", []), backend=backend)


def test_task_whose_module_vanished_fails_with_a_readable_error() -> None:
    row = enqueue_row("tests.testapp.tasks.removed_in_last_deploy.cleanup")
    assert [c.kind for c in drain()] == ["dead"]
    row.refresh_from_db()
    assert row.error_kind == "unknown"
    assert "cannot import module 'tests.testapp.tasks.removed_in_last_deploy'" in row.last_error

    fetched = task_backends["default"].get_result(str(row.id))
    assert fetched.status == TaskResultStatus.FAILED
    assert fetched.task.module_path == "tests.testapp.tasks.removed_in_last_deploy.cleanup"
    assert fetched.worker_ids == ["w1"]
    [error] = fetched.errors
    assert error.exception_class_path == "django_arcature.exceptions.UnknownTask"
    assert "cannot import module" in error.traceback


def test_a_row_naming_a_plain_function_never_calls_it() -> None:
    row = enqueue_row("tests.integration.backend_tasks.plain_function", args=["called"])
    drain()
    row.refresh_from_db()
    assert (row.status, row.error_kind) == ("dead", "unknown")
    assert "is a function, not a django.tasks Task" in row.last_error
    assert tasks.PLAIN_CALLS == []


def test_a_row_outside_installed_apps_is_not_even_imported() -> None:
    module = "tests.integration.backend_untrusted"
    row = enqueue_row(f"{module}.anything")
    drain()
    row.refresh_from_db()
    assert (row.status, row.error_kind) == ("dead", "unknown")
    assert "does not define a decorated function 'anything'" in row.last_error
    assert module not in sys.modules
    row = enqueue_row("os.system", args=["echo pwned"])
    drain()
    row.refresh_from_db()
    assert (row.status, row.error_kind) == ("dead", "unknown")
    # The reason reads as a sentence about the task, not as part of a quoted name.
    assert row.last_error.startswith(
        "not running 'os.system': module 'os' is in the standard library"
    ), row.last_error


def test_a_row_for_a_backend_that_is_not_ours_is_refused() -> None:
    config = {
        "default": {"BACKEND": "django_arcature.backend.ArcatureBackend", "QUEUES": []},
        "inline": {"BACKEND": immediate_backend_path()},
    }
    with override_settings(TASKS=config):
        row = enqueue_row("tests.integration.backend_tasks.add", backend="inline", args=[1, 2])
        drain()
    row.refresh_from_db()
    assert (row.status, row.error_kind) == ("dead", "unknown")
    assert "TASKS['inline'] is not configured as an ArcatureBackend" in row.last_error


def immediate_backend_path() -> str:
    return f"{FRAMEWORK}.backends.immediate.ImmediateBackend"


def test_a_non_json_return_value_fails_without_retry() -> None:
    result = tasks.returns_a_set.enqueue()
    assert [c.kind for c in drain()] == ["dead"]
    fetched = tasks.returns_a_set.get_result(result.id)
    assert fetched.status == TaskResultStatus.FAILED
    [error] = fetched.errors
    assert error.exception_class_path == "django_arcature.tasks.dispatch.ReturnValueNotJSON"
    assert "cannot be stored as JSON" in error.traceback


# --- states and ids ---------------------------------------------------------------------------


def test_running_and_cancelled_states() -> None:
    result = tasks.add.enqueue(1, 2)
    Job.objects.claim("busy-worker", lease=60, batch=1)
    running = tasks.add.get_result(result.id)
    assert running.status == TaskResultStatus.RUNNING
    assert running.worker_ids == ["busy-worker"]
    assert running.last_attempted_at is not None
    assert not running.is_finished

    other = tasks.add.enqueue(3, 4)
    Job.objects.cancel(uuid.UUID(other.id))
    cancelled = tasks.add.get_result(other.id)
    assert cancelled.status == TaskResultStatus.FAILED
    assert (cancelled.worker_ids, cancelled.errors) == ([], [])

    # Cancelled while running: the worker's completion is fenced out, so the
    # attempt is reported from the row itself.
    Job.objects.cancel(uuid.UUID(result.id))
    assert run_next() is None
    cancelled = tasks.add.get_result(result.id)
    assert cancelled.status == TaskResultStatus.FAILED
    assert cancelled.worker_ids == ["busy-worker"]
    [error] = cancelled.errors
    assert error.exception_class_path == "django_arcature.tasks.results.TaskCancelled"


def test_attempt_of_a_killed_worker_counts_as_a_lost_attempt() -> None:
    result = tasks.attempt_number.enqueue(1)
    job_id = uuid.UUID(result.id)
    Job.objects.claim("crashed", lease=60, batch=1)
    # What a sweep does once the crashed worker's lease has expired.
    Job.objects.filter(pk=job_id).update(lease_expires_at=timezone.now() - timedelta(seconds=5))
    assert Job.objects.sweep_expired_leases() == 1
    assert [c.kind for c in drain("rescuer")] == ["succeeded"]
    fetched = tasks.attempt_number.get_result(result.id)
    assert fetched.status == TaskResultStatus.SUCCESSFUL
    assert fetched.worker_ids == [LOST_WORKER_ID, "rescuer"]
    assert fetched.return_value["attempt"] == 2
    [error] = fetched.errors
    assert error.exception_class_path == "django_arcature.tasks.results.LeaseExpired"
    assert "lease expired" in error.traceback


def test_last_attempt_lost_with_no_attempts_left_is_failed_with_its_worker() -> None:
    result = tasks.add.enqueue(1, 2)
    job_id = uuid.UUID(result.id)
    Job.objects.filter(pk=job_id).update(max_attempts=1)
    Job.objects.claim("crashed", lease=60, batch=1)
    Job.objects.filter(pk=job_id).update(lease_expires_at=timezone.now() - timedelta(seconds=5))
    assert Job.objects.sweep_expired_leases() == 1
    fetched = tasks.add.get_result(result.id)
    assert fetched.status == TaskResultStatus.FAILED
    assert fetched.worker_ids == ["crashed"]
    [error] = fetched.errors
    assert error.exception_class_path == "django_arcature.tasks.results.LeaseExpired"
    assert "no attempts left" in error.traceback


@pytest.mark.parametrize("result_id", ["", "nope", str(uuid.uuid4()), "1" * 40])
def test_unknown_or_malformed_ids_raise_does_not_exist(result_id: str) -> None:
    with pytest.raises(TaskResultDoesNotExist):
        task_backends["default"].get_result(result_id)


def test_plain_job_rows_are_not_task_results() -> None:
    job = Job.objects.enqueue("tests.add", args=[1, 2])
    with pytest.raises(TaskResultDoesNotExist):
        task_backends["default"].get_result(str(job.id))


# --- refused at enqueue -----------------------------------------------------------------------


def test_arguments_that_are_not_json_are_refused_as_the_framework_refuses_them() -> None:
    """What the framework accepts is accepted (tests/integration/test_backend_arguments.py)."""
    with pytest.raises(TypeError, match="Unsupported type"):
        tasks.add.enqueue(timezone.now(), 1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="NaN"):
        tasks.add.enqueue(float("nan"), 1)  # type: ignore[arg-type]
    assert not Job.objects.exists()


def test_naive_run_after_and_bad_overrides_are_refused() -> None:
    with pytest.raises(InvalidTask):
        tasks.add.using(run_after=timezone.now().replace(tzinfo=None)).enqueue(1, 2)
    with pytest.raises(InvalidTask, match="max_attempts"):
        replace(tasks.always_fails, max_attempts=0)
    with pytest.raises(InvalidTask, match="timeout"):
        replace(tasks.always_fails, timeout=-1)


def test_a_task_not_reachable_by_its_module_path_is_refused() -> None:
    def hidden(a: int) -> int:
        return a

    hidden.__qualname__ = "hidden"
    hidden.__module__ = tasks.__name__
    task = replace(tasks.add, func=hidden)
    with pytest.raises(InvalidTask, match="does not name this task"):
        task.enqueue(1)  # type: ignore[call-arg]


# --- checks -----------------------------------------------------------------------------------


def test_check_is_clean_for_a_valid_configuration() -> None:
    assert task_backends["default"].check() == []


def test_check_reports_bad_options() -> None:
    backend = ArcatureBackend(
        "broken",
        {
            "OPTIONS": {
                "MAX_ATTEMPTS": 0,
                "RETRY": {"base": 1},
                "TIMEOUT": "soon",
                "TASK_OPTIONS": {"nodots": {}},
                "SURPRISE": True,
            }
        },
    )
    messages = backend.check()
    assert {m.id for m in messages} == {"arcature.E102"}
    # An installed package has no docs/ folder: the hint names the page instead.
    assert all("docs/" not in str(m.hint) for m in messages)
    text = "\n".join(m.msg for m in messages)
    for needle in ["MAX_ATTEMPTS", "'base'", "timeout", "nodots", "SURPRISE"]:
        assert needle.lower() in text.lower()
    with pytest.raises(Exception, match=r"MAX_ATTEMPTS|max_attempts"):
        backend.enqueue(tasks.add, [1, 2], {})

"""Job handlers the test suite enqueues and runs."""

from __future__ import annotations

from django_arcature import Permanent, job


@job(name="tests.add")
def add(a: int, b: int) -> int:
    return a + b


@job(name="tests.noop")
def noop() -> None:
    return None


@job(name="tests.fail_permanently")
def fail_permanently(reason: str) -> None:
    raise Permanent(reason)


@job(name="tests.always_fails", max_attempts=2)
def always_fails() -> None:
    raise RuntimeError("this job always fails")


# --- Handlers for the worker process tests (tests/concurrency) ------------------------

import os as _os  # noqa: E402
import time as _time  # noqa: E402

from django_arcature import RetryPolicy  # noqa: E402
from django_arcature.context import current_job  # noqa: E402

from . import (  # noqa: E402
    observability,  # noqa: F401  (traces into a file when asked to)
    worker_events,  # noqa: F401  (records observer events when asked to)
)

_NO_BACKOFF = RetryPolicy(base_seconds=0, jitter=0)


@job(name="tests.sleep")
def sleep(seconds: float) -> str:
    """Sleeps without looking at cancellation (a handler that ignores its context)."""
    _time.sleep(seconds)
    return "slept"


@job(name="tests.wait_for_file")
def wait_for_file(path: str, seconds: float) -> str:
    """Runs until ``path`` exists (at most ``seconds``): a job whose end the test decides,
    so a loaded machine cannot let it finish before the test has looked."""
    deadline = _time.monotonic() + seconds
    while not _os.path.exists(path):
        if _time.monotonic() > deadline:
            return "gave up"
        _time.sleep(0.05)
    return "released"


@job(name="tests.wait_for_cancel")
def wait_for_cancel(seconds: float) -> str:
    """Waits up to ``seconds``, returning early once the worker says the claim is gone."""
    context = current_job()
    assert context is not None
    return "cancelled" if context.wait(seconds) else "finished"


@job(name="tests.flaky_once", retry=_NO_BACKOFF)
def flaky_once() -> str:
    context = current_job()
    assert context is not None
    if context.attempt == 1:
        raise RuntimeError("first attempt fails")
    return "second attempt"


@job(name="tests.fails_fast", max_attempts=2, retry=_NO_BACKOFF)
def fails_fast() -> None:
    raise RuntimeError("fails every time")


@job(name="tests.async_double")
async def async_double(x: int) -> int:
    import asyncio

    await asyncio.sleep(0.01)
    return x * 2


@job(name="tests.stubborn_timeout", timeout=0.5, max_attempts=1)
def stubborn_timeout() -> str:
    _time.sleep(3)
    return "too late"


@job(name="tests.hang_first_run")
def hang_first_run(path: str) -> str:
    """Appends a line per run to ``path``; the first run hangs (to be SIGKILLed)."""
    with open(path, "a") as log:
        log.write(f"{_os.getpid()}\n")
    with open(path) as log:
        runs = len(log.readlines())
    if runs == 1:
        _time.sleep(120)
    return f"run {runs}"


@job(name="tests.log_progress")
def log_progress(step: str) -> str:
    """Logs from inside a handler: the record should carry the job's fields."""
    import logging

    logging.getLogger("tests.jobs").info("working on %s", step)
    return step


@job(name="tests.traced_sync")
def traced_sync() -> str:
    """Opens a span of its own: it should nest under the attempt's consumer span."""
    from opentelemetry import trace

    with trace.get_tracer("tests").start_as_current_span("inside sync"):
        return "traced"


@job(name="tests.traced_async")
async def traced_async() -> str:
    from opentelemetry import trace

    with trace.get_tracer("tests").start_as_current_span("inside async"):
        return "traced"


@job(name="tests.traced_timed", timeout=30)
def traced_timed() -> str:
    """Runs on the timeout's own thread: the span context must follow it there."""
    from opentelemetry import trace

    with trace.get_tracer("tests").start_as_current_span("inside timed"):
        return "traced"


@job(name="tests.slot_key")
def slot_key() -> str | None:
    """Returns the unique key the running job holds (a schedule slot's key), kept as its result."""
    from django_arcature.models import Job

    context = current_job()
    assert context is not None
    return Job.objects.filter(pk=context.job_id).values_list("unique_key", flat=True).first()


@job(name="tests.timed", max_attempts=1)
def timed(path: str, seconds: float) -> None:
    """Sleeps, then appends ``start end pid`` (wall clock) to ``path``: overlap and start rate."""
    started = _time.time()
    _time.sleep(seconds)
    with open(path, "a") as log:
        log.write(f"{started!r} {_time.time()!r} {_os.getpid()}\n")


# --- Handlers for the input suites (tests/integration/test_input_*.py, tests/properties) ---

from typing import Any as _Any  # noqa: E402


@job(name="tests.echo")
def echo(value: _Any) -> _Any:
    """Returns its argument: what went in must come back, types included."""
    return value


@job(name="tests.raise_text", max_attempts=1)
def raise_text(text: str, poison: bool = False) -> None:
    """Fails with ``text`` as the error message (handler-controlled text for the admin).

    With ``poison`` the message also carries what no payload may: a NUL and a
    lone surrogate, which only the handler itself can produce.
    """
    raise RuntimeError(text + ("\x00\ud800" if poison else ""))


@job(name="tests.unique_echo", unique=True)
def unique_echo(value: _Any) -> _Any:
    return value


from . import (  # noqa: E402
    handler_fault_jobs,  # noqa: F401  (tests/faults/test_handler_*.py)
    limits_jobs,  # noqa: F401  (tests/limits/)
    workflow_jobs,  # noqa: F401  (workflow and batch handlers)
)

"""Handlers of the limits-under-faults suite (tests/limits): each records when it runs.

A line per start and per end (``start|end job-id attempt pid monotonic``),
appended with one ``write`` on an ``O_APPEND`` file so that lines from
several processes never interleave. ``time.monotonic`` is the system-wide
``CLOCK_MONOTONIC`` on Linux, so instants from different worker processes on
one host compare. The handlers sleep in ``time.sleep`` without looking at
cancellation, like a handler stuck in a C call: only the process ending stops
them early, which is exactly the case where a slot could be freed too soon.
"""

from __future__ import annotations

import os
import time

from django_arcature import RetryPolicy, job
from django_arcature.context import current_job

_NO_BACKOFF = RetryPolicy(base_seconds=0, jitter=0)


def record(log: str, event: str) -> None:
    context = current_job()
    assert context is not None
    line = f"{event} {context.job_id} {context.attempt} {os.getpid()} {time.monotonic():.6f}\n"
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


@job(name="tests.limits.occupy", max_attempts=5, retry=_NO_BACKOFF)
def occupy(log: str, seconds: float) -> str:
    """Holds its slot for ``seconds``, whatever it is told."""
    record(log, "start")
    time.sleep(seconds)
    record(log, "end")
    return "done"


@job(name="tests.limits.overrun", timeout=0.3, max_attempts=2, retry=_NO_BACKOFF)
def overrun(log: str, seconds: float) -> str:
    """Runs past its 0.3 s timeout and the grace period: its thread is abandoned."""
    record(log, "start")
    time.sleep(seconds)
    record(log, "end")
    return "done"

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

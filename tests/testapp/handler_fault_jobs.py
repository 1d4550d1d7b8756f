"""Handlers that misbehave on purpose, for the handler fault-injection suite.

They raise what no handler should (``KeyboardInterrupt``, ``SystemExit`` …), hang,
block their event loop, or kill the whole worker process with ``os._exit``. The
suite in ``tests/faults/test_handler_*.py`` enqueues them and checks that each
misbehaviour ends exactly its own attempt, through the normal fenced write.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time

from django_arcature import RetryPolicy, job
from django_arcature.context import current_job

_NO_BACKOFF = RetryPolicy(base_seconds=0, jitter=0)


class HandlerBaseException(BaseException):
    """A BaseException of the handler's own, outside the builtin hierarchy of Exception."""


def _base_exception(kind: str) -> BaseException:
    if kind == "KeyboardInterrupt":
        return KeyboardInterrupt()
    if kind == "SystemExit":
        return SystemExit(3)
    if kind == "GeneratorExit":
        return GeneratorExit()
    if kind == "custom":
        return HandlerBaseException("raised by the handler")
    raise ValueError(kind)


#: Every kind the suite raises; each must end its attempt as ``dead`` ``panic``.
BASE_EXCEPTION_KINDS = ("KeyboardInterrupt", "SystemExit", "GeneratorExit", "custom")


@job(name="tests.faults.raise_base")
def raise_base(kind: str) -> None:
    raise _base_exception(kind)


@job(name="tests.faults.araise_base")
async def araise_base(kind: str) -> None:
    await asyncio.sleep(0)
    raise _base_exception(kind)


@job(name="tests.faults.raise_base_timed", timeout=30)
def raise_base_timed(kind: str) -> None:
    """The same, on the timed path (a deadline is being watched)."""
    raise _base_exception(kind)


@job(name="tests.faults.araise_base_timed", timeout=30)
async def araise_base_timed(kind: str) -> None:
    await asyncio.sleep(0)
    raise _base_exception(kind)


@job(name="tests.faults.async_value")
async def async_value(value: int) -> int:
    await asyncio.sleep(0.01)
    return value


#: Set by a test's teardown so in-process handlers that block stop blocking.
RELEASE = threading.Event()


@job(name="tests.faults.block_loop", timeout=0.5, max_attempts=2, retry=_NO_BACKOFF)
async def block_loop(seconds: float) -> str:
    """Blocks its event loop with a sync wait: no ``await`` ever gives the loop back."""
    RELEASE.wait(seconds)
    return "unblocked"


@job(name="tests.faults.hang", timeout=0.5, max_attempts=1)
def hang(seconds: float) -> str:
    """A sync handler that ignores ``current_job().cancelled`` and its timeout."""
    RELEASE.wait(seconds)
    return "woke"


@job(name="tests.faults.sleep_process", timeout=0.5, max_attempts=1)
def sleep_process(seconds: float) -> str:
    """Hangs in ``time.sleep`` (a worker process test ends the process instead)."""
    time.sleep(seconds)
    return "woke"


@job(name="tests.faults.longest_timeout", timeout=7 * 24 * 3600)
def longest_timeout() -> str:
    return "ok"


@job(name="tests.faults.exit_on_first_attempt", retry=_NO_BACKOFF)
def exit_on_first_attempt(marker: str) -> str:
    """Kills the worker process outright on its first attempt; succeeds on the next."""
    context = current_job()
    assert context is not None
    with open(marker, "a") as out:
        out.write(f"attempt {context.attempt} by {context.worker_id}\n")
    if context.attempt == 1:
        os._exit(9)
    return f"attempt {context.attempt}"


@job(name="tests.faults.block_loop_long", timeout=5, max_attempts=1)
async def block_loop_long(seconds: float) -> str:
    """Like ``block_loop`` with room for other jobs to finish before its deadline."""
    RELEASE.wait(seconds)
    return "unblocked"

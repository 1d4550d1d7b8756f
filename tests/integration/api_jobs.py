"""Handlers for the application-API tests (enqueue, unique, testing helpers)."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime

from django_arcature import Permanent, RetryPolicy, job
from django_arcature.context import current_job

#: No waiting between attempts, so drain() and workers retry at once.
NO_BACKOFF = RetryPolicy(base_seconds=0, jitter=0)


@job(name="api.add")
def add(a: int, b: int = 0) -> int:
    return a + b


@job(name="api.greet", queue="mail", priority=3, max_attempts=5)
def greet(name: str, *, greeting: str = "Hello") -> str:
    return f"{greeting}, {name}!"


@job(name="api.schedule")
def schedule(delay: int, queue: str, priority: int = 0) -> dict[str, int | str]:
    """Parameters named like enqueue options: they must reach the handler untouched."""
    return {"delay": delay, "queue": queue, "priority": priority}


@job(name="api.typed")
def typed(
    count: int,
    ratio: float,
    label: str | None,
    flags: list[bool],
    scores: dict[str, int],
    enabled: bool = False,
) -> None:
    return None


@job(name="api.when")
def when(moment: str) -> str:
    return datetime.fromisoformat(moment).isoformat()


@job(name="api.fetch")
async def fetch(url: str) -> dict[str, str | int]:
    await asyncio.sleep(0.01)
    return {"url": url, "status": 200}


@job(name="api.unique_sync", unique=True)
def unique_sync(account_id: int, full: bool = False) -> int:
    return account_id


@job(name="api.flaky", retry=NO_BACKOFF, max_attempts=3)
def flaky(succeed_on: int) -> int:
    context = current_job()
    attempt = context.attempt if context else 1
    if attempt < succeed_on:
        raise ConnectionError(f"attempt {attempt}: the service is unavailable")
    return attempt


@job(name="api.declined")
def declined(amount_cents: int) -> None:
    raise Permanent(f"card declined for {amount_cents} cents")


@job(name="api.returns_set")
def returns_set() -> object:
    return {1, 2, 3}


@job(name="api.slow", timeout=0.2, retry=NO_BACKOFF, max_attempts=1)
def slow(seconds: float) -> str:
    context = current_job()
    if context is not None:
        context.wait(seconds)
    else:
        time.sleep(seconds)
    return "finished"


@job(name="api.chain")
def chain(remaining: int) -> int:
    if remaining > 0:
        chain.enqueue(remaining - 1)
    return remaining

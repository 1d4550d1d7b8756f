"""Plain django.tasks code: nothing here knows it runs on django-arcature.

Only ``TASKS`` in settings says where these go. On Django 5.2 the same code
imports from the ``django_tasks`` backport instead.
"""

from __future__ import annotations

import asyncio
from typing import Any

try:
    from django.tasks import TaskContext, TaskResult, task
except ImportError:  # Django 5.2 with the django-tasks backport
    from django_tasks import TaskContext, TaskResult, task  # type: ignore[no-redef]

__all__ = ["TaskResult", "flaky_fetch", "greet", "word_count"]


@task
def word_count(text: str) -> dict[str, int]:
    """A sync task with a JSON return value."""
    return {"words": len(text.split()), "characters": len(text)}


@task(priority=10, queue_name="default")
async def greet(name: str) -> str:
    """A coroutine task: the worker awaits it."""
    await asyncio.sleep(0.01)
    return f"Hello, {name}!"


@task(takes_context=True)
def flaky_fetch(context: TaskContext, url: str) -> dict[str, Any]:  # type: ignore[type-arg]
    """Fails on its first attempt, as a remote service sometimes does; the backend retries it."""
    if context.attempt == 1:
        raise ConnectionError(f"{url} did not answer (attempt {context.attempt})")
    return {"url": url, "fetched_on_attempt": context.attempt}

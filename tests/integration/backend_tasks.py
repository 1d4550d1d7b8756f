"""django.tasks tasks the backend tests enqueue; workers import them by module path.

Written against ``tasks_compat`` so the same module runs on ``django.tasks``
(Django 6.x) and the ``django_tasks`` backport (Django 5.2), as a user's would.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

from django_arcature import Permanent
from django_arcature.backend import task as arcature_task
from django_arcature.tasks.compat import TaskContext, task

#: Calls of ``plain_function`` in this process: it is not a Task and must never run.
PLAIN_CALLS: list[str] = []
#: ``async_sleeps`` calls that were cancelled at their ``await`` (by a timeout).
CANCELLED_SLEEPS: list[float] = []


@task
def add(a: int, b: int) -> int:
    return a + b


@task(priority=10, queue_name="email")
def send_email(address: str) -> str:
    return f"sent to {address}"


@task
async def async_add(a: int, b: int) -> int:
    await asyncio.sleep(0)
    return a + b


@arcature_task(max_attempts=3)
def always_fails(reason: str) -> None:
    raise RuntimeError(reason)


@task(takes_context=True)
def attempt_number(
    context: TaskContext,  # type: ignore[type-arg]  # generic only in django-stubs
    succeed_on: int,
) -> dict[str, Any]:
    """Fails until attempt ``succeed_on``; returns what the context said."""
    if context.attempt < succeed_on:
        raise ValueError(f"failing attempt {context.attempt}")
    return {
        "attempt": context.attempt,
        "result_id": context.task_result.id,
        "worker_ids": context.task_result.worker_ids,
    }


@task
def refuses(reason: str) -> None:
    raise Permanent(reason)


@task
def returns_a_set() -> Any:
    return {1, 2}


@task
def sleeps_then_returns(seconds: float, started_marker: str) -> str:
    """Writes ``started_marker`` once per attempt, then sleeps: the SIGKILL target."""
    with open(started_marker, "a") as out:
        out.write(f"{os.getpid()}\n")
    time.sleep(seconds)
    return "woke up"


@arcature_task(timeout=0.3, max_attempts=2)
async def async_sleeps(seconds: float) -> str:
    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        CANCELLED_SLEEPS.append(seconds)
        raise
    return "slept"


def plain_function(label: str) -> None:
    """Not a Task: a row naming it must be refused, not called."""
    PLAIN_CALLS.append(label)


def started_count(marker: str) -> int:
    path = Path(marker)
    return len(path.read_text().splitlines()) if path.exists() else 0


@task
def echo_arguments(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """Returns what it was called with, as the worker passed it (the stored form)."""
    return {"args": list(args), "kwargs": kwargs}


@task
def delete_file(storage: Any, name: str) -> dict[str, Any]:
    """The shape of a storage package's task: ``delete_file(storage.deconstruct(), name)``.

    ``deconstruct()`` returns ``(path, args_tuple, kwargs_dict)``; the task
    receives it as lists, as django.tasks' JSON normalisation makes it.
    """
    path, args, kwargs = storage
    return {"storage": path, "args": args, "kwargs": kwargs, "deleted": name}


@task
def annotated_int(value: int) -> Any:
    """Python does not enforce the annotation, and neither does the framework."""
    return value

"""Tasks for the django.tasks conformance port: one per behaviour the port exercises.

Our own functions, shaped like the ones Django's ``tests/tasks`` suite uses
(a no-op in each decorator form, a sync and an async one, a task that answers,
tasks that fail in several ways, tasks that read their context).
"""

from __future__ import annotations

from typing import Any

from django_arcature.tasks.compat import TaskContext, task


@task()
def idle(*args: Any, **kwargs: Any) -> None:
    return None


@task
def idle_bare(*args: Any, **kwargs: Any) -> None:
    return None


@task()
async def idle_async(*args: Any, **kwargs: Any) -> None:
    return None


@task()
def answer() -> int:
    return 6 * 7


@task()
def raises_value_error() -> None:
    raise ValueError("the value was wrong")


@task()
def raises_system_exit() -> None:
    raise SystemExit("asked to exit")


@task()
def raises_nested_exception() -> None:
    raise ValueError(ValueError("wrapped inside"))


@task()
def returns_an_object() -> Any:
    return object()


@task(takes_context=True)
def own_id(context: TaskContext[Any, Any]) -> str:
    return str(context.task_result.id)


@task(takes_context=True)
def checks_attempt(context: TaskContext[Any, Any], expected: int) -> None:
    if not isinstance(context, TaskContext):
        raise TypeError(f"context is a {type(context).__name__}")
    if context.attempt != expected:
        raise AssertionError(f"attempt {context.attempt}, expected {expected}")


def plain(value: Any) -> int:
    """Not a task: the tests try to make tasks of it (its first parameter is not ``context``)."""
    return 0

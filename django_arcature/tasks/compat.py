"""One import site for Django's tasks framework, wherever it lives.

Django 6.0 and 6.1 ship it as ``django.tasks``; on Django 5.2 the ``django-tasks``
backport provides the same API as ``django_tasks`` (with ``InvalidTaskError``
instead of ``InvalidTask``). The backend imports everything from here so that
one code base serves both, and the differences that matter are named flags
instead of version checks scattered through the code.
"""

from __future__ import annotations

import inspect
import re
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

__all__ = [
    "BACKPORT_MINIMUM",
    "FRAMEWORK",
    "TASK_DECORATOR_TAKES_EXTRA_FIELDS",
    "BaseTaskBackend",
    "InvalidTask",
    "InvalidTaskBackend",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultMismatch",
    "TaskResultStatus",
    "backport_too_old",
    "normalize_json",
    "task",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]

#: The oldest django-tasks backport (Django 5.2) this package works with: 0.11 and
#: older name the statuses differently (``SUCCEEDED``, not ``SUCCESSFUL``).
BACKPORT_MINIMUM = (0, 12)


def backport_too_old(found: str) -> str | None:
    """Why django-tasks ``found`` cannot serve, or None when it can.

    Checked before importing the backport, so that an old one stops with the
    version to install instead of an AttributeError from inside the backend.
    """
    numbers = tuple(int(part) for part in re.findall(r"\d+", found)[:2])
    if numbers >= BACKPORT_MINIMUM:
        return None
    floor = ".".join(map(str, BACKPORT_MINIMUM))
    return (
        f"django-arcature needs django-tasks {floor} or later on Django 5.2 (found {found}): "
        f'pip install --upgrade "django-tasks>={floor}"'
    )


def _require_supported_backport() -> None:
    try:
        found = version("django-tasks")
    except PackageNotFoundError:
        return  # the import that follows says the backport is missing
    problem = backport_too_old(found)
    if problem is not None:
        raise ImportError(problem)


if TYPE_CHECKING:  # the type checker sees Django's own spelling (django-stubs)
    from django.tasks import Task, TaskContext, TaskResult, TaskResultStatus, task, task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import TaskError
    from django.tasks.exceptions import (
        InvalidTask,
        InvalidTaskBackend,
        TaskResultDoesNotExist,
        TaskResultMismatch,
    )
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json

    FRAMEWORK: str
else:
    try:
        from django.tasks import (
            Task,
            TaskContext,
            TaskResult,
            TaskResultStatus,
            task,
            task_backends,
        )
        from django.tasks.backends.base import BaseTaskBackend
        from django.tasks.base import TaskError
        from django.tasks.exceptions import (
            InvalidTask,
            InvalidTaskBackend,
            TaskResultDoesNotExist,
            TaskResultMismatch,
        )
        from django.tasks.signals import task_enqueued, task_finished, task_started
        from django.utils.json import normalize_json

        FRAMEWORK = "django.tasks"
    except ImportError:  # Django 5.2: the backport
        _require_supported_backport()
        from django_tasks import (
            TaskContext,
            TaskResult,
            TaskResultStatus,
            task,
            task_backends,
        )
        from django_tasks.backends.base import BaseTaskBackend
        from django_tasks.base import Task, TaskError
        from django_tasks.exceptions import InvalidTaskBackendError as InvalidTaskBackend
        from django_tasks.exceptions import InvalidTaskError as InvalidTask
        from django_tasks.exceptions import TaskResultDoesNotExist, TaskResultMismatch
        from django_tasks.signals import task_enqueued, task_finished, task_started
        from django_tasks.utils import normalize_json

        FRAMEWORK = "django_tasks"


def _decorator_passes_extra_fields() -> bool:
    """Django 6.1 and the backport forward unknown ``@task(...)`` keywords to
    ``task_class``; Django 6.0 refuses them with a TypeError."""
    parameters = inspect.signature(task).parameters.values()
    return any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


#: True when ``@task(max_attempts=5)`` reaches our task class (Django 6.1, backport).
TASK_DECORATOR_TAKES_EXTRA_FIELDS: bool = _decorator_passes_extra_fields()

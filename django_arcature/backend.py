"""The public path of the ``django.tasks`` backend: ``django_arcature.backend.ArcatureBackend``.

The implementation lives in ``django_arcature.tasks``; this module keeps the
path that ``TASKS[...]["BACKEND"]`` settings and the documentation name.
"""

from __future__ import annotations

from .tasks.backend import ArcatureBackend, ArcatureTask, task
from .tasks.dispatch import dispatch_task_job, task_overrides

__all__ = ["ArcatureBackend", "ArcatureTask", "dispatch_task_job", "task", "task_overrides"]

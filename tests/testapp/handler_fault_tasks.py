"""django.tasks tasks that misbehave on purpose, for ``tests/faults/test_handler_tasks_backend.py``.

A module of an installed app, so the worker may import it by the path a row names.
"""

from __future__ import annotations

import asyncio

from django_arcature.backend import task as arcature_task
from django_arcature.tasks.compat import task

from .handler_fault_jobs import RELEASE, _base_exception


@task
def raise_base(kind: str) -> None:
    raise _base_exception(kind)


@task
async def araise_base(kind: str) -> None:
    await asyncio.sleep(0)
    raise _base_exception(kind)


@arcature_task(timeout=0.5, max_attempts=1)
async def block_loop(seconds: float) -> str:
    """Blocks its event loop: the coroutine never reaches an ``await`` to be cancelled at."""
    RELEASE.wait(seconds)
    return "unblocked"


@arcature_task(timeout=0.5, max_attempts=1)
def hang(seconds: float) -> str:
    RELEASE.wait(seconds)
    return "woke"

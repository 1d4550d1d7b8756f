"""``@periodic``: declare a schedule in code, next to the job it runs.

The decorator only records a :class:`PeriodicSpec`; nothing touches the
database at import time. A worker syncs the declared specs into the
``Schedule`` table when it starts (``schedules.sync``), and from then on code
and admin schedules are evaluated the same way.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .cron import InvalidSchedule, cron_available, validate_expression, zone
from .policy import ALL, LATEST, POLICIES

logger = logging.getLogger(__name__)

__all__ = ["PeriodicSpec", "declared", "periodic"]

T = TypeVar("T")

NAME_MAX_LENGTH = 100


@dataclass(frozen=True)
class PeriodicSpec:
    """One code-declared schedule, as written in the decorator."""

    name: str
    task_name: str
    cron: str
    timezone: str = "UTC"
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    queue: str = ""
    priority: int | None = None
    missed: str = LATEST
    catch_up: int = 10
    backend: str = ""
    where: str = ""


_declared: dict[str, PeriodicSpec] = {}
_lock = threading.Lock()


def declared() -> dict[str, PeriodicSpec]:
    """Every schedule declared with ``@periodic`` so far, by name."""
    with _lock:
        return dict(_declared)


def _task_identity(target: Any) -> tuple[str, str, str, int | None]:
    """(task name, backend alias, queue, priority) of a ``@job`` handle or a django.tasks task."""
    from django_arcature.registry import JobHandle

    if isinstance(target, JobHandle):
        return target.name, "", "", None
    module_path = getattr(target, "module_path", None)
    backend = getattr(target, "backend", None)
    if isinstance(module_path, str) and isinstance(backend, str):  # a django.tasks Task
        return module_path, backend, str(getattr(target, "queue_name", "") or ""), None
    raise TypeError(
        "@periodic goes above @job (or a django.tasks @task on the django-arcature "
        f"backend), not directly on {target!r}"
    )


def periodic(
    cron: str,
    *,
    timezone: str = "UTC",
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    name: str | None = None,
    queue: str | None = None,
    priority: int | None = None,
    missed: str = LATEST,
    catch_up: int = 10,
) -> Callable[[T], T]:
    """Run the decorated job on a cron schedule, one job per slot across the fleet.

    ``cron`` has five fields, or six with seconds first; it is read on the wall
    clock of ``timezone`` (IANA). ``missed`` is what happens to slots that passed
    while no worker ran: ``"latest"`` (fire the latest once), ``"all"`` (each
    of them, at most ``catch_up``) or ``"skip"``. ``name`` identifies the
    schedule (default: the task's name); give one per line when stacking
    several ``@periodic`` on one job.
    """
    if missed not in POLICIES:
        raise ValueError(f"missed must be one of {POLICIES}, not {missed!r}")
    if missed == ALL and catch_up < 1:
        raise ValueError("catch_up must be at least 1")
    zone(timezone)  # an unknown zone is a bug in the code: fail at import
    if cron_available():
        validate_expression(cron)
    # Without cronsim the system check arcature.E030 explains what to install.

    def decorate(target: T) -> T:
        task_name, backend, task_queue, _ = _task_identity(target)
        spec = PeriodicSpec(
            name=name or task_name,
            task_name=task_name,
            cron=cron,
            timezone=timezone,
            args=tuple(args),
            kwargs=dict(kwargs or {}),
            queue=queue or task_queue,
            priority=priority,
            missed=missed,
            catch_up=catch_up,
            backend=backend,
            where=getattr(target, "__module__", "") or "",
        )
        if len(spec.name) > NAME_MAX_LENGTH:
            raise InvalidSchedule(f"schedule name longer than {NAME_MAX_LENGTH}: {spec.name!r}")
        with _lock:
            existing = _declared.get(spec.name)
            if existing is not None and existing != spec:
                raise ValueError(
                    f"two @periodic schedules are named {spec.name!r}; pass name=... to tell "
                    "them apart"
                )
            _declared[spec.name] = spec
        return target

    return decorate


def forget(name: str) -> None:
    """Drop a declared schedule (for tests that declare their own)."""
    with _lock:
        _declared.pop(name, None)

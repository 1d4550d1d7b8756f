"""``@job`` and the name → handler registry.

A task name stored in the table is only ever looked up here; nothing is
imported because a row says so (DESIGN §7). The registry is filled by
importing each installed app's ``jobs`` module (``autodiscover``), the way the
admin finds ``admin.py``.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import inspect
import logging
import threading
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, ParamSpec, TypeVar

from django.utils.module_loading import autodiscover_modules

from .exceptions import MalformedPayload, UnknownTask
from .payloads import check_arguments, to_json_text
from .retry import RetryPolicy

if TYPE_CHECKING:
    from .models import Job

logger = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")

_registry: dict[str, JobSpec] = {}
_lock = threading.Lock()
_discovered = False


@dataclass(frozen=True)
class JobSpec:
    """A registered handler and its defaults."""

    name: str
    func: Callable[..., Any]
    queue: str | None = None
    priority: int = 0
    max_attempts: int | None = None
    retry: RetryPolicy | None = None
    timeout: float | None = None
    unique: bool = False
    signature: inspect.Signature = field(repr=False, compare=False, default=None)  # type: ignore[assignment]
    hints: Mapping[str, Any] = field(repr=False, compare=False, default_factory=dict)

    @property
    def is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.func)

    def validate(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        """Raise MalformedPayload unless the arguments fit the handler."""
        check_arguments(self.func, self.signature, self.hints, args, kwargs)

    def unique_key(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
        """A key derived from the name and the arguments, for ``unique=True``."""
        digest = hashlib.sha256(
            to_json_text({"args": list(args), "kwargs": dict(kwargs)}).encode()
        ).hexdigest()
        return f"{self.name[:180]}:{digest}"


@dataclass(frozen=True)
class EnqueuePlan:
    """What the manager needs from the registry to build a row."""

    name: str
    queue: str | None = None
    priority: int = 0
    max_attempts: int | None = None
    unique: bool = False
    spec: JobSpec | None = None

    def unique_key(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
        if self.spec is None:
            raise ValueError("unique jobs need a registered handler")
        return self.spec.unique_key(args, kwargs)


@dataclass(frozen=True)
class EnqueueOptions:
    """Per-call options for :meth:`JobHandle.using`."""

    queue: str | None = None
    priority: int | None = None
    delay: float | timedelta | None = None
    run_at: datetime | None = None
    max_attempts: int | None = None
    unique_key: str | None = None


class JobHandle(Generic[P, R]):
    """What ``@job`` returns: still the function, plus ``enqueue`` and friends."""

    def __init__(self, spec: JobSpec, options: EnqueueOptions | None = None) -> None:
        self.spec = spec
        self.options = options or EnqueueOptions()
        functools.update_wrapper(self, spec.func)

    @property
    def name(self) -> str:
        return self.spec.name

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return typing.cast(R, self.spec.func(*args, **kwargs))

    def __repr__(self) -> str:
        return f"<job {self.spec.name}>"

    def using(
        self,
        *,
        queue: str | None = None,
        priority: int | None = None,
        delay: float | timedelta | None = None,
        run_at: datetime | None = None,
        max_attempts: int | None = None,
        unique_key: str | None = None,
    ) -> JobHandle[P, R]:
        """A copy with per-call options; the function's own keywords stay free."""
        changes = {
            key: value
            for key, value in {
                "queue": queue,
                "priority": priority,
                "delay": delay,
                "run_at": run_at,
                "max_attempts": max_attempts,
                "unique_key": unique_key,
            }.items()
            if value is not None
        }
        return JobHandle(self.spec, replace(self.options, **changes))

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> Job:
        """Insert a pending job that will call this function with these arguments."""
        from .models import Job

        options = self.options
        return Job.objects.enqueue(
            self,
            args=args,
            kwargs=kwargs,
            queue=options.queue,
            priority=options.priority,
            delay=options.delay,
            run_at=options.run_at,
            max_attempts=options.max_attempts,
            unique_key=options.unique_key,
        )

    def enqueue_many(self, arguments: Iterable[Any]) -> list[Job]:
        """Insert one job per item (positional args, a kwargs dict or an (args, kwargs) pair)."""
        from .models import Job

        options = self.options
        return Job.objects.enqueue_many(
            self,
            arguments,
            queue=options.queue,
            priority=options.priority,
            delay=options.delay,
            run_at=options.run_at,
            max_attempts=options.max_attempts,
        )


def job(
    func: Callable[P, R] | None = None,
    *,
    name: str | None = None,
    queue: str | None = None,
    priority: int = 0,
    max_attempts: int | None = None,
    retry: RetryPolicy | None = None,
    timeout: float | None = None,
    unique: bool = False,
) -> Any:
    """Register a function as a job handler: ``@job`` or ``@job(queue="email", ...)``.

    The stored name defaults to ``module.qualname``; give ``name=`` to keep jobs
    already in the table runnable after the function moves.
    """

    def register_func(target: Callable[P, R]) -> JobHandle[P, R]:
        if max_attempts is not None and max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if timeout is not None and timeout <= 0:
            raise ValueError("timeout must be a positive number of seconds")
        spec = make_spec(
            target,
            name=name,
            queue=queue,
            priority=priority,
            max_attempts=max_attempts,
            retry=retry,
            timeout=timeout,
            unique=unique,
        )
        register(spec)
        return JobHandle(spec)

    if func is not None:
        return register_func(func)
    return register_func


def make_spec(func: Callable[..., Any], *, name: str | None = None, **options: Any) -> JobSpec:
    try:
        hints = typing.get_type_hints(func)
    except Exception:  # unresolved forward references: check the signature only
        hints = {}
    hints.pop("return", None)
    return JobSpec(
        name=name or f"{func.__module__}.{func.__qualname__}",
        func=func,
        signature=inspect.signature(func),
        hints=hints,
        **options,
    )


def register(spec: JobSpec) -> None:
    """Add ``spec``; a second, different function under the same name is refused."""
    with _lock:
        existing = _registry.get(spec.name)
        if existing is not None and _same_function(existing.func, spec.func) is False:
            raise ValueError(
                f"two job handlers are registered under {spec.name!r}: "
                f"{existing.func.__module__}.{existing.func.__qualname__} and "
                f"{spec.func.__module__}.{spec.func.__qualname__}; give one a different name="
            )
        _registry[spec.name] = spec


def _same_function(a: Callable[..., Any], b: Callable[..., Any]) -> bool:
    # A module imported twice (e.g. under two names in tests) re-registers the same code.
    return bool(
        a is b
        or (
            getattr(a, "__module__", None) == getattr(b, "__module__", None)
            and getattr(a, "__qualname__", None) == getattr(b, "__qualname__", None)
        )
    )


def unregister(name: str) -> None:
    with _lock:
        _registry.pop(name, None)


def registered_names() -> list[str]:
    return sorted(_registry)


def autodiscover() -> None:
    """Import every installed app's ``jobs`` module once, filling the registry."""
    global _discovered
    if _discovered:
        return
    autodiscover_modules("jobs")
    _discovered = True


def get(name: str) -> JobSpec:
    """The handler registered under ``name``, or UnknownTask naming the nearest ones."""
    spec = _registry.get(name)
    if spec is None:
        autodiscover()
        spec = _registry.get(name)
    if spec is None:
        raise UnknownTask(unknown_task_message(name))
    return spec


def unknown_task_message(name: str) -> str:
    names = registered_names()
    nearest = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
    if not nearest:
        nearest = [n for n in names if n.rsplit(".", 1)[-1] == name.rsplit(".", 1)[-1]][:3]
    hint = f" Did you mean {', '.join(repr(n) for n in nearest)}?" if nearest else ""
    where = (
        f" {len(names)} job(s) are registered." if names else " No jobs are registered at all:"
        " define them with @job in a jobs.py module of an installed app."
    )
    return f"No job handler is registered under {name!r}.{hint}{where}"


def prepare_enqueue(
    task: Any, args: Sequence[Any], kwargs: Mapping[str, Any], *, checked: bool = True
) -> EnqueuePlan:
    """Resolve ``task`` (a handle or a name) and validate the arguments eagerly.

    ``checked=False`` is for the django.tasks backend, whose tasks are not in
    this registry: it validates them itself; only JSON is checked here.
    """
    if not checked:
        from .payloads import ensure_json

        ensure_json(list(args), "args")
        ensure_json(dict(kwargs), "kwargs")
        return EnqueuePlan(name=str(task))
    if isinstance(task, JobHandle):
        spec = task.spec
    elif isinstance(task, str):
        spec = get(task)
    else:
        raise TypeError(f"enqueue takes a @job handle or a registered name, not {task!r}")
    try:
        spec.validate(args, kwargs)
    except MalformedPayload as exc:
        raise MalformedPayload(f"cannot enqueue {spec.name}: {exc}") from None
    return EnqueuePlan(
        name=spec.name,
        queue=spec.queue,
        priority=spec.priority,
        max_attempts=spec.max_attempts,
        unique=spec.unique,
        spec=spec,
    )

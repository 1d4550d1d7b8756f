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
from typing import TYPE_CHECKING, Any

from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import autodiscover_modules

from .conf import TIMEOUT_EXPECTED, is_valid_timeout
from .core.limits import (
    NAME_MAX_LENGTH,
    QUEUE_MAX_LENGTH,
    max_attempts_problem,
    name_problem,
    priority_problem,
)
from .core.payloads import (
    check_arguments,
    ensure_arguments_json,
    plain_call_check,
    resolve_hints,
    to_json_text,
)
from .core.retry import RetryPolicy
from .exceptions import MalformedPayload, UnknownTask

if TYPE_CHECKING:
    from .models import Job

logger = logging.getLogger(__name__)


def _job_model() -> type[Job]:
    """The job model, looked up through the app registry.

    Handles are created at import time of a project's ``jobs`` modules, before
    (and independently of) the model module; looking the model up when a job
    is enqueued keeps the registry free of a dependency on the models. A
    project that forgot the app gets the fix, not a LookupError about labels.
    """
    from django.apps import apps

    try:
        model: type[Job] = apps.get_model("django_arcature", "Job")
    except LookupError:
        raise ImproperlyConfigured(
            "Jobs are stored in the django_arcature app's table: add 'django_arcature' to "
            "INSTALLED_APPS, then run manage.py migrate to create the table."
        ) from None
    return model


_registry: dict[str, JobSpec] = {}
_lock = threading.Lock()
_discover_lock = threading.RLock()
_discovered = False


#: Names up to this long appear whole in a derived unique key (``name:digest`` then
#: takes at most 245 characters); longer ones are cut to ``_CUT_NAME_LENGTH`` and
#: followed by their own digest (255 characters in all).
_READABLE_NAME_LENGTH = 180
_CUT_NAME_LENGTH = 125


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
    signature: inspect.Signature = field(init=False, repr=False, compare=False)
    hints: Mapping[str, Any] = field(init=False, repr=False, compare=False)
    #: Some parameter has no default: a call without arguments does not fit.
    needs_arguments: bool = field(init=False, repr=False, compare=False)
    #: What :func:`prepare_enqueue` returns for this handler (the same every call).
    plan: EnqueuePlan = field(init=False, repr=False, compare=False)
    #: "These positional arguments surely fit" (:func:`plain_call_check`), or None.
    fits_plainly: Callable[[list[Any]], bool] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        signature = inspect.signature(self.func)
        object.__setattr__(self, "signature", signature)
        object.__setattr__(self, "hints", resolve_hints(self.func))
        object.__setattr__(self, "fits_plainly", plain_call_check(signature, self.hints))
        variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        object.__setattr__(
            self,
            "needs_arguments",
            any(
                param.default is inspect.Parameter.empty and param.kind not in variadic
                for param in signature.parameters.values()
            ),
        )
        object.__setattr__(
            self,
            "plan",
            EnqueuePlan(
                name=self.name,
                queue=self.queue,
                priority=self.priority,
                max_attempts=self.max_attempts,
                unique=self.unique,
                spec=self,
            ),
        )

    @functools.cached_property
    def is_async(self) -> bool:
        """``async def`` or not: read once (``inspect`` unwraps partials per call), as the
        worker asks twice a job; ``func`` never changes on a spec."""
        return inspect.iscoroutinefunction(self.func)

    def validate(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        """Raise MalformedPayload unless the arguments fit the handler."""
        if not args and not kwargs and not self.needs_arguments:
            return  # binds, and there is no argument to check
        check_arguments(self.func, self.signature, self.hints, args, kwargs)

    def canonical_arguments(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> object:
        """The call as parameter → value, defaults filled in, however it was spelled.

        ``f(1)``, ``f(a=1)`` and ``f(1, b=<default>)`` give the same value, so
        unique keys and ``assert_enqueued`` treat them as the same job.
        """
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError:  # refused by validate(); keep the raw form
            return {"args": list(args), "kwargs": dict(kwargs)}
        bound.apply_defaults()
        return {
            key: list(value) if isinstance(value, tuple) else value
            for key, value in bound.arguments.items()
        }

    def unique_key(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
        """A key derived from the name and the arguments, for ``unique=True``.

        ``name:sha256(arguments)`` while that fits the column. A longer name is
        cut and followed by the SHA-256 of the whole name, so two names that
        share their beginning never share a key; such keys are 255 characters
        long, longer than any key of the first form, so the two forms never meet.
        """
        canonical = self.canonical_arguments(args, kwargs)
        digest = hashlib.sha256(to_json_text(canonical).encode()).hexdigest()
        if len(self.name) <= _READABLE_NAME_LENGTH:
            return f"{self.name}:{digest}"
        name_digest = hashlib.sha256(self.name.encode()).hexdigest()
        return f"{self.name[:_CUT_NAME_LENGTH]}#{name_digest}:{digest}"


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


class JobHandle[**P, R]:
    """What ``@job`` returns: still the function, plus ``enqueue`` and friends."""

    # Copied from the function by functools.update_wrapper.
    __wrapped__: Callable[..., Any]
    __name__: str
    __qualname__: str

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
        changes: dict[str, Any] = {
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
        if delay is not None:  # a later delay replaces an earlier run_at, and vice versa
            changes["run_at"] = None
        if run_at is not None:
            changes["delay"] = None
        return JobHandle(self.spec, replace(self.options, **changes))

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> Job:
        """Insert a pending job that will call this function with these arguments."""
        options = self.options
        return _job_model().objects.enqueue(
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

    async def aenqueue(self, *args: P.args, **kwargs: P.kwargs) -> Job:
        """:meth:`enqueue` from async code (an ASGI view): committed when it returns.

        On PostgreSQL the INSERT goes on the event loop's own connection, not
        through a worker thread; see :meth:`JobManager.aenqueue`.
        """
        options = self.options
        return await _job_model().objects.aenqueue(
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

    def enqueue_many(self, arguments: Iterable[Any], *, batch_size: int = 1000) -> list[Job]:
        """Insert one job per item (positional args, a kwargs dict or an (args, kwargs) pair).

        Every item is validated before anything is written. For a ``unique``
        job, an item whose key is already held returns the holder instead.
        ``batch_size`` is the rows per INSERT on MySQL/MariaDB (lower it for
        payloads near ``max_allowed_packet``); the job's arguments travel inside
        ``arguments``, so this keyword cannot collide with them.
        """
        options = self.options
        if options.unique_key is not None:
            raise ValueError(
                "using(unique_key=...) names one job; enqueue_many inserts many. Give the "
                "job @job(unique=True) to derive a key per item, or enqueue them one by one."
            )
        return _job_model().objects.enqueue_many(
            self,
            arguments,
            queue=options.queue,
            priority=options.priority,
            delay=options.delay,
            run_at=options.run_at,
            max_attempts=options.max_attempts,
            batch_size=batch_size,
        )


@typing.overload
def job[**P, R](func: Callable[P, R], /) -> JobHandle[P, R]: ...


@typing.overload
def job[**P, R](
    *,
    name: str | None = None,
    queue: str | None = None,
    priority: int = 0,
    max_attempts: int | None = None,
    retry: RetryPolicy | None = None,
    timeout: float | None = None,
    unique: bool = False,
) -> Callable[[Callable[P, R]], JobHandle[P, R]]: ...


def job[**P, R](
    func: Callable[P, R] | None = None,
    /,
    *,
    name: str | None = None,
    queue: str | None = None,
    priority: int = 0,
    max_attempts: int | None = None,
    retry: RetryPolicy | None = None,
    timeout: float | None = None,
    unique: bool = False,
) -> JobHandle[P, R] | Callable[[Callable[P, R]], JobHandle[P, R]]:
    """Register a function as a job handler: ``@job`` or ``@job(queue="email", ...)``.

    The stored name defaults to ``module.qualname``; give ``name=`` to keep jobs
    already in the table runnable after the function moves. Mistakes in the
    options fail here, at import, rather than in a worker.
    """
    _check_options(name, queue, priority, max_attempts, retry, timeout)

    def register_func(target: Callable[P, R]) -> JobHandle[P, R]:
        if isinstance(target, JobHandle):
            raise TypeError(f"{target!r} is already a job; apply @job once")
        if not callable(target):
            raise TypeError(f"@job decorates a function, not {target!r}")
        spec = JobSpec(
            name=name or f"{target.__module__}.{target.__qualname__}",
            func=target,
            queue=queue,
            priority=priority,
            max_attempts=max_attempts,
            retry=retry,
            timeout=timeout,
            unique=unique,
        )
        if len(spec.name) > NAME_MAX_LENGTH:
            raise ImproperlyConfigured(
                f"the job name {spec.name[:60]!r}… is {len(spec.name)} characters long; "
                f"the job table stores at most {NAME_MAX_LENGTH}: give @job a shorter name="
            )
        register(spec)
        return JobHandle(spec)

    if func is not None:
        return register_func(func)
    return register_func


def _check_options(
    name: str | None,
    queue: str | None,
    priority: int,
    max_attempts: int | None,
    retry: RetryPolicy | None,
    timeout: float | None,
) -> None:
    """Refuse at import what every enqueue of this job would be refused for."""
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise ImproperlyConfigured(f"@job(name=...) must be a non-empty string, not {name!r}")
    problems = [
        # (a name that is too long is refused with its length once the default is known)
        name is not None
        and len(name) <= NAME_MAX_LENGTH
        and name_problem(name, "@job(name=...)", NAME_MAX_LENGTH),
        queue is not None and name_problem(queue, "@job(queue=...)", QUEUE_MAX_LENGTH),
        priority_problem(priority, "@job(priority=...)"),
        max_attempts is not None and max_attempts_problem(max_attempts, "@job(max_attempts=...)"),
    ]
    for problem in problems:
        if problem:
            raise ImproperlyConfigured(problem)
    if retry is not None and not isinstance(retry, RetryPolicy):
        raise ImproperlyConfigured(
            f"@job(retry=...) must be a django_arcature.RetryPolicy, not {retry!r}"
        )
    if not is_valid_timeout(timeout):
        raise ImproperlyConfigured(f"@job(timeout=...) must be {TIMEOUT_EXPECTED}, not {timeout!r}")


def register(spec: JobSpec) -> None:
    """Add ``spec``; a second, different function under the same name is refused.

    Refused loudly (ImproperlyConfigured at import): if both stayed, which one
    a stored job runs would depend on import order. Autodiscovery runs at the
    worker's start and in ``manage.py check``, so the clash stops both with
    this message instead of surfacing in a job.
    """
    with _lock:
        existing = _registry.get(spec.name)
        if existing is not None and not _same_function(existing.func, spec.func):
            raise ImproperlyConfigured(
                f"two job handlers are registered under the name {spec.name!r}: "
                f"{_where(existing.func)} and {_where(spec.func)}. Give one of them a "
                "different @job(name=...)."
            )
        _registry[spec.name] = spec


def _where(func: Callable[..., Any]) -> str:
    return f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', func)}"


def _same_function(a: Callable[..., Any], b: Callable[..., Any]) -> bool:
    # A module imported twice (a reload, or one file under two names) re-registers
    # the same code: the newer definition replaces the older.
    return a is b or _where(a) == _where(b)


def unregister(name: str) -> None:
    with _lock:
        _registry.pop(name, None)


def registered_names() -> list[str]:
    return sorted(_registry)


def autodiscover() -> None:
    """Import every installed app's ``jobs`` module once, filling the registry.

    Called when a worker starts, by the system checks, and on the first lookup
    of a name that is not registered yet. An error raised by a ``jobs`` module
    propagates (as with the admin's autodiscovery): a worker must not start
    without handlers it was deployed with.
    """
    global _discovered
    if _discovered:
        return
    with _discover_lock:
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
    nearest = difflib.get_close_matches(name, names, n=3, cutoff=0.6)
    if not nearest:
        tail = name.rsplit(".", 1)[-1]
        nearest = [n for n in names if n.rsplit(".", 1)[-1] == tail][:3]
    hint = f" Did you mean {' or '.join(repr(n) for n in nearest)}?" if nearest else ""
    if names:
        where = f" ({len(names)} job(s) are registered.)"
        if not nearest:
            where += (
                " Handlers are found in the jobs.py modules of INSTALLED_APPS: is the app "
                "that defines it installed in this process's settings?"
            )
    else:
        where = (
            " No jobs are registered at all: define them with @job in a jobs.py module "
            "of an installed app."
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
        try:
            ensure_arguments_json(list(args), dict(kwargs))
        except MalformedPayload as exc:
            raise MalformedPayload(f"cannot enqueue {task}: {exc}") from None
        return EnqueuePlan(name=str(task))
    if isinstance(task, JobHandle):
        spec = task.spec
    elif isinstance(task, str):
        spec = get(task)
    else:
        raise TypeError(
            f"enqueue takes a @job handle or the name of a registered job, not {task!r}"
        )
    try:
        spec.validate(args, kwargs)
    except MalformedPayload as exc:
        hint = _option_passed_as_argument(exc, kwargs)
        raise MalformedPayload(f"cannot enqueue {spec.name}: {exc}{hint}") from None
    return spec.plan


#: The options of one enqueue (``.using(...)``, the manager's keywords).
_ENQUEUE_OPTIONS = ("queue", "priority", "delay", "run_at", "max_attempts", "unique_key")


def _option_passed_as_argument(exc: MalformedPayload, kwargs: Mapping[str, Any]) -> str:
    """A hint when an enqueue option was passed as the job's own argument.

    ``send_welcome.enqueue(7, delay=60)`` (the Celery habit, or the manager's
    form carried over) reaches the handler's signature as an argument called
    ``delay``; the refusal alone does not say where the option belongs.
    """
    for key in kwargs:
        if key in _ENQUEUE_OPTIONS and f"unexpected keyword argument {key!r}" in str(exc):
            return (
                f". {key!r} is an option of the enqueue, not an argument of the job: "
                f"pass it as .using({key}=...).enqueue(...), or "
                f"Job.objects.enqueue(..., {key}=...)"
            )
    return ""

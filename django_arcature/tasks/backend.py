"""A backend for Django's tasks framework that stores tasks as rows of the job table.

``TASKS = {"default": {"BACKEND": "django_arcature.backend.ArcatureBackend"}}``
and every ``@task`` runs on ``arcature_worker`` with what the framework itself
lacks: attempts with backoff, per-attempt timeouts, leases that bring back a
killed worker's tasks, fenced completion. Works with ``django.tasks`` (Django
6.0, 6.1) and the ``django_tasks`` backport (Django 5.2) through
:mod:`django_arcature.tasks_compat`.

Django instantiates the backend when a module with ``@task`` is imported, so
nothing here touches the database or the models before it is used.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import sys
import threading
import typing
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, overload

from django.apps import apps
from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import connections
from django.utils.translation import gettext as _

from django_arcature.core.decide import describe_exception
from django_arcature.core.payloads import check_arguments
from django_arcature.core.retry import RetryPolicy
from django_arcature.db.broken_connection import discard_broken_connection
from django_arcature.exceptions import MalformedPayload

from .arguments import stored_arguments
from .compat import (
    BaseTaskBackend,
    InvalidTask,
    InvalidTaskBackend,
    Task,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task_backends,
    task_enqueued,
)
from .imports import STRICT, path_problem, source_problem, split_path, trusted
from .options import (
    TaskOverrides,
    check_max_attempts,
    check_timeout,
    overrides_of,
    parse_options,
)
from .results import result_from_job

__all__ = ["ArcatureBackend", "ArcatureTask", "task"]

logger = logging.getLogger(__name__)


if TYPE_CHECKING:  # generic for type checkers, as django-stubs' Task is

    @dataclass(frozen=True, slots=True, kw_only=True)
    class ArcatureTask[**P, R](Task[P, R]):
        max_attempts: int | None = None
        timeout: float | None = None
        retry: RetryPolicy | None = None

else:  # at run time Django's Task (6.x) is not subscriptable

    @dataclass(frozen=True, slots=True, kw_only=True)
    class ArcatureTask(Task):
        """A django.tasks Task with this backend's extra fields.

        On Django 6.1 and the backport, ``@task(max_attempts=5, timeout=30)``
        fills them; on Django 6.0 (whose ``@task`` refuses unknown keywords) use
        :func:`django_arcature.backend.task` or ``OPTIONS["TASK_OPTIONS"]``.
        None means "use the backend's OPTIONS, then ``ARCATURE``".
        """

        max_attempts: int | None = None
        timeout: float | None = None
        retry: RetryPolicy | None = None


@overload
def task[**P, R](
    function: Callable[P, R],
    *,
    priority: int = ...,
    queue_name: str = ...,
    backend: str = ...,
    takes_context: bool = ...,
    max_attempts: int | None = ...,
    timeout: float | None = ...,
    retry: RetryPolicy | None = ...,
) -> ArcatureTask[P, R]: ...
@overload
def task[**P, R](
    function: None = None,
    *,
    priority: int = ...,
    queue_name: str = ...,
    backend: str = ...,
    takes_context: bool = ...,
    max_attempts: int | None = ...,
    timeout: float | None = ...,
    retry: RetryPolicy | None = ...,
) -> Callable[[Callable[P, R]], ArcatureTask[P, R]]: ...
def task[**P, R](
    function: Callable[P, R] | None = None,
    *,
    priority: int = 0,
    queue_name: str = "default",
    backend: str = "default",
    takes_context: bool = False,
    max_attempts: int | None = None,
    timeout: float | None = None,
    retry: RetryPolicy | None = None,
) -> ArcatureTask[P, R] | Callable[[Callable[P, R]], ArcatureTask[P, R]]:
    """Django's ``@task`` plus ``max_attempts``, ``timeout`` and ``retry``, on every version.

    Needed on Django 6.0, whose ``@task`` refuses extra keywords; elsewhere it
    is the same as ``@django.tasks.task(max_attempts=…)`` with type hints.
    """
    extra = {
        key: value
        for key, value in {
            "max_attempts": max_attempts,
            "timeout": timeout,
            "retry": retry,
        }.items()
        if value is not None
    }

    def wrapper(func: Callable[P, R]) -> ArcatureTask[P, R]:
        task_class = task_backends[backend].task_class
        if extra and not issubclass(task_class, ArcatureTask):
            raise InvalidTask(
                f"TASKS[{backend!r}] is not an ArcatureBackend: it cannot honour "
                f"{', '.join(sorted(extra))}."
            )
        return typing.cast(
            "ArcatureTask[P, R]",
            task_class(
                func=func,
                priority=priority,
                queue_name=queue_name,
                backend=backend,
                takes_context=takes_context,
                run_after=None,
                **extra,
            ),
        )

    if function is not None:
        return wrapper(function)
    return wrapper


_signatures: dict[Callable[..., Any], inspect.Signature] = {}
_signatures_lock = threading.Lock()


def _signature_of(func: Callable[..., Any]) -> inspect.Signature:
    cached = _signatures.get(func)
    if cached is None:
        cached = inspect.signature(func)
        with _signatures_lock:
            _signatures[func] = cached
    return cached


class InvalidTaskArguments(MalformedPayload, TypeError):
    """Stored arguments that do not fit the task's function (found by the worker).

    A TypeError, as calling the function with them would raise; still a
    MalformedPayload for code that catches ours. Enqueue does not raise it:
    the framework takes any call, so a mismatch is found when the task runs
    (the job then goes dead as ``malformed``, without retries).
    """


class ArcatureBackend(BaseTaskBackend):
    """Tasks become rows of django-arcature's job table, run by ``arcature_worker``."""

    task_class = ArcatureTask

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.arcature_options, self.option_problems = parse_options(alias, self.options)

    # --- validation ---------------------------------------------------------------

    def validate_task(self, task: Task[Any, Any]) -> None:
        super().validate_task(task)
        own = overrides_of(task)
        problems = check_max_attempts(own.max_attempts, "max_attempts") + check_timeout(
            own.timeout, "timeout"
        )
        if own.retry is not None and not isinstance(own.retry, RetryPolicy):
            problems.append("retry must be a django_arcature.RetryPolicy.")
        if problems:
            raise InvalidTask(" ".join(problems))

    def module_allowed(self, module_name: str) -> bool:
        """Whether ``module_name`` is trusted: imported for a row without the source check.

        Trusted are an installed app's ``tasks`` module and the modules inside
        its ``tasks`` package, and the modules listed in ``OPTIONS["MODULES"]``
        (and inside them). Under ``IMPORT_POLICY = "strict"`` they are the only
        modules a row can make this process import; under the default
        ``"checked"`` any other module may be imported once
        :func:`~django_arcature.tasks.imports.source_problem` finds nothing
        against it. Either way what the import produced must be a Task of this
        backend before anything is called.
        """
        prefixes: Iterable[str] = (
            *(f"{config.name}.tasks" for config in apps.get_app_configs()),
            *self.arcature_options.modules,
        )
        return trusted(module_name, prefixes)

    def import_refusal(self, module_name: str, attribute: str, *, at_enqueue: bool) -> str | None:
        """Why a row naming ``module_name.attribute`` may not make this process import it.

        None when it may. ``at_enqueue`` asks as the worker will (which may not
        have the module imported), so that what can be enqueued is what runs.
        """
        if self.module_allowed(module_name):
            return None
        if self.arcature_options.import_policy == STRICT:
            return (
                f"module {module_name!r} is not an installed app's tasks module nor listed in "
                f"TASKS[{self.alias!r}]['OPTIONS']['MODULES'] (IMPORT_POLICY is 'strict'), "
                "so it was not imported"
            )
        return source_problem(module_name, attribute, imported_is_enough=not at_enqueue)

    def check_arguments(
        self, task: Task[Any, Any], args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> None:
        """Raise InvalidTaskArguments unless the arguments bind to the function.

        Only the signature: annotations are not enforced (neither Python nor
        the framework does), and the worker runs this on arguments read back
        from JSON, which are JSON by construction.
        """
        try:
            check_arguments(
                task.func,
                _signature_of(task.func),
                {},
                args,
                kwargs,
                skip_first=task.takes_context,
            )
        except MalformedPayload as exc:
            raise InvalidTaskArguments(str(exc)) from exc

    def overrides_for(self, task: Task[Any, Any]) -> TaskOverrides:
        """Attempts, timeout and backoff for ``task``: its own fields, TASK_OPTIONS, OPTIONS."""
        return self.arcature_options.for_task(task.module_path, overrides_of(task))

    def _ensure_configured(self) -> None:
        if self.option_problems:
            raise InvalidTaskBackend(" ".join(self.option_problems))

    def _ensure_reachable(self, task: Task[Any, Any]) -> None:
        """The worker finds a task by its module path; refuse one it would not run."""
        module_name = task.func.__module__
        path = task.module_path
        if module_name == "__main__":
            raise InvalidTask(
                f"{path} is defined in __main__, which a worker process cannot import; "
                "move it to a module of an installed app."
            )
        problem = path_problem(path)
        if problem is None:
            problem = self.import_refusal(module_name, task.func.__qualname__, at_enqueue=True)
        if problem is not None:
            if self.arcature_options.import_policy == STRICT:
                raise InvalidTask(
                    f"{path} is not in an installed app's tasks module, so a worker will not "
                    f"import it under IMPORT_POLICY 'strict'; move it to <app>.tasks, or add "
                    f"{module_name!r} to TASKS[{self.alias!r}]['OPTIONS']['MODULES']."
                )
            raise InvalidTask(f"a worker would not run {path}: {problem}.")
        module = sys.modules.get(module_name)
        found = getattr(module, task.func.__qualname__, None)
        if not isinstance(found, Task) or found.func is not task.func:
            raise InvalidTask(
                f"{path} does not name this task (a worker importing it would find "
                f"{type(found).__name__}); apply @task where the function is defined, "
                "under the function's own name."
            )
        if our_backend(found.backend) is None and not self.module_allowed(module_name):
            raise InvalidTask(
                f"{path} is declared for TASKS[{found.backend!r}], which is not an "
                "ArcatureBackend, and a worker runs only tasks declared for one; declare it "
                f"with backend={self.alias!r}, or add {module_name!r} to "
                f"TASKS[{self.alias!r}]['OPTIONS']['MODULES'] to trust its tasks."
            )

    # --- the framework's API ---------------------------------------------------------

    def enqueue[**P, R](
        self, task: Task[P, R], args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> TaskResult[P, R]:
        """Insert a pending job row in the caller's transaction, and describe it."""
        from django_arcature.models import Job

        args, kwargs, options = self._enqueue_options(task, args, kwargs)
        job = Job.objects.enqueue(task.module_path, args=args, kwargs=kwargs, **options)
        result = self._enqueued_result(task, job, args, kwargs)
        task_enqueued.send(sender=type(self), task_result=result)
        return self._eager_result(task, job, result)

    async def aenqueue[**P, R](
        self, task: Task[P, R], args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> TaskResult[P, R]:
        """:meth:`enqueue` from async code, committed when it returns: on PostgreSQL on
        the event loop's own connection rather than through a worker thread (the
        framework's default ``aenqueue`` runs ``enqueue`` in one)."""
        from django_arcature.models import Job

        args, kwargs, options = self._enqueue_options(task, args, kwargs)
        job = await Job.objects.aenqueue(task.module_path, args=args, kwargs=kwargs, **options)
        result = self._enqueued_result(task, job, args, kwargs)
        await task_enqueued.asend(sender=type(self), task_result=result)
        return self._eager_result(task, job, result)

    def _enqueue_options(
        self, task: Task[Any, Any], args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> tuple[list[Any], dict[str, Any], dict[str, Any]]:
        """Check the task (no database needed) and what its job row gets."""
        self._ensure_configured()
        self.validate_task(task)
        self._ensure_reachable(task)
        stored_args, stored_kwargs = stored_arguments(args, kwargs)
        overrides = self.overrides_for(task)
        options = {
            "queue": task.queue_name,
            "priority": task.priority,
            "run_at": task.run_after,
            "backend": self.alias,
            "max_attempts": overrides.max_attempts,
        }
        return stored_args, stored_kwargs, options

    def _eager_result[**P, R](
        self, task: Task[P, R], job: Any, enqueued: TaskResult[P, R]
    ) -> TaskResult[P, R]:
        """With ``ARCATURE["EAGER"]`` the manager has already run the job: describe the
        row it returned, so ``result.status`` and ``return_value`` say what happened
        (as ``@job``'s eager enqueue does) instead of a ``READY`` that was never true.
        The ``task_enqueued`` signal still carried the enqueued view."""
        if job.status == "pending":
            return enqueued
        return result_from_job(job, task)

    def _enqueued_result[**P, R](
        self, task: Task[P, R], job: Any, args: Any, kwargs: Any
    ) -> TaskResult[P, R]:
        return TaskResult(
            task=task,
            id=str(job.id),
            status=TaskResultStatus.READY,
            enqueued_at=job.created_at,
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=args,
            kwargs=kwargs,
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )

    def get_result(self, result_id: str) -> TaskResult[Any, Any]:
        """The task's current state; unknown or malformed ids raise TaskResultDoesNotExist."""
        from django_arcature.models import Job

        try:
            pk = uuid.UUID(str(result_id))
        except ValueError:
            raise TaskResultDoesNotExist(result_id) from None
        # Polled from threads of the caller's own too, outside a request, where a
        # connection the server dropped is otherwise never replaced.
        discard_broken_connection(connections[Job.objects.db])
        job = Job.objects.filter(pk=pk, backend=self.alias).first()
        if job is None:
            raise TaskResultDoesNotExist(result_id)
        return result_from_job(job, self._task_for_result(job.task_name, job.priority, job.queue))

    def _task_for_result(self, path: str, priority: int, queue: str) -> Task[Any, Any]:
        found = resolve_task(path, self.alias)
        if isinstance(found, str):
            return _missing_task(
                path, priority=priority, queue=queue, backend=self.alias, why=found
            )
        current = found.task
        if current.priority == priority and current.queue_name == queue:
            return current
        try:
            return replace(current, priority=priority, queue_name=queue)
        except InvalidTask:  # the queue was removed from QUEUES since: report as declared
            return current

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        """Misconfiguration that would lose or stall tasks, found before the first enqueue."""
        messages: list[checks.CheckMessage] = []
        name = f"TASKS[{self.alias!r}]"
        if not apps.is_installed("django_arcature"):
            messages.append(
                checks.Error(
                    _(
                        "%(name)s uses ArcatureBackend but 'django_arcature' is not in "
                        "INSTALLED_APPS: there is no job table to store tasks in."
                    )
                    % {"name": name},
                    hint=_("Add 'django_arcature' to INSTALLED_APPS and run migrate."),
                    id="arcature.E101",
                )
            )
            messages.extend(self._database_warnings())
        policy_problem = self.arcature_options.import_policy_problem
        messages.extend(
            checks.Error(
                problem,
                hint=_(
                    "See the “django.tasks options and behaviour” page of the "
                    "django-arcature documentation (Reference)."
                ),
                id="arcature.E102",
            )
            for problem in self.option_problems
            if problem != policy_problem
        )
        if policy_problem is not None:
            messages.append(
                checks.Error(
                    policy_problem,
                    hint=_(
                        "Leave TASKS[%(alias)r]['OPTIONS']['IMPORT_POLICY'] out (or set "
                        "it to 'checked') to run any module-level task; set it to 'strict' to "
                        "run only installed apps' tasks modules and OPTIONS['MODULES']. "
                        "Until then the worker treats it as 'strict'."
                    )
                    % {"alias": self.alias},
                    id="arcature.E103",
                )
            )
        return messages

    def _database_warnings(self) -> list[checks.CheckMessage]:
        """SQLite without IMMEDIATE transactions (the app's own check says so when installed)."""
        return sqlite_mode_warnings(self.alias, settings.DATABASES.get("default", {}))


def sqlite_mode_warnings(alias: str, database: Mapping[str, Any]) -> list[checks.CheckMessage]:
    """arcature.W101 if ``database`` is SQLite in its default DEFERRED transaction mode."""
    if not str(database.get("ENGINE", "")).endswith("sqlite3"):
        return []
    if database.get("OPTIONS", {}).get("transaction_mode") == "IMMEDIATE":
        return []
    return [
        checks.Warning(
            _(
                "TASKS[%(alias)r] would store tasks in a SQLite database with DEFERRED "
                "transactions: several worker processes then fail with 'database is locked'."
            )
            % {"alias": alias},
            hint=_("Set DATABASES['default']['OPTIONS']['transaction_mode'] = 'IMMEDIATE'."),
            id="arcature.W101",
        )
    ]


# --- Finding a task from a row -----------------------------------------------------


@dataclass(frozen=True)
class ResolvedTask:
    task: Task[Any, Any]
    backend: ArcatureBackend


def our_backend(alias: str) -> ArcatureBackend | None:
    try:
        backend = task_backends[alias]
    except (InvalidTaskBackend, ImproperlyConfigured, KeyError):
        return None
    return backend if isinstance(backend, ArcatureBackend) else None


def resolve_task(path: str, alias: str) -> ResolvedTask | str:
    """The Task a row names, or why there is none (a readable reason, never an exception).

    In order: the alias must be an ArcatureBackend here; the path must be
    plain Python names; the module must be one this process may import
    (:meth:`ArcatureBackend.import_refusal`, judged before importing); what
    the import produced must be a ``Task`` under its own module path, declared
    for an ArcatureBackend (or in a trusted module). A row naming
    ``os.system`` imports and runs nothing.
    """
    backend = our_backend(alias)
    if backend is None:
        return f"TASKS[{alias!r}] is not configured as an ArcatureBackend on this worker"
    problem = path_problem(path)
    if problem is not None:
        return problem
    module_name, attribute = split_path(path)
    refusal = backend.import_refusal(module_name, attribute, at_enqueue=False)
    if refusal is not None:
        return refusal
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        return f"cannot import module {module_name!r}: {exc}"
    except Exception as exc:
        return f"importing module {module_name!r} raised {describe_exception(exc)}"
    found = getattr(module, attribute, None)
    if not isinstance(found, Task):
        what = "does not exist" if found is None else f"is a {type(found).__name__}"
        return f"{path} {what}, not a django.tasks Task"
    if found.module_path != path:
        return f"{path} is an alias of the task {found.module_path}, not the task itself"
    if our_backend(found.backend) is None and not backend.module_allowed(module_name):
        return (
            f"{path} is a task of TASKS[{found.backend!r}], which is not an ArcatureBackend "
            "here, so it is not run"
        )
    if found.backend != alias:
        try:
            found = found.using(backend=alias)
        except Exception as exc:
            return f"{path} cannot run on TASKS[{alias!r}]: {describe_exception(exc)}"
    return ResolvedTask(found, backend)


def _missing_task(
    path: str, *, priority: int, queue: str, backend: str, why: str
) -> Task[Any, Any]:
    """A stand-in Task for a result whose task can no longer be found (its module vanished).

    ``get_result`` must still answer for such a row (it is FAILED, with the
    reason), so the Task is built without the backend's validation; calling
    it raises the reason.
    """
    module_name, _, attribute = path.rpartition(".")

    def missing(*args: Any, **kwargs: Any) -> Any:
        raise LookupError(f"the task {path} cannot be found: {why}")

    missing.__module__ = module_name or "__unknown__"
    missing.__name__ = attribute or path
    missing.__qualname__ = attribute or path
    stand_in = object.__new__(ArcatureTask)
    values = {
        "func": missing,
        "priority": priority,
        "backend": backend,
        "queue_name": queue,
        "run_after": None,
        "takes_context": False,
        "max_attempts": None,
        "timeout": None,
        "retry": None,
    }
    for name, value in values.items():
        object.__setattr__(stand_in, name, value)
    return stand_in

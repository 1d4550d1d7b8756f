"""The django.tasks backend's ``TASKS[alias]["OPTIONS"]``: parsed once, checked, resolved per task.

Django's tasks framework has no notion of attempts, backoff or timeouts, so
these live in the backend's OPTIONS (for every task), in a per-task table
(for tasks you cannot decorate), and on our task class (``@task(max_attempts=…)``).
Parsing collects every problem instead of raising at the first one, so the
system check can list them all.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from django_arcature.conf import TIMEOUT_EXPECTED, default_retry_policy, is_valid_timeout
from django_arcature.core.limits import MAX_ATTEMPTS_MAX
from django_arcature.core.retry import RetryPolicy

from .imports import CHECKED, IMPORT_POLICIES, STRICT

#: Keys of ``OPTIONS`` this backend understands.
OPTION_KEYS = ("MAX_ATTEMPTS", "TIMEOUT", "RETRY", "TASK_OPTIONS", "MODULES", "IMPORT_POLICY")
#: Keys of one ``OPTIONS["TASK_OPTIONS"]`` entry (and extra fields of ``@task``).
OVERRIDE_KEYS = ("max_attempts", "timeout", "retry")
#: Keys of a ``RETRY`` mapping: the arguments of :class:`RetryPolicy`.
RETRY_KEYS = ("base_seconds", "factor", "max_seconds", "jitter")


@dataclass(frozen=True)
class TaskOverrides:
    """Attempts, per-attempt timeout and backoff for a task; None means "not set here"."""

    max_attempts: int | None = None
    timeout: float | None = None
    retry: RetryPolicy | None = None

    def over(self, fallback: TaskOverrides) -> TaskOverrides:
        """These values where set, ``fallback``'s elsewhere."""
        return TaskOverrides(
            max_attempts=self.max_attempts
            if self.max_attempts is not None
            else fallback.max_attempts,
            timeout=self.timeout if self.timeout is not None else fallback.timeout,
            retry=self.retry if self.retry is not None else fallback.retry,
        )


@dataclass(frozen=True)
class BackendOptions:
    """A parsed OPTIONS dict."""

    defaults: TaskOverrides = TaskOverrides()
    per_task: Mapping[str, TaskOverrides] = field(default_factory=dict)
    #: Extra module prefixes (besides installed apps' ``tasks``) trusted without checks.
    modules: tuple[str, ...] = ()
    #: ``"checked"`` (any module that passes the import checks) or ``"strict"`` (only
    #: the trusted modules); an invalid value is treated as ``"strict"`` (fail closed).
    import_policy: str = CHECKED
    #: Why ``IMPORT_POLICY`` is invalid (its own system check, arcature.E103), or None.
    import_policy_problem: str | None = None

    def for_task(self, module_path: str, own: TaskOverrides) -> TaskOverrides:
        """The task's own fields, then its TASK_OPTIONS entry, then the backend-wide OPTIONS."""
        table = self.per_task.get(module_path, TaskOverrides())
        return own.over(table.over(self.defaults))


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_max_attempts(value: object, where: str) -> list[str]:
    if value is None or (_is_int(value) and 1 <= value <= MAX_ATTEMPTS_MAX):  # type: ignore[operator]
        return []
    return [
        f"{where} must be a whole number, at least 1 and at most {MAX_ATTEMPTS_MAX} "
        f"(got {value!r})."
    ]


def check_timeout(value: object, where: str) -> list[str]:
    if is_valid_timeout(value):
        return []
    return [f"{where} must be {TIMEOUT_EXPECTED} (got {value!r})."]


def parse_retry(value: object, where: str, problems: list[str]) -> RetryPolicy | None:
    """A RetryPolicy, or a mapping of its arguments (what fits in a settings file)."""
    if value is None or isinstance(value, RetryPolicy):
        return value
    if not isinstance(value, Mapping):
        problems.append(
            f"{where} must be a django_arcature.RetryPolicy or a dict with the keys "
            f"{', '.join(RETRY_KEYS)} (got {value!r})."
        )
        return None
    unknown = sorted(set(value) - set(RETRY_KEYS))
    if unknown:
        problems.append(f"{where} has unknown keys {unknown}; use {', '.join(RETRY_KEYS)}.")
        return None
    if not all(_is_number(v) for v in value.values()):
        problems.append(f"{where} values must be numbers (got {dict(value)!r}).")
        return None
    try:
        numbers = {key: float(v) for key, v in value.items()}
        defaults = _default_policy()
        return RetryPolicy(
            base_seconds=numbers.get("base_seconds", defaults.base_seconds),
            factor=numbers.get("factor", defaults.factor),
            max_seconds=numbers.get("max_seconds", defaults.max_seconds),
            jitter=numbers.get("jitter", defaults.jitter),
        )
    except ValueError as exc:
        problems.append(f"{where}: {exc}.")
        return None


def _default_policy() -> RetryPolicy:
    """ARCATURE's backoff fills the keys a RETRY dict leaves out."""
    try:
        return default_retry_policy()
    except Exception:  # invalid ARCATURE: its own system check reports it
        return RetryPolicy()


def parse_overrides(values: Mapping[str, Any], where: str, problems: list[str]) -> TaskOverrides:
    """Validate ``max_attempts``/``timeout``/``retry`` (lower-case keys) into TaskOverrides."""
    unknown = sorted(set(values) - set(OVERRIDE_KEYS))
    if unknown:
        problems.append(f"{where} has unknown keys {unknown}; use {', '.join(OVERRIDE_KEYS)}.")
    max_attempts = values.get("max_attempts")
    timeout = values.get("timeout")
    found = check_max_attempts(max_attempts, f"{where}['max_attempts']") + check_timeout(
        timeout, f"{where}['timeout']"
    )
    problems.extend(found)
    retry = parse_retry(values.get("retry"), f"{where}['retry']", problems)
    if found:
        return TaskOverrides(retry=retry)
    return TaskOverrides(
        max_attempts=max_attempts,
        timeout=float(timeout) if timeout is not None else None,
        retry=retry,
    )


def parse_options(alias: str, options: object) -> tuple[BackendOptions, list[str]]:
    """``TASKS[alias]["OPTIONS"]`` → BackendOptions, plus every problem found."""
    problems: list[str] = []
    where = f"TASKS[{alias!r}]['OPTIONS']"
    if options is None:
        options = {}
    if not isinstance(options, Mapping):
        return BackendOptions(), [f"{where} must be a dict (got {options!r})."]
    unknown = sorted(set(options) - set(OPTION_KEYS))
    if unknown:
        problems.append(f"{where} has unknown keys {unknown}; use {', '.join(OPTION_KEYS)}.")
    defaults = parse_overrides(
        {
            key.lower(): options[key]
            for key in ("MAX_ATTEMPTS", "TIMEOUT", "RETRY")
            if key in options
        },
        where,
        problems,
    )
    per_task: dict[str, TaskOverrides] = {}
    table = options.get("TASK_OPTIONS", {})
    if not isinstance(table, Mapping):
        problems.append(f"{where}['TASK_OPTIONS'] must be a dict of module path → options.")
        table = {}
    for path, values in table.items():
        entry = f"{where}['TASK_OPTIONS'][{path!r}]"
        if not isinstance(path, str) or "." not in path:
            problems.append(f"{entry}: the key must be a task's module path, e.g. 'app.tasks.f'.")
            continue
        if not isinstance(values, Mapping):
            problems.append(f"{entry} must be a dict with max_attempts, timeout and/or retry.")
            continue
        per_task[path] = parse_overrides(values, entry, problems)
    modules = options.get("MODULES", ())
    if isinstance(modules, str) or not all(isinstance(m, str) and m for m in modules):
        problems.append(f"{where}['MODULES'] must be a list of module names (got {modules!r}).")
        modules = ()
    policy = options.get("IMPORT_POLICY", CHECKED)
    policy_problem = None
    if policy not in IMPORT_POLICIES:
        policy_problem = (
            f"{where}['IMPORT_POLICY'] must be one of {', '.join(map(repr, IMPORT_POLICIES))} "
            f"(got {policy!r})."
        )
        problems.append(policy_problem)
        policy = STRICT
    parsed = BackendOptions(defaults, per_task, tuple(modules), policy, policy_problem)
    return parsed, problems


def overrides_of(task: object) -> TaskOverrides:
    """The extra fields a task object carries (none on a plain django.tasks Task)."""
    return TaskOverrides(**{f.name: getattr(task, f.name, None) for f in fields(TaskOverrides)})

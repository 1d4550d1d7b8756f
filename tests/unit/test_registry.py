"""``@job``, the name → handler registry, autodiscovery and its system check (no database)."""

from __future__ import annotations

import inspect
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from django_arcature import RetryPolicy, UnknownTask, job, registry
from django_arcature.checks.registry import check_job_registry
from django_arcature.exceptions import MalformedPayload
from tests.integration import api_jobs


@pytest.fixture
def scratch() -> Iterator[list[str]]:
    """Names registered by a test, unregistered after it."""
    names: list[str] = []
    yield names
    for name in names:
        registry.unregister(name)


def test_the_default_name_is_module_and_qualname(scratch: list[str]) -> None:
    @job
    def plain(x: int) -> int:
        return x * 2

    scratch.append(plain.name)
    assert plain.name == f"{__name__}.test_the_default_name_is_module_and_qualname.<locals>.plain"
    assert registry.get(plain.name).func is plain.__wrapped__


def test_an_explicit_name_is_used_as_is(scratch: list[str]) -> None:
    @job(name="unit.renamed", queue="q", priority=4, max_attempts=7, timeout=3, unique=True)
    def moved_function() -> None:
        return None

    scratch.append("unit.renamed")
    spec = registry.get("unit.renamed")
    assert (spec.queue, spec.priority, spec.max_attempts, spec.timeout, spec.unique) == (
        "q",
        4,
        7,
        3,
        True,
    )
    assert moved_function.name == "unit.renamed"


def test_the_handle_still_is_the_function() -> None:
    assert api_jobs.add(2, 3) == 5
    assert api_jobs.add.__name__ == "add"
    assert api_jobs.add.__doc__ is None
    assert repr(api_jobs.add) == "<job api.add>"
    assert inspect.signature(api_jobs.add) == inspect.signature(api_jobs.add.__wrapped__)


def test_async_functions_are_accepted_and_recognised() -> None:
    spec = registry.get("api.fetch")
    assert spec.is_async
    assert not registry.get("api.add").is_async


def test_using_keeps_the_options_apart_from_the_arguments() -> None:
    handle = api_jobs.schedule.using(queue="slow", delay=5, priority=1)
    assert handle.options.queue == "slow"
    assert handle.options.delay == 5
    assert handle.name == "api.schedule"
    assert api_jobs.schedule.options.queue is None  # the original is untouched
    at = datetime(2030, 1, 1, tzinfo=UTC)
    assert handle.using(run_at=at).options.delay is None
    assert handle.using(run_at=at).using(delay=1).options.run_at is None


def test_a_second_function_under_a_taken_name_is_refused() -> None:
    with pytest.raises(ImproperlyConfigured) as info:

        @job(name="api.add")
        def impostor(a: int) -> int:
            return a

    message = str(info.value)
    assert "two job handlers are registered under the name 'api.add'" in message
    assert "tests.integration.api_jobs.add" in message
    assert "impostor" in message
    assert "different @job(name=...)" in message
    assert registry.get("api.add").func is api_jobs.add.__wrapped__


def test_reregistering_the_same_function_replaces_it(scratch: list[str]) -> None:
    def twice() -> None:
        return None

    first = job(name="unit.twice")(twice)
    second = job(name="unit.twice")(twice)
    scratch.append("unit.twice")
    assert first.spec.func is second.spec.func


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"name": ""}, "@job\\(name=...\\) must be a non-empty string"),
        ({"name": "x" * 256}, "is 256 characters long; the job table stores at most 255"),
        ({"queue": ""}, "@job\\(queue=...\\) must be a name of 1 to 100 characters"),
        ({"priority": "high"}, "@job\\(priority=...\\) must be an int"),
        ({"max_attempts": 0}, "@job\\(max_attempts=...\\) must be a whole number, at least 1"),
        ({"timeout": -1}, "@job\\(timeout=...\\) must be None or a number of seconds above 0"),
        ({"retry": {"base": 1}}, "@job\\(retry=...\\) must be a django_arcature.RetryPolicy"),
    ],
)
def test_bad_job_options_fail_at_import(options: dict[str, object], message: str) -> None:
    with pytest.raises(ImproperlyConfigured, match=message):
        job(**options)(lambda: None)  # type: ignore[call-overload]


def test_a_job_cannot_be_decorated_twice() -> None:
    with pytest.raises(TypeError, match="already a job"):
        job(name="unit.again")(api_jobs.add)


def test_a_retry_policy_is_kept_on_the_spec() -> None:
    spec = registry.get("api.flaky")
    assert spec.retry == RetryPolicy(base_seconds=0, jitter=0)


def test_unknown_names_get_the_nearest_registered_names() -> None:
    with pytest.raises(UnknownTask) as info:
        registry.get("api.gret")
    assert "No job handler is registered under 'api.gret'. Did you mean 'api.greet'" in str(
        info.value
    )
    assert "job(s) are registered" in str(info.value)


def test_an_unknown_short_name_suggests_the_full_one() -> None:
    message = registry.unknown_task_message("declined")
    assert "Did you mean 'api.declined'?" in message


def test_an_unknown_name_with_nothing_close_says_so() -> None:
    message = registry.unknown_task_message("zzzzzzzzzzzzzz")
    assert "Did you mean" not in message
    assert message.startswith("No job handler is registered under 'zzzzzzzzzzzzzz'.")


def test_prepare_enqueue_prefixes_the_job_name_to_validation_errors() -> None:
    with pytest.raises(MalformedPayload, match=r"^cannot enqueue api\.add: argument 'a' is a set"):
        registry.prepare_enqueue(api_jobs.add, [{1}], {})


@pytest.mark.parametrize("option", ["delay", "queue", "priority", "run_at"])
def test_an_enqueue_option_passed_as_an_argument_says_where_it_belongs(option: str) -> None:
    # add.enqueue(1, delay=60): the Celery habit; the job has no parameter of that name.
    with pytest.raises(MalformedPayload) as info:
        registry.prepare_enqueue(api_jobs.add, [1], {option: 60})
    assert str(info.value) == (
        "cannot enqueue api.add: the arguments do not fit add(a: int, b: int = 0): "
        f"got an unexpected keyword argument {option!r}. {option!r} is an option of the "
        f"enqueue, not an argument of the job: pass it as .using({option}=...).enqueue(...), "
        f"or Job.objects.enqueue(..., {option}=...)"
    )


def test_a_job_whose_own_parameter_is_called_delay_gets_no_hint(scratch: list[str]) -> None:
    @job(name="scratch.wait")
    def wait(delay: int) -> None:
        return None

    scratch.append("scratch.wait")
    with pytest.raises(MalformedPayload) as info:
        registry.prepare_enqueue(wait, [], {"delay": "soon"})
    assert "option of the enqueue" not in str(info.value)


def test_the_unique_key_is_the_name_and_a_digest_of_the_bound_call() -> None:
    spec = registry.get("api.unique_sync")
    key = spec.unique_key([5], {})
    assert key.startswith("api.unique_sync:")
    assert len(key) == len("api.unique_sync:") + 64
    assert key == spec.unique_key([], {"account_id": 5})
    assert key == spec.unique_key([5, False], {})
    assert key != spec.unique_key([5, True], {})
    long_name = registry.JobSpec(name="n" * 255, func=api_jobs.add)
    assert len(long_name.unique_key([1], {})) <= 255


# --- autodiscovery and the system check ----------------------------------------------------


@pytest.fixture
def rediscover(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let autodiscover() run again for this test (it runs once per process)."""
    monkeypatch.setattr(registry, "_discovered", False)


def test_the_check_autodiscovers_jobs_modules(rediscover: None) -> None:
    assert check_job_registry() == []
    assert registry._discovered
    # tests.testapp.jobs is an installed app's jobs module: found without importing it here.
    assert "tests.add" in registry.registered_names()


def test_manage_py_check_passes_with_the_installed_apps() -> None:
    call_command("check", tags=["compatibility"], verbosity=0)


@override_settings(
    INSTALLED_APPS=[
        "django.contrib.contenttypes",
        "django.contrib.auth",
        "django_arcature",
        "tests.testapp",
        "tests.unit.registry_fixtures.clashing_app",
    ]
)
def test_two_handlers_under_one_name_fail_the_check(rediscover: None) -> None:
    messages = check_job_registry()
    assert [m.id for m in messages] == ["arcature.E010"]
    assert "two job handlers are registered under the name 'api.add'" in messages[0].msg
    assert "clashing_app.jobs.add_but_different" in messages[0].msg
    with pytest.raises(SystemCheckError, match=r"arcature\.E010"):
        call_command("check", tags=["compatibility"], verbosity=0)
    assert registry.get("api.add").func is api_jobs.add.__wrapped__  # the first one stays


@override_settings(
    INSTALLED_APPS=[
        "django.contrib.contenttypes",
        "django.contrib.auth",
        "django_arcature",
        "tests.unit.registry_fixtures.broken_app",
    ]
)
def test_a_jobs_module_that_fails_to_import_fails_the_check(rediscover: None) -> None:
    messages = check_job_registry()
    assert [m.id for m in messages] == ["arcature.E011"]
    assert "ModuleNotFoundError: No module named 'django_arcature.not_a_module'" in messages[0].msg
    assert "Importing tests.unit.registry_fixtures.broken_app.jobs failed" in messages[0].msg
    assert "import tests.unit.registry_fixtures.broken_app.jobs" in (messages[0].hint or "")
    assert not registry._discovered  # tried again next time, once fixed


def _no_parameters() -> None: ...


def _defaults_only(a: int = 1, *rest: int, **options: str) -> None: ...


def _positional(a: int) -> None: ...


def _keyword_only(*, k: str) -> None: ...


@pytest.mark.parametrize(
    ("func", "fits_no_arguments"),
    [(_no_parameters, True), (_defaults_only, True), (_positional, False), (_keyword_only, False)],
)
def test_a_call_without_arguments_is_checked_against_the_signature(
    func: object, fits_no_arguments: bool
) -> None:
    """A call without arguments skips the binding only where nothing is required."""
    spec = registry.JobSpec(name="t.no_args", func=func)  # type: ignore[arg-type]
    assert spec.needs_arguments is not fits_no_arguments
    if fits_no_arguments:
        spec.validate((), {})
        assert registry.prepare_enqueue(registry.JobHandle(spec), (), {}) is spec.plan
    else:
        with pytest.raises(MalformedPayload, match="do not fit"):
            spec.validate((), {})


@override_settings(
    INSTALLED_APPS=[
        "django.contrib.contenttypes",
        "django.contrib.auth",
        "django_arcature",
        "tests.unit.registry_fixtures.models_broken_app",
    ]
)
def test_the_e011_hint_command_shows_the_real_error_of_a_jobs_module_that_imports_models(
    rediscover: None, tmp_path: Path
) -> None:
    """The hint was ``python -c 'import app.jobs'``: without Django set up, any jobs
    module importing models failed there with "settings are not configured" (or
    "apps aren't loaded yet") instead of showing its own error. Run the hint as
    written, with ``manage.py`` being this project's."""
    (message,) = check_job_registry()
    assert message.id == "arcature.E011"
    hint = message.hint or ""
    command = re.search(r"`([^`]+)`", hint)
    assert command is not None, hint
    argv = shlex.split(command.group(1))
    assert argv[:2] == ["python", "manage.py"], argv
    manage = tmp_path / "manage.py"
    manage.write_text(
        "import sys\nfrom django.core.management import execute_from_command_line\n"
        "execute_from_command_line(sys.argv)\n"
    )
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, str(manage), *argv[2:]],
        cwd=root,
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.unit.registry_fixtures.models_broken_settings",
            "PYTHONPATH": str(root),
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0
    assert "Traceback" in done.stderr
    assert "No module named 'django_arcature.not_a_module'" in done.stderr, done.stderr
    assert "settings are not configured" not in done.stderr
    assert "Apps aren't loaded yet" not in done.stderr

"""Which modules a django.tasks row can make a process import, and what then runs (issue 19, A1).

Before: enqueue refused every task outside ``<installed app>.tasks`` and
``OPTIONS["MODULES"]``, so a reusable package whose tasks module is not an
installed app's broke on every save. Now any module-level ``@task`` the framework
accepts runs with no configuration (``IMPORT_POLICY = "checked"``, the default),
while a row, which anyone who can write the table can write, still imports only
modules that pass checks made *before* importing (plain Python names, not the
standard library, a file on sys.path whose source defines a decorated function of
that name) and runs only what the import produced if it is a Task of this
backend. ``IMPORT_POLICY = "strict"`` keeps the old allowlist.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core import checks
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from django_arcature.backend import ArcatureBackend
from django_arcature.models import Job
from django_arcature.tasks.backend import resolve_task
from django_arcature.tasks.compat import (
    FRAMEWORK,
    InvalidTask,
    InvalidTaskBackend,
    TaskResultStatus,
    task_backends,
)
from django_arcature.testing import drain
from tests.integration import backend_tasks
from tests.outside.search import tasks as search_tasks

pytestmark = pytest.mark.django_db

BACKEND = "django_arcature.backend.ArcatureBackend"
SIDE_EFFECT = "tests.outside.side_effect"
NOT_TASKS = "tests.outside.not_tasks"
OTHER_BACKEND = "tests.outside.other_backend"


def tasks_setting(**options: Any) -> dict[str, Any]:
    return {"default": {"BACKEND": BACKEND, "QUEUES": [], "OPTIONS": options}}


def hostile_row(task_name: str, *args: object) -> Job:
    """A row as someone with write access to the table leaves it (no backend checks)."""
    job = Job.objects.enqueue("tests.outside.placeholder.task", args=list(args), backend="default")
    Job.objects.filter(pk=job.pk).update(task_name=task_name)
    return job


@pytest.fixture
def side_effect_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The file ``tests.outside.side_effect`` writes if anything imports it."""
    marker = tmp_path / "side-effect.txt"
    monkeypatch.setenv("ARCATURE_TEST_SIDE_EFFECT_FILE", str(marker))
    forgotten = (SIDE_EFFECT, NOT_TASKS, OTHER_BACKEND, "antigravity", "this", "webbrowser")
    saved = {name: sys.modules[name] for name in forgotten if name in sys.modules}
    for name in forgotten:
        forget(name)
    yield marker
    for name in forgotten:
        forget(name)
    sys.modules.update(saved)


def forget(name: str) -> None:
    """As if ``name`` was never imported (``from package import module`` included)."""
    sys.modules.pop(name, None)
    parent, _, child = name.rpartition(".")
    if parent in sys.modules and hasattr(sys.modules[parent], child):
        delattr(sys.modules[parent], child)


# --- zero configuration ------------------------------------------------------------------------


def test_a_task_outside_every_app_and_modules_enqueues_and_runs(tmp_path: Path) -> None:
    index = tmp_path / "index.txt"

    result = search_tasks.update_index.enqueue("blog.Post", [3, 4], str(index))
    drain()

    fetched = search_tasks.update_index.get_result(result.id)
    assert fetched.status == TaskResultStatus.SUCCESSFUL, fetched.errors
    assert fetched.return_value == 2
    assert index.read_text() == "blog.Post:3\nblog.Post:4\n"


def test_the_same_task_runs_from_a_row_in_a_process_that_has_not_imported_it(
    tmp_path: Path,
) -> None:
    """The worker's view: the module is found and checked before it is imported."""
    index = tmp_path / "index.txt"
    result = search_tasks.update_index.enqueue("blog.Post", [7], str(index))
    forget(search_tasks.__name__)
    try:
        drain()
    finally:
        sys.modules[search_tasks.__name__] = search_tasks
        sys.modules["tests.outside.search"].tasks = search_tasks  # type: ignore[attr-defined]
    assert Job.objects.get(pk=result.id).status == "succeeded"
    assert index.read_text() == "blog.Post:7\n"


# --- hostile rows --------------------------------------------------------------------------------

HOSTILE = [
    pytest.param("os.system", "standard library", id="os.system"),
    pytest.param("subprocess.run", "standard library", id="subprocess.run"),
    pytest.param("builtins.exec", "standard library", id="builtins.exec"),
    pytest.param("antigravity.geohash", "standard library", id="antigravity"),
    pytest.param("this.s", "standard library", id="this"),
    pytest.param(
        f"{SIDE_EFFECT}.anything", "does not define a decorated function", id="side-effect"
    ),
    pytest.param(f"{SIDE_EFFECT}.main", "does not define a decorated function", id="script-main"),
    pytest.param(f"{NOT_TASKS}.VALUE", "does not define a decorated function", id="a-constant"),
    pytest.param(f"{NOT_TASKS}.Thing", "does not define a decorated function", id="a-class"),
    pytest.param(f"{NOT_TASKS}.cached", "not a django.tasks Task", id="decorated-non-task"),
    pytest.param(
        "tests.integration.backend_tasks.plain_function", "not a django.tasks Task", id="plain"
    ),
    pytest.param("tests.outside.nowhere.task", "No module named", id="missing-module"),
    pytest.param("no_such_package_19.tasks.run", "No module named", id="missing-package"),
    pytest.param("tests.outside.search.nope", "does not exist", id="missing-attribute"),
    pytest.param(
        "tests.outside.search.tasks.update_index.x", "not a package", id="through-a-module"
    ),
    pytest.param("django.contrib.admin.tests.AdminSeleniumTestCase", "decorated", id="app-tests"),
    pytest.param("os.system; rm -rf /", "not a Python name", id="shell"),
    pytest.param("../../etc/passwd.x", "not a Python name", id="file-path"),
    pytest.param("tests/outside/side_effect.main", "not a Python name", id="slashes"),
    pytest.param("tests..outside.x", "not a Python name", id="empty-part"),
    pytest.param(" os.system", "not a Python name", id="leading-space"),
    pytest.param("tests.outside.x\n", "not a Python name", id="newline"),
    pytest.param("\uff4f\uff53.system", "not a Python name", id="full-width"),
    pytest.param("tests.class.x", "keyword", id="keyword"),
    pytest.param("__main__.run", "dunder", id="main"),
    pytest.param("tests.outside.__init__.x", "dunder", id="init"),
    pytest.param(
        "tests.outside.search.tasks.update_index.__globals__", "dunder", id="dunder-attribute"
    ),
    pytest.param("tests.outside.search.tasks.__builtins__", "dunder", id="builtins-attribute"),
    pytest.param("update_index", "module.function", id="no-module"),
    pytest.param("a" * 200 + ".b" * 27, "No module named", id="255-characters"),
]


@pytest.mark.usefixtures("side_effect_file")
@pytest.mark.parametrize(("task_name", "reason"), HOSTILE)
def test_a_hostile_row_is_dead_lettered_with_a_reason_and_nothing_else_happens(
    task_name: str, reason: str, side_effect_file: Path
) -> None:
    from tests.outside import not_tasks  # imported here, so `cached` is the only way in

    forget(NOT_TASKS)
    job = hostile_row(task_name, "echo pwned")
    fine = backend_tasks.add.enqueue(1, 2)

    drain()

    job.refresh_from_db()
    assert (job.status, job.error_kind) == ("dead", "unknown")
    assert reason in job.last_error, job.last_error
    assert job.last_error.startswith(f"not running {task_name!r}: "), job.last_error
    assert not side_effect_file.exists()
    for module in (SIDE_EFFECT, "antigravity", "this", "webbrowser"):
        assert module not in sys.modules
    assert backend_tasks.PLAIN_CALLS == []
    assert sys.modules.get(NOT_TASKS, not_tasks).CALLS == []
    # The worker went on: the next job ran, and the row still reads as a result.
    assert backend_tasks.add.get_result(fine.id).return_value == 3
    assert task_backends["default"].get_result(str(job.id)).status == TaskResultStatus.FAILED


@pytest.mark.parametrize(
    "path", ["a." * 5000 + "b", "x" * 100_000, "tests.outside.search.tasks." + "u" * 300]
)
def test_a_huge_path_is_refused_before_anything_is_looked_up(path: str) -> None:
    """Longer than any task_name column (SQLite alone would store it)."""
    reason = resolve_task(path, "default")
    assert isinstance(reason, str)
    assert "-character name is not a module path" in reason


def test_a_task_of_another_backend_is_not_run(side_effect_file: Path) -> None:
    config = {
        **tasks_setting(),
        "inline": {"BACKEND": f"{FRAMEWORK}.backends.immediate.ImmediateBackend"},
    }
    with override_settings(TASKS=config):
        job = hostile_row(f"{OTHER_BACKEND}.ping", "hello")
        drain()
        from tests.outside import other_backend

        job.refresh_from_db()
        assert (job.status, job.error_kind) == ("dead", "unknown")
        assert "is a task of TASKS['inline'], which is not an ArcatureBackend" in job.last_error
        assert other_backend.CALLS == []
        # Enqueue refuses it too: what can be enqueued is what a worker runs.
        with pytest.raises(InvalidTask, match="declared for TASKS\\['inline'\\]"):
            other_backend.ping.using(backend="default").enqueue("again")


def test_a_task_of_another_backend_runs_from_a_module_listed_in_modules(
    side_effect_file: Path,
) -> None:
    config = {
        **tasks_setting(MODULES=[OTHER_BACKEND]),
        "inline": {"BACKEND": f"{FRAMEWORK}.backends.immediate.ImmediateBackend"},
    }
    with override_settings(TASKS=config):
        from tests.outside import other_backend

        result = other_backend.ping.using(backend="default").enqueue("listed")
        drain()
        assert Job.objects.get(pk=result.id).status == "succeeded"
        assert other_backend.CALLS == ["listed"]


def test_get_result_of_a_hostile_row_in_a_web_process_imports_nothing(
    side_effect_file: Path,
) -> None:
    job = hostile_row(f"{SIDE_EFFECT}.anything")

    fetched = task_backends["default"].get_result(str(job.id))

    assert fetched.status == TaskResultStatus.READY
    assert SIDE_EFFECT not in sys.modules
    assert not side_effect_file.exists()


# --- IMPORT_POLICY = "strict" ------------------------------------------------------------


def test_strict_refuses_a_task_outside_apps_and_modules_at_enqueue_and_in_the_worker(
    tmp_path: Path,
) -> None:
    with override_settings(TASKS=tasks_setting(IMPORT_POLICY="strict")):
        with pytest.raises(InvalidTask, match=r"IMPORT_POLICY 'strict'.*MODULES"):
            search_tasks.update_index.enqueue("blog.Post", [1], str(tmp_path / "i"))
        assert not Job.objects.exists()
        job = hostile_row("tests.outside.search.tasks.update_index", "m", [1], "x")
        drain()
    job.refresh_from_db()
    assert (job.status, job.error_kind) == ("dead", "unknown")
    assert "(IMPORT_POLICY is 'strict')" in job.last_error


def test_strict_still_runs_installed_apps_tasks_and_listed_modules(tmp_path: Path) -> None:
    from tests.testapp import tasks as app_tasks

    index = tmp_path / "index.txt"
    setting = tasks_setting(IMPORT_POLICY="strict", MODULES=["tests.outside.search"])
    with override_settings(TASKS=setting):
        listed = search_tasks.update_index.enqueue("blog.Post", [9], str(index))
        in_app = app_tasks.echo.enqueue({"a": 1})
        drain()
    assert Job.objects.get(pk=listed.id).status == "succeeded"
    assert Job.objects.get(pk=in_app.id).status == "succeeded"


@pytest.mark.parametrize("value", ["loose", "STRICT", None, ["strict"], 1])
def test_a_bad_import_policy_is_its_own_check_error_and_fails_closed(value: object) -> None:
    backend = ArcatureBackend("default", {"QUEUES": [], "OPTIONS": {"IMPORT_POLICY": value}})

    messages = backend.check()

    assert [m.id for m in messages] == ["arcature.E103"]
    assert isinstance(messages[0], checks.Error)
    assert "IMPORT_POLICY" in messages[0].msg
    assert "'strict'" in (messages[0].hint or "")
    assert backend.arcature_options.import_policy == "strict"
    assert backend.import_refusal("tests.outside.search.tasks", "x", at_enqueue=False)


def test_manage_py_check_reports_a_bad_import_policy() -> None:
    with (
        override_settings(TASKS=tasks_setting(IMPORT_POLICY="open")),
        pytest.raises(SystemCheckError) as failure,
    ):
        call_command("check")
    assert "arcature.E103" in str(failure.value)
    with (
        override_settings(TASKS=tasks_setting(IMPORT_POLICY="open")),
        pytest.raises(InvalidTaskBackend, match="IMPORT_POLICY"),
    ):
        search_tasks.update_index.enqueue("blog.Post", [1], "unused")


def test_a_task_in_another_module_of_an_installed_app_runs_by_default() -> None:
    """Refused before issue 19 unless listed in MODULES; the framework accepts it."""
    from tests.testapp import side_effects

    result = side_effects.defined_outside_tasks.enqueue(5)
    drain()

    assert side_effects.defined_outside_tasks.get_result(result.id).return_value == 5

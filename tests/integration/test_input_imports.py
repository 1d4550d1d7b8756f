"""What the django.tasks backend imports because a row names it (issue 10, defect 11).

Before: any submodule of any installed app named by a row was imported, by the
worker and by ``get_result`` in a web process (``django.contrib.admin.tests``,
a management command, a module with side effects), while the README said task
names are "never imported". That allowlist is now ``IMPORT_POLICY = "strict"``
(these tests run under it): a row's module is imported only if it is an
installed app's ``tasks`` module (or inside its ``tasks`` package) or listed in
``OPTIONS["MODULES"]``; ``enqueue`` refuses a task defined anywhere else, so
what can be enqueued is exactly what a worker will import. The default policy
(issue 19, tests/integration/test_backend_imports.py) runs any module-level
task and checks other modules before importing them.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
from django.test import override_settings

from django_arcature.models import Job
from django_arcature.tasks.compat import InvalidTask, TaskResultStatus, task_backends
from django_arcature.testing import drain
from tests.testapp import tasks as app_tasks

pytestmark = pytest.mark.django_db

SIDE_EFFECTS = "tests.testapp.side_effects"
ADMIN_TESTS = "django.contrib.admin.tests"


def row(task_name: str, *args: object) -> Job:
    """A row as a bad deploy or a hand-edit leaves it, bypassing the backend's checks."""
    return Job.objects.enqueue(task_name, args=list(args), backend="default")


STRICT_TASKS = {
    "default": {
        "BACKEND": "django_arcature.backend.ArcatureBackend",
        "QUEUES": [],
        "OPTIONS": {"IMPORT_POLICY": "strict"},
    }
}


@pytest.fixture(autouse=True)
def strict() -> Iterator[None]:
    with override_settings(TASKS=STRICT_TASKS):
        yield


def forget(name: str) -> None:
    sys.modules.pop(name, None)
    parent, _, child = name.rpartition(".")
    if parent in sys.modules and hasattr(sys.modules[parent], child):
        delattr(sys.modules[parent], child)


@pytest.fixture
def never_imported() -> Iterator[None]:
    """Forget the two modules (another test may have imported them on purpose)."""
    for name in (SIDE_EFFECTS, ADMIN_TESTS):
        forget(name)
    yield
    for name in (SIDE_EFFECTS, ADMIN_TESTS):
        forget(name)


@pytest.mark.usefixtures("never_imported")
@pytest.mark.parametrize(
    "task_name",
    [f"{SIDE_EFFECTS}.defined_outside_tasks", f"{ADMIN_TESTS}.AdminSeleniumTestCase"],
)
def test_the_worker_does_not_import_other_modules_of_installed_apps(task_name: str) -> None:
    job = row(task_name, 1)

    drain()

    job.refresh_from_db()
    assert (job.status, job.error_kind) == ("dead", "unknown")
    assert "MODULES" in job.last_error
    assert task_name.rpartition(".")[0] not in sys.modules


@pytest.mark.usefixtures("never_imported")
def test_get_result_in_a_web_process_imports_nothing_a_row_names() -> None:
    job = row(f"{SIDE_EFFECTS}.defined_outside_tasks", 1)

    fetched = task_backends["default"].get_result(str(job.id))

    assert fetched.status == TaskResultStatus.READY
    assert SIDE_EFFECTS not in sys.modules


def test_an_apps_tasks_module_is_imported_and_run() -> None:
    result = app_tasks.echo.enqueue({"a": [1, 2.5]})

    drain()

    fetched = app_tasks.echo.get_result(result.id)
    assert fetched.status == TaskResultStatus.SUCCESSFUL
    assert fetched.return_value == {"a": [1, 2.5]}


def test_enqueue_refuses_a_task_the_worker_would_not_import() -> None:
    from tests.testapp import side_effects

    with pytest.raises(InvalidTask, match="MODULES"):
        side_effects.defined_outside_tasks.enqueue(1)
    assert not Job.objects.exists()

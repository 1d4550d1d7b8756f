"""A job whose handler the running process does not have says what to change.

Found trying the tutorial as a new user: with the app that defines a job left out of
INSTALLED_APPS, the shell that imported the module could enqueue it, but the worker
(which finds handlers only in installed apps' jobs.py) killed it as dead 'unknown' with
"no job handler is registered under 'greetings.jobs.greet'", which names no remedy.
The job's last_error now carries the registry's explanation. Runs the real claim,
dispatch and fenced write (``run_job``) on every database.
"""

from __future__ import annotations

import pytest

from django_arcature import job, registry
from django_arcature.models import ErrorKind, Job
from django_arcature.testing import run_job

pytestmark = pytest.mark.django_db


@pytest.fixture
def orphan() -> Job:
    """A pending job whose handler was registered when it was enqueued, and is gone now."""

    @job(name="outside.installed.orphaned_xqzv")
    def orphaned_xqzv(name: str) -> str:
        return name

    enqueued = orphaned_xqzv.enqueue("Ada")
    registry.unregister("outside.installed.orphaned_xqzv")
    return enqueued


def test_an_unknown_handler_names_installed_apps(orphan: Job) -> None:
    finished = run_job(orphan)

    assert (finished.status, finished.error_kind) == ("dead", ErrorKind.UNKNOWN)
    assert finished.last_error.startswith(
        "No job handler is registered under 'outside.installed.orphaned_xqzv'."
    )
    assert "Handlers are found in the jobs.py modules of INSTALLED_APPS" in finished.last_error


def test_a_near_name_is_suggested_to_the_worker_too() -> None:
    @job(name="outside.installed.greeting")
    def greeting(name: str) -> str:
        return name

    try:
        enqueued = greeting.enqueue("Ada")
        registry.unregister("outside.installed.greeting")

        @job(name="outside.installed.greetings")
        def greetings(name: str) -> str:
            return name

        finished = run_job(enqueued)
    finally:
        registry.unregister("outside.installed.greetings")
    assert finished.error_kind == ErrorKind.UNKNOWN
    assert "Did you mean 'outside.installed.greetings'?" in finished.last_error

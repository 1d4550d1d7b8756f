"""Hostile payloads, results and error texts, end to end, on every database (issue 10, part b).

Each value is enqueued through one of the four enqueue paths. The documented
rules (the oracle in ``payload_strategies``) say whether it must be refused;
refused values must raise ``MalformedPayload`` before any SQL, leaving the
caller's transaction usable; accepted ones are run by a real worker process
(``arcature_worker --burst``, batched claims and completions) and must come
back exactly (types included) as the stored payload and as the result, and the
admin's list and detail pages must render them (status 200, markup escaped).
Error texts with NUL, lone surrogates and markup raised by handlers must end
the job ``dead`` with a readable, escaped reason.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.test import Client
from django.urls import reverse
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from django_arcature.exceptions import MalformedPayload
from django_arcature.models import Job
from tests.dburl import database_url
from tests.testapp import tasks as app_tasks
from tests.testapp.jobs import echo

from .payload_strategies import (
    MAX_PAYLOAD_BYTES,
    PROFILE,
    big_strings,
    json_values,
    refusal,
    same,
    size_band,
    text,
)

pytestmark = [pytest.mark.slow, pytest.mark.heavy, pytest.mark.django_db(transaction=True)]

REPO = Path(__file__).resolve().parents[2]

RUNS: dict[str, int] = {}


def counted(name: str) -> None:
    RUNS[name] = RUNS.get(name, 0) + 1


class _ExamplesReport:
    """A plugin registered by the fixture below: its summary line survives output capture."""

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if RUNS:
            parts = ", ".join(f"{name}: {count}" for name, count in sorted(RUNS.items()))
            terminalreporter.write_line(f"hypothesis payload suite on {connection.vendor}: {parts}")


@pytest.fixture(scope="module", autouse=True)
def report_examples(request: pytest.FixtureRequest) -> None:
    """Say how many examples ran, per database, at the end of the run (CI keeps the line)."""
    manager = request.config.pluginmanager
    if not manager.has_plugin("arcature-payload-examples"):
        manager.register(_ExamplesReport(), "arcature-payload-examples")


def via_manager(value: Any) -> Job:
    return Job.objects.enqueue("tests.echo", args=[value])


def via_manager_many(value: Any) -> Job:
    return Job.objects.enqueue_many("tests.echo", [[value]])[0]


def via_handle(value: Any) -> Job:
    return echo.enqueue(value)


def via_django_tasks(value: Any) -> Job:
    return Job.objects.get(pk=app_tasks.echo.enqueue(value).id)


PATHS: dict[str, Callable[[Any], Job]] = {
    "manager.enqueue": via_manager,
    "manager.enqueue_many": via_manager_many,
    "@job.enqueue": via_handle,
    "django.tasks": via_django_tasks,
}


def run_worker(timeout: float = 120) -> None:
    """A real ``arcature_worker --burst`` process until the queue is empty; fail if it
    does not stop (a job stuck) or exits non-zero."""
    connection.close()  # what this test wrote is committed; the worker sees it
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "ARCATURE_USE_TEST_DATABASE": "1",
        "DATABASE_URL": database_url(),
        "PYTHONPATH": str(REPO),
    }
    try:
        finished = subprocess.run(
            [sys.executable, "-m", "django", "arcature_worker", "--burst", "--concurrency", "2"],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the worker was still running after {timeout}s: a job is stuck")
    assert finished.returncode == 0, finished.stderr[-3000:]


def admin_client() -> Client:
    user = User.objects.filter(username="root").first() or User.objects.create_superuser(
        "root", "root@example.com", "pw"
    )
    client = Client()
    client.force_login(user)
    return client


def assert_admin_renders(client: Client, job: Job) -> None:
    pages = [
        reverse("admin:django_arcature_job_change", args=[job.pk]),
        reverse("admin:django_arcature_job_changelist") + f"?q={job.pk}",
    ]
    if job.status == "dead":
        pages.append(reverse("admin:django_arcature_deadjob_change", args=[job.pk]))
        pages.append(reverse("admin:django_arcature_deadjob_changelist"))
    for page in pages:
        response = client.get(page)
        assert response.status_code == 200, page
        assert b"<script>alert(" not in response.content, f"unescaped markup on {page}"


def stored_argument(job: Job) -> Any:
    payload = Job.objects.values_list("payload", flat=True).get(pk=job.pk)
    return payload["args"][0]


def result_of(job: Job, path: str) -> Any:
    if path == "django.tasks":
        fetched = app_tasks.echo.get_result(str(job.pk))
        return fetched.return_value
    return Job.objects.values_list("result", flat=True).get(pk=job.pk)


def enqueue_or_refuse(value: Any, path: str) -> Job | None:
    """Enqueue ``value``; check the refusal against the oracle; None if refused."""
    expected = refusal(value)
    low, high = size_band(value)
    with transaction.atomic():
        before = Job.objects.count()
        try:
            job = PATHS[path](value)
        except MalformedPayload:
            assert Job.objects.count() == before  # the transaction is still usable
            assert expected is not None or high > MAX_PAYLOAD_BYTES, (
                f"{path} refused a value the rules accept: {value!r:.200}"
            )
            counted(f"refused ({expected or 'size'})")
            return None
    assert expected is None, f"{path} accepted a value refused for {expected}: {value!r:.200}"
    assert low <= MAX_PAYLOAD_BYTES, f"{path} accepted {low} bytes of payload"
    assert same(stored_argument(job), value), f"{path} stored {stored_argument(job)!r:.200}"
    counted("accepted")
    return job


def clean() -> None:
    Job.objects.all().delete()


@PROFILE
@given(
    values=st.lists(st.tuples(json_values, st.sampled_from(list(PATHS))), min_size=1, max_size=6)
)
def test_values_are_refused_by_the_rules_or_come_back_exactly(
    values: list[tuple[Any, str]],
) -> None:
    clean()
    jobs = [(job, path, value) for value, path in values if (job := enqueue_or_refuse(value, path))]
    run_worker()
    client = admin_client()
    for job, path, value in jobs:
        job.refresh_from_db()
        assert job.status == "succeeded", f"{path}: {job.status} {job.last_error}"
        assert same(result_of(job, path), value), f"{path}: result {result_of(job, path)!r:.200}"
        assert_admin_renders(client, job)
    counted("end to end")


@settings(PROFILE, max_examples=max(4, PROFILE.max_examples // 3))
@given(value=big_strings, path=st.sampled_from(list(PATHS)))
def test_megabyte_strings_are_refused_by_size_or_come_back_exactly(value: str, path: str) -> None:
    clean()
    job = enqueue_or_refuse(value, path)
    if job is None:
        return
    run_worker()
    job.refresh_from_db()
    assert job.status == "succeeded", job.last_error
    assert result_of(job, path) == value
    counted("megabyte end to end")


# No shrinking: each example waits for a worker process, and a stuck worker for its timeout.
@settings(
    PROFILE,
    max_examples=max(6, PROFILE.max_examples // 2),
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
@given(message=text, poison=st.booleans())
def test_error_texts_end_dead_with_a_readable_escaped_reason(message: str, poison: bool) -> None:
    clean()
    argument_refused = refusal(message) is not None
    try:
        job = Job.objects.enqueue("tests.raise_text", args=[message], kwargs={"poison": poison})
    except MalformedPayload:
        assert argument_refused
        counted("error text refused")
        return
    assert not argument_refused
    run_worker(timeout=20)
    job.refresh_from_db()
    assert (job.status, job.error_kind) == ("dead", "exhausted"), job.last_error
    assert "\x00" not in job.last_error
    assert "RuntimeError" in job.last_error or message[:20] in job.last_error
    assert_admin_renders(admin_client(), job)
    counted("error text end to end")

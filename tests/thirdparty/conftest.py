"""Run the packages' jobs through a real ``manage.py arcature_worker`` process.

Each test drives a package's own operations (a page publish, an image upload,
a delete), then starts ``arcature_worker --drain`` as a subprocess against the
same test database and settings, waits for it to exit (bounded), and checks
that every job row succeeded. The counts per task are printed at the end of
the run, for the closing note of issue 19.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import django
import pytest
from django.db import connection

from tests.dburl import database_url

REPO = Path(__file__).resolve().parents[2]
WORKER_TIMEOUT = 120  # seconds; a drain of a few jobs takes about two

#: django-crontask and django-tasks-monitor need ``django.tasks`` itself (Django 6):
#: not installed on Django 5.2.
DJANGO_6_ONLY = ["test_crontask.py", "test_tasks_monitor.py"]
collect_ignore = [] if django.VERSION >= (6, 0) else DJANGO_6_ONLY

#: Jobs run and succeeded in this session, per task path (printed at the end).
SUCCEEDED: Counter[str] = Counter()


def run_worker(counted: set[str], failing: frozenset[str] = frozenset()) -> Counter[str]:
    """Run every pending job in a worker process; fail unless all succeeded.

    Returns how many jobs of each task ran since the last call (``counted``
    holds the ids already returned). ``--drain`` exits 0 once nothing is
    pending or running; the timeout bounds a worker that hangs. The tasks named
    in ``failing`` raise on purpose: their jobs must be dead after one attempt.
    """
    from django_arcature.models import Job

    connection.close()  # the test's writes are committed; the worker opens its own
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.thirdparty.settings",
        "ARCATURE_USE_TEST_DATABASE": "1",
        "DATABASE_URL": database_url(),
        "PYTHONPATH": str(REPO),
    }
    command = [sys.executable, "-m", "django", "arcature_worker", "--drain"]
    # One handler thread: django-modelsearch's index update is a read-then-insert, so two
    # jobs for the same object (a page's save and its publish) on two threads can race
    # to an IntegrityError on SQLite, which the retry then fixes. One thread keeps
    # "succeeded at its first attempt" a sharp check on everything else.
    command += ["--drain-timeout", "90", "--concurrency", "1", "-v", "2"]
    try:
        done = subprocess.run(
            command,
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=WORKER_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"arcature_worker did not exit within {WORKER_TIMEOUT}s: {exc.stderr!r}")
    log = done.stdout + done.stderr
    assert done.returncode == 0, f"arcature_worker exited {done.returncode}:\n{log}"
    jobs = list(
        Job.objects.exclude(id__in=counted).values_list(
            "id", "task_name", "status", "attempts", "last_error"
        )
    )
    # Succeeded at the first attempt: a retry would hide an error the package met.
    failed = [
        job[1:]
        for job in jobs
        if job[2] != ("dead" if job[1] in failing else "succeeded") or job[3] != 1
    ]
    assert not failed, f"jobs that did not succeed at once: {failed}\nworker log:\n{log}"
    counted.update(str(job[0]) for job in jobs)
    ran = Counter(job[1] for job in jobs)
    SUCCEEDED.update(name for name in ran.elements() if name not in failing)
    if os.environ.get("ARCATURE_THIRDPARTY_LOG"):
        print(log)
    return ran


@pytest.fixture
def drain() -> Callable[..., Counter[str]]:
    """``drain()`` runs the jobs enqueued so far in a worker process (see run_worker);
    ``drain(failing={...})`` names the tasks that fail on purpose."""
    counted: set[str] = set()
    return lambda failing=frozenset(): run_worker(counted, frozenset(failing))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not SUCCEEDED:
        return
    terminalreporter.section(f"third-party jobs that succeeded on {connection.vendor}")
    for name, count in sorted(SUCCEEDED.items()):
        terminalreporter.write_line(f"{count:4d}  {name}")
    terminalreporter.write_line(f"{sum(SUCCEEDED.values()):4d}  in all")

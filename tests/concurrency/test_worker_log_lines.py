"""What a real worker process logs about each outcome.

- At the default verbosity a job that went dead was never named in the log: now
  one WARNING line with its task, id, error kind and message.
- ``-v 2`` printed "retry in 1.4ms" where 1.4 ms was the run time: the line now
  says how long the attempt ran and, apart, how long the retry waits.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from typing import Any

import pytest

from django_arcature.models import Job, JobStatus

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow, pytest.mark.heavy]

StartWorker = Callable[..., Any]


def test_a_dead_job_is_a_warning_with_task_id_kind_and_message_at_default_verbosity(
    start_worker: StartWorker,
) -> None:
    dead = Job.objects.enqueue("tests.fail_permanently", args=["no such user 42"])
    fine = Job.objects.enqueue("tests.noop")
    worker = start_worker(
        # A project without LOGGING: the command's own handler shows each level.
        command=[
            sys.executable,
            "-m",
            "django",
            "arcature_worker",
            "--burst",
            "--settings",
            "tests.testapp.default_logging_settings",
        ],
    )
    assert worker.wait(60) == 0, worker.log
    assert Job.objects.get(pk=dead.pk).status == JobStatus.DEAD
    lines = [line for line in worker.log.splitlines() if str(dead.pk) in line]
    assert len(lines) == 1, worker.log
    (line,) = lines
    assert " WARNING " in line
    expected = f"job {dead.pk} (tests.fail_permanently) went dead (permanent): Permanent: "
    assert expected + "no such user 42" in line
    assert str(fine.pk) not in worker.log  # a success is not logged at this verbosity


def test_v2_says_how_long_the_attempt_ran_and_apart_how_long_the_retry_waits(
    start_worker: StartWorker,
) -> None:
    job = Job.objects.enqueue("tests.always_fails")  # default backoff: about 2 s
    worker = start_worker("--burst")  # -v 2
    assert worker.wait(60) == 0, worker.log
    row = Job.objects.get(pk=job.pk)
    assert row.status == JobStatus.PENDING
    (line,) = [line for line in worker.log.splitlines() if str(job.pk) in line]
    found = re.search(
        rf"job {job.pk} \(tests\.always_fails\) ran (\d+\.\d) ms; retry in (\d+\.\d)s: "
        r"RuntimeError: this job always fails",
        line,
    )
    assert found is not None, line
    assert float(found.group(2)) >= 0.5  # the backoff, not the run time

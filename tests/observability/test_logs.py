"""Structured logs from a real worker process, configured as docs/observability.md says.

The worker logs JSON lines (``django_arcature.contrib.logs.JSONFormatter``) to a
file; every record about a job must carry its id, task, queue and attempt.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from django_arcature.models import Job
from tests.concurrency.conftest import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_every_record_about_a_job_carries_the_job_fields(
    start_worker: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "worker.jsonl"
    monkeypatch.setenv("ARCATURE_TEST_JSON_LOG", str(log))
    jobs = {
        Job.objects.enqueue("tests.add", args=[1, 2]).pk: "tests.add",
        Job.objects.enqueue("tests.fail_permanently", args=["no"]).pk: "tests.fail_permanently",
        Job.objects.enqueue("tests.flaky_once").pk: "tests.flaky_once",
        Job.objects.enqueue("tests.log_progress", args=["step 1"], queue="chatty").pk: (
            "tests.log_progress"
        ),
    }
    worker = start_worker("--burst")
    assert worker.wait(60) == 0, worker.log
    lines = records(log)
    about_jobs = [r for r in lines if any(str(pk) in r["message"] for pk in jobs)]
    assert len(about_jobs) >= len(jobs) + 1  # one per outcome written, the retry too
    for record in about_jobs:
        [pk] = [pk for pk in jobs if str(pk) in record["message"]]
        assert record["job_id"] == str(pk), record
        assert record["task"] == jobs[pk], record
        assert record["queue"] in {"default", "chatty"}, record
        assert record["attempt"] >= 1, record
    # A handler's own record is stamped with its job by the filter.
    [progress] = [r for r in lines if r["logger"] == "tests.jobs"]
    assert progress["message"] == "working on step 1"
    assert progress["task"] == "tests.log_progress"
    assert progress["queue"] == "chatty"
    assert progress["attempt"] == 1
    # The flaky job's two attempts are told apart.
    flaky = [r for r in about_jobs if r["task"] == "tests.flaky_once"]
    assert {r["attempt"] for r in flaky} == {1, 2}


def test_a_clean_sigterm_shutdown_is_info(
    start_worker: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "worker.jsonl"
    monkeypatch.setenv("ARCATURE_TEST_JSON_LOG", str(log))
    worker = start_worker()
    wait_until(lambda: log.exists() and "started" in log.read_text(), what="the worker start")
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0
    lines = records(log)
    stopping = [r for r in lines if "stopping" in r["message"] or "stopped" in r["message"]]
    assert len(stopping) == 2, lines
    assert {r["level"] for r in stopping} == {"INFO"}
    assert not [r for r in lines if r["level"] in {"WARNING", "ERROR"}], lines

"""A slot hold that cannot be written keeps its completion back, and says so (issue 19, B5).

Before a timed-out handler whose thread was abandoned is written off, the worker
records a hold on its concurrency slot; if that write fails, the completion is
kept and tried again. It used to be tried again for ever while the health file
said ``ok``: only a failing completion write was counted. The hold is written
by the same flush, so its failures count the same way.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from django_arcature.models import Job, JobStatus
from django_arcature.queues.models import SlotHold
from tests.concurrency.conftest import WorkerProcess, wait_until
from tests.concurrency.test_health_probe import record, wait_for_state

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.slow,
    pytest.mark.heavy,
    pytest.mark.only_on("postgresql", reason="the failing write is a PL/pgSQL trigger"),
]

StartWorker = Callable[..., WorkerProcess]
QUEUES = {"one": {"concurrency": 1}}


@pytest.fixture
def failing_holds() -> Iterator[None]:
    """Every insert into the slot hold table fails, as a lost server would make it."""
    table = SlotHold._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE OR REPLACE FUNCTION arcature_test_fail_hold() RETURNS trigger AS $$ BEGIN "
            "RAISE EXCEPTION 'the test drops this hold' USING ERRCODE = '08006'; END $$ "
            "LANGUAGE plpgsql"
        )
        cursor.execute(
            f"CREATE TRIGGER arcature_test_fail_hold BEFORE INSERT ON {table} "
            "FOR EACH ROW EXECUTE FUNCTION arcature_test_fail_hold()"
        )
    connection.close()
    yield
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TRIGGER IF EXISTS arcature_test_fail_hold ON {table}")
        cursor.execute("DROP FUNCTION IF EXISTS arcature_test_fail_hold()")
    connection.close()


def test_a_hold_that_keeps_failing_fails_the_probe_and_the_job_lands_once_it_is_written(
    start_worker: StartWorker,
    tmp_path: Path,
    settings: Any,
    monkeypatch: pytest.MonkeyPatch,
    failing_holds: None,
) -> None:
    settings.ARCATURE = {**settings.ARCATURE, "QUEUES": QUEUES}
    monkeypatch.setenv("ARCATURE_TEST_QUEUES", json.dumps(QUEUES))
    log = tmp_path / "runs.txt"
    health = tmp_path / "health.json"
    overrun = Job.objects.enqueue("tests.limits.overrun", args=[str(log), 30.0], queue="one")
    worker = start_worker("--concurrency", "2", "--health-file", str(health))
    wait_for_state(health, "write failing", worker)
    data = record(health)
    assert "the test drops this hold" in data["failing_write"]
    assert data["failing_writes"] >= 5
    # Nothing was written while the hold could not be: the job is still the worker's.
    assert Job.objects.get(pk=overrun.pk).status == JobStatus.RUNNING
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TRIGGER arcature_test_fail_hold ON {SlotHold._meta.db_table}")
    connection.close()
    wait_for_state(health, "ok", worker)
    wait_until(
        lambda: Job.objects.get(pk=overrun.pk).status != JobStatus.RUNNING,
        timeout=30,
        what="the timed-out job to be written once its hold is",
    )
    row = Job.objects.get(pk=overrun.pk)
    # Its first attempt timed out and goes back to wait; its abandoned thread still
    # sleeps, so the slot stays held and no second attempt overlaps it.
    assert (row.status, row.attempts) == (JobStatus.PENDING, 1)
    assert [entry["error"]["exception_class_path"] for entry in row.attempt_log] == [
        "builtins.TimeoutError"
    ]
    assert SlotHold.objects.filter(job_id=overrun.pk).exists()

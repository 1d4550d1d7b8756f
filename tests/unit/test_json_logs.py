"""The JSON formatter and the job-context filter of django_arcature.contrib.logs."""

from __future__ import annotations

import io
import json
import logging
import uuid
from collections.abc import Iterator

import pytest

from django_arcature.context import JobContext, activate, deactivate
from django_arcature.contrib.logs import JobContextFilter, JSONFormatter, job_extra


@pytest.fixture
def captured() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JSONFormatter())
    handler.addFilter(JobContextFilter())
    logger = logging.getLogger("tests.json_logs")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    yield logger, stream
    logger.removeHandler(handler)


def lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_extra_fields_become_json_keys(captured: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = captured

    class Claimed:
        id = uuid.UUID(int=7)
        task_name = "shop.send_receipt"
        queue = "email"
        attempts = 2

    logger.warning("job %s lost", "x", extra=job_extra(Claimed(), worker="w1"))
    [record] = lines(stream)
    assert record["message"] == "job x lost"
    assert record["level"] == "WARNING"
    assert record["logger"] == "tests.json_logs"
    assert record["job_id"] == str(uuid.UUID(int=7))
    assert (record["task"], record["queue"], record["attempt"]) == ("shop.send_receipt", "email", 2)
    assert record["worker"] == "w1"


def test_records_inside_a_job_are_stamped_with_it(
    captured: tuple[logging.Logger, io.StringIO],
) -> None:
    logger, stream = captured
    context = JobContext(
        job_id=uuid.UUID(int=9),
        task_name="shop.refund",
        queue="payments",
        attempt=3,
        max_attempts=5,
        worker_id="w2",
    )
    token = activate(context)
    try:
        logger.info("refunding")
    finally:
        deactivate(token)
    logger.info("outside")
    inside, outside = lines(stream)
    assert inside["job_id"] == str(uuid.UUID(int=9))
    assert (inside["task"], inside["queue"], inside["attempt"]) == ("shop.refund", "payments", 3)
    assert "job_id" not in outside


def test_exceptions_are_formatted(captured: tuple[logging.Logger, io.StringIO]) -> None:
    logger, stream = captured
    try:
        raise ValueError("boom")
    except ValueError:
        logger.exception("failed")
    [record] = lines(stream)
    assert "ValueError: boom" in str(record["exception"])

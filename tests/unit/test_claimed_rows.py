"""Decoding a claimed row: one column that cannot be read marks that job, nothing more."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import pytest

from django_arcature.db.claimed import CLAIM_COLUMNS, claimed_from_row, claimed_from_rows


def row(**overrides: Any) -> list[Any]:
    values: dict[str, Any] = {
        "id": uuid.uuid4().hex,
        "task_name": "tests.add",
        "queue": "default",
        "priority": 0,
        "payload": '{"args": [1, 2], "kwargs": {}}',
        "attempts": 1,
        "max_attempts": 3,
        "claim_token": uuid.uuid4().hex,
        "lease_seconds": 30,
        "backend": "",
        "attempt_log": "[]",
        "available_at": None,
        "trace_context": "{}",
    }
    values.update(overrides)
    return [values[column] for column in CLAIM_COLUMNS]


def test_a_readable_row_decodes_as_before() -> None:
    job = claimed_from_row(row())
    assert (job.task_name, job.payload, job.attempt_log, job.undecodable) == (
        "tests.add",
        {"args": [1, 2], "kwargs": {}},
        [],
        "",
    )


def test_sqlite_text_arrives_as_bytes_and_is_decoded() -> None:
    job = claimed_from_row(
        row(task_name=b"tests.add", queue=b"q\xc3\xa9", payload=b'{"args": [], "kwargs": {}}')
    )
    assert (job.task_name, job.queue, job.payload, job.undecodable) == (
        "tests.add",
        "qé",
        {"args": [], "kwargs": {}},
        "",
    )


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        ({"payload": '{"args": [' + "[" * 12000 + "]" * 12000 + "]}"}, "payload is JSON nested"),
        ({"payload": '{"args": [' + "9" * 5000 + "]}"}, "payload is not JSON that Python"),
        ({"attempt_log": "[" * 12000 + "]" * 12000}, "attempt_log is JSON nested"),
        ({"payload": b'{"args": ["\xff"]}'}, "payload is not valid UTF-8"),
        ({"task_name": b"tests\xff.add"}, "task_name is not valid UTF-8"),
        ({"payload": "{not json"}, "payload is not JSON that Python"),
    ],
)
def test_a_column_that_cannot_be_read_marks_the_job(overrides: dict[str, Any], says: str) -> None:
    job = claimed_from_row(row(**overrides))
    assert job.undecodable.startswith("the stored job could not be read: its ")
    assert says in job.undecodable
    assert len(job.undecodable) < 500
    assert isinstance(job.task_name, str)  # readable in the logs, replaced if need be


def test_a_trace_context_that_cannot_be_read_is_dropped_and_the_job_runs() -> None:
    job = claimed_from_row(row(trace_context="[" * 12000 + "]" * 12000))
    assert (job.trace_context, job.undecodable) == ({}, "")


def test_a_row_without_a_usable_id_is_left_out_of_its_batch(
    caplog: pytest.LogCaptureFixture,
) -> None:
    good = row()
    with caplog.at_level(logging.ERROR):
        claimed = claimed_from_rows([row(id="not-a-uuid"), good, row(claim_token=None)])
    assert [job.id.hex for job in claimed] == [good[0]]
    assert caplog.text.count("no usable id or claim token") == 2


def test_empty_json_columns_decode_to_fresh_objects_each_row() -> None:
    """The parser is skipped for ``{}`` and ``[]``; each job still gets its own object,
    so a handler (or the worker, appending to the attempt log) changing one changes no
    other job's."""
    first, second = claimed_from_rows([row(payload="{}"), row(payload="{}")])
    assert (first.payload, first.attempt_log, first.trace_context) == ({}, [], {})
    first.payload["seen"] = True
    first.attempt_log.append({"attempt": 1})
    assert (second.payload, second.attempt_log) == ({}, [])
    spaced = claimed_from_row(row(payload="{ }", attempt_log="[ ]", trace_context='{"a": 1}'))
    assert (spaced.payload, spaced.attempt_log, spaced.trace_context) == ({}, [], {"a": 1})

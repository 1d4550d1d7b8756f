"""Adversarial reads of the bulk enqueue's kept COPY text builder and its fast checks.

On PostgreSQL a bulk enqueue's COPY text builder is kept on the connection, keyed by
the row maker (task, queue, priority …), and reused by the next call with the same
key (``db/postgresql.py`` ``_chunk_text``); a handler with simple positional
parameters is checked by ``plain_call_check`` instead of ``check_arguments``. These
tests send, through both, what COPY text must escape or refuse (NUL, lone
surrogates, tabs, newlines, backslashes, ``\\N``, just under a megabyte of text), interleave
calls with different shared values on one connection, and reconnect between calls.
They run on every database: the stored rows must be the same everywhere.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection

from django_arcature.exceptions import MalformedPayload
from django_arcature.models import Job

pytestmark = pytest.mark.django_db(transaction=True)

#: Text COPY's text format must escape (or that a naive builder would cut at).
AWKWARD = [
    "tab\there",
    "line\nbreak",
    "carriage\rreturn",
    "back\\slash",
    "\\N",
    "\\.",
    "",
    "astral \U0001f600 and é",
    "quote \" and ' too",
]


def payload_args(job_id: Any) -> list[Any]:
    return list(Job.objects.values_list("payload", flat=True).get(pk=job_id)["args"])


@pytest.mark.parametrize(
    "hostile",
    ["a\x00b", "lone \ud800 high", "lone \udfff low", ["nested\x00"], {"key\ud800": 1}],
    ids=["nul", "high-surrogate", "low-surrogate", "nul-in-list", "surrogate-key"],
)
def test_unstorable_text_in_a_bulk_enqueue_inserts_nothing(hostile: Any) -> None:
    """A value no database can store as sent, amid good rows: the call is refused as a
    whole (nothing inserted), on the fast check's path (a ``str`` argument) and the
    general one alike; the builder kept by an earlier call then writes the next call's
    rows unchanged."""
    before = Job.objects.enqueue_many("tests.echo", [("first",)])
    with pytest.raises(MalformedPayload):
        Job.objects.enqueue_many("tests.echo", [("ok",), (hostile,), ("after",)])
    assert Job.objects.filter(task_name="tests.echo").count() == 1
    after = Job.objects.enqueue_many("tests.echo", [(text,) for text in AWKWARD])
    assert [payload_args(job.id) for job in after] == [[text] for text in AWKWARD]
    assert payload_args(before[0].id) == ["first"]


def test_awkward_text_and_a_megabyte_round_trip_through_a_kept_builder() -> None:
    """Escapes and a large value, written twice on one connection (the second call's
    builder is the kept one) and once after a reconnect (a new builder)."""
    values = [*AWKWARD, "x" * ((1 << 20) - 100)]  # just under MAX_PAYLOAD_BYTES
    calls = []
    for reconnect in (False, False, True):
        if reconnect:
            connection.close()
        calls.append(Job.objects.enqueue_many("tests.echo", [(value,) for value in values]))
    for jobs in calls:
        assert [payload_args(job.id) for job in jobs] == [[value] for value in values]


def test_calls_with_different_shared_values_on_one_connection_keep_their_own() -> None:
    """Builders are kept per row maker: calls alternating queue, priority, attempts and a
    fixed run time on one connection each write their own shared values, never those of
    the builder kept by the call before."""
    from datetime import UTC, datetime

    at = datetime(2030, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
    shapes: list[dict[str, Any]] = [
        {"queue": "qa", "priority": 1},
        {"queue": "qb", "priority": 7, "max_attempts": 9},
        {"queue": "qa", "priority": 1},
        {"queue": "qa", "priority": 1, "run_at": at},
        {"queue": "qb", "priority": 7, "max_attempts": 9},
    ]
    written = [
        (shape, Job.objects.enqueue_many("tests.add", [(n, 1) for n in range(3)], **shape))
        for shape in shapes
    ]
    for shape, jobs in written:
        rows = list(
            Job.objects.filter(pk__in=[job.pk for job in jobs]).values(
                "queue", "priority", "max_attempts", "available_at"
            )
        )
        assert len(rows) == 3
        for row in rows:
            assert (row["queue"], row["priority"]) == (shape["queue"], shape["priority"])
            if "max_attempts" in shape:
                assert row["max_attempts"] == shape["max_attempts"]
            if "run_at" in shape:
                assert row["available_at"] == at
    default_attempts = {row["max_attempts"] for row in Job.objects.filter(queue="qa").values()}
    assert len(default_attempts) == 1
    assert 9 not in default_attempts

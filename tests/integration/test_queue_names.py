"""``arcature_queue NAME`` takes the names the worker's ``--queue`` takes, on every database.

Before, the name went to the database as typed: 150 characters were stored on
SQLite and failed on the servers, and ``"email "`` created a second row on
SQLite and PostgreSQL while MariaDB's trailing-space collation paused ``email``
itself. A mistyped ``pause`` also left a permanent row behind.
"""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from django_arcature.models import Job
from django_arcature.queues.models import QueueState

pytestmark = pytest.mark.django_db(transaction=True)


def enqueue(queue: str) -> None:
    Job.objects.enqueue_many("tests.noop", [()], queue=queue)


@pytest.mark.parametrize("action", ["pause", "resume", "list"])
@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("q" * 150, "1 to 100 characters"),
        ("email ", "begins or ends with whitespace"),
        (" email", "begins or ends with whitespace"),
        ("em\u200bail", r"U\+200B"),
    ],
    ids=["too-long", "trailing-space", "leading-space", "invisible"],
)
def test_a_name_the_worker_refuses_is_a_usage_error(action: str, name: str, says: str) -> None:
    enqueue("email")
    with pytest.raises(CommandError, match=says):
        call_command("arcature_queue", action, name, "--force", stdout=StringIO())
    with pytest.raises(CommandError, match=says):
        call_command("arcature_queue", action, name, stdout=StringIO())
    assert list(QueueState.objects.values_list("name", "paused")) == []


def test_the_same_rule_as_the_worker_queue_option() -> None:
    """One validator: what ``arcature_worker --queue`` refuses, ``arcature_queue`` refuses."""
    name = "email "
    with pytest.raises(CommandError) as worker:
        call_command("arcature_worker", "--queue", name, "--burst", stdout=StringIO())
    with pytest.raises(CommandError) as queue:
        call_command("arcature_queue", "pause", name, stdout=StringIO())
    assert str(worker.value).split(": ", 2)[-1] == str(queue.value).split(": ", 2)[-1]


def test_a_mistyped_pause_is_refused_and_leaves_no_row() -> None:
    enqueue("email")
    with pytest.raises(CommandError, match=r"did you mean 'email'\?.*--force"):
        call_command("arcature_queue", "pause", "emial", stdout=StringIO())
    assert not QueueState.objects.filter(name="emial").exists()
    out = StringIO()
    call_command("arcature_queue", "list", stdout=out)
    assert "emial" not in out.getvalue()


def test_force_pauses_a_queue_ahead_of_its_first_job() -> None:
    out = StringIO()
    call_command("arcature_queue", "pause", "reports", "--force", stdout=out)
    assert out.getvalue() == "queue reports paused\n"
    assert QueueState.objects.get(name="reports").paused


def test_resuming_an_unknown_queue_leaves_no_row() -> None:
    out = StringIO()
    call_command("arcature_queue", "resume", "emial", stdout=out)
    assert out.getvalue() == "queue emial was not paused\n"
    assert not QueueState.objects.filter(name="emial").exists()

"""The Queues admin page through Django's test client: renames, stale saves, and which queues show.

- Renaming a queue (its name is the primary key) was a 500.
- A save wrote every column back, so a ``recent_starts`` a worker advanced while
  the form was open was replaced by the stale one: the rate limit was exceeded.
- The page listed only queues with a control row, and viewing it created rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client, override_settings
from django.urls import reverse

from django_arcature import registry
from django_arcature.admin.queues import QueueStateAdmin
from django_arcature.models import Job
from django_arcature.queues.gate import QueueGate
from django_arcature.queues.limits import QueueLimit
from django_arcature.queues.models import QueueState

from .test_admin_support import client_for, messages_of, staff

pytestmark = pytest.mark.django_db(transaction=True)

QUEUES = reverse("admin:django_arcature_queuestate_changelist")


def pause_url() -> str:
    """The page's pause button for a queue that has no control row yet."""
    return reverse("admin:django_arcature_queuestate_pause_named")


def change_url(name: str) -> str:
    return reverse("admin:django_arcature_queuestate_change", args=[name])


@pytest.fixture
def root(admin_user: User) -> Client:
    return client_for(admin_user)


@pytest.fixture
def thumbnails_handler() -> Iterator[str]:
    """A ``@job`` whose queue has neither a job, a QUEUES entry nor a row."""

    @registry.job(name="tests.admin_queues.thumbnail", queue="thumbnails")
    def thumbnail() -> None:
        return None

    yield "thumbnails"
    registry.unregister("tests.admin_queues.thumbnail")


def test_renaming_a_queue_is_not_offered_and_a_posted_name_is_ignored(root: Client) -> None:
    QueueState.objects.create(name="email")
    response = root.post(change_url("email"), {"name": "renamed", "paused": "on"})
    assert response.status_code == 302, response.content.decode()[:2000]
    assert list(QueueState.objects.values_list("name", "paused")) == [("email", True)]
    page = root.get(change_url("email")).content.decode()
    assert 'name="name"' not in page  # read-only on change
    assert "email" in page


def test_adding_a_queue_still_takes_its_name(root: Client) -> None:
    add = reverse("admin:django_arcature_queuestate_add")
    assert 'name="name"' in root.get(add).content.decode()
    response = root.post(add, {"name": "reports", "paused": "on"})
    assert response.status_code == 302, response.content.decode()[:2000]
    assert QueueState.objects.get(name="reports").paused


@override_settings(ARCATURE={"QUEUES": {"email": {"rate": "5/m"}}})
def test_a_save_keeps_the_rate_starts_a_worker_recorded_meanwhile(
    root: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real rate-limited claim runs between the form's read of the row and its save."""
    QueueState.objects.create(name="email")
    Job.objects.enqueue_many("tests.noop", [() for _ in range(3)], queue="email")
    gate = QueueGate(
        "default", limits={"email": QueueLimit(rate=5, per_seconds=60)}, refresh_seconds=0
    )
    original = QueueStateAdmin.get_object

    def read_then_a_worker_claims(self: QueueStateAdmin, *args: Any, **kwargs: Any) -> Any:
        obj = original(self, *args, **kwargs)
        assert len(gate.claim(Job.objects, "w1", 60, 2)) == 2
        return obj

    monkeypatch.setattr(QueueStateAdmin, "get_object", read_then_a_worker_claims)
    response = root.post(change_url("email"), {"name": "email", "paused": "on"})
    assert response.status_code == 302, response.content.decode()[:2000]
    state = QueueState.objects.get(name="email")
    assert state.paused
    assert len(state.recent_starts) == 2, "the admin save put back the stale recent_starts"


@override_settings(
    ARCATURE={"QUEUES": {"email": {"concurrency": 5}, "bulk": {}}, "DEFAULT_QUEUE": "main"}
)
def test_the_page_shows_every_named_queue_without_creating_rows(
    root: Client, thumbnails_handler: str
) -> None:
    Job.objects.enqueue("tests.noop", queue="reports")
    QueueState.objects.create(name="paused-one", paused=True)
    page = root.get(QUEUES).content.decode()
    for name in ("main", "email", "bulk", "reports", "thumbnails", "paused-one"):
        assert f">{name}<" in page, name
    assert "at most 5 running" in page
    assert list(QueueState.objects.values_list("name", flat=True)) == ["paused-one"]


def test_a_queue_without_a_row_is_paused_from_the_page(root: Client) -> None:
    Job.objects.enqueue("tests.noop", queue="reports")
    response = root.post(pause_url(), {"name": "reports"}, follow=True)
    assert response.status_code == 200
    assert messages_of(response) == ["Queue reports paused."]
    assert QueueState.objects.get(name="reports").paused


def test_an_unknown_or_invalid_name_is_refused_and_leaves_no_row(root: Client) -> None:
    Job.objects.enqueue("tests.noop", queue="email")
    for name in ("emial", "email ", "q" * 150):
        response = root.post(pause_url(), {"name": name}, follow=True)
        assert response.status_code == 200
        (message,) = messages_of(response)
        assert message.startswith(f"Queue {name[:100]!r} was not paused: "), message
    assert not QueueState.objects.exists()


def test_pausing_from_the_page_needs_the_change_permission() -> None:
    Job.objects.enqueue("tests.noop", queue="reports")
    viewer = client_for(staff("viewer", "view_queuestate"))
    page = viewer.get(QUEUES).content.decode()
    assert ">reports<" in page
    assert pause_url() not in page
    assert viewer.post(pause_url(), {"name": "reports"}).status_code == 403
    assert not QueueState.objects.exists()

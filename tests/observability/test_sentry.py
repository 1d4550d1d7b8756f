"""The Sentry recipe: a dead job becomes one Sentry event with the job's context.

sentry-sdk is initialised with a transport that keeps envelopes in a list, so
the test reads what would have been sent to Sentry, without a network.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import sentry_sdk
from sentry_sdk.envelope import Envelope
from sentry_sdk.transport import Transport

from django_arcature.contrib import sentry
from django_arcature.models import Job
from django_arcature.testing import run_job

pytestmark = pytest.mark.django_db


class KeepingTransport(Transport):
    """A transport that keeps every event instead of sending it."""

    def __init__(self, options: dict[str, Any] | None = None) -> None:
        super().__init__(options)
        self.events: list[dict[str, Any]] = []

    def capture_envelope(self, envelope: Envelope) -> None:
        for item in envelope.items:
            event = item.get_event()
            if event is not None:
                self.events.append(dict(event))


@pytest.fixture
def reported() -> Iterator[list[dict[str, Any]]]:
    transport = KeepingTransport()
    sentry_sdk.init(dsn="https://key@sentry.invalid/1", transport=transport)
    sentry.install()
    try:
        yield transport.events
    finally:
        sentry.uninstall()
        sentry_sdk.get_client().close()
        sentry_sdk.init()  # no DSN: reporting off again for the other tests


def test_a_dead_job_is_reported_with_its_context(reported: list[dict[str, Any]]) -> None:
    job = Job.objects.enqueue("tests.fail_permanently", args=["the card was declined"])
    run_job(job)
    assert Job.objects.get(pk=job.pk).status == "dead"
    [event] = reported
    assert event["level"] == "error"
    assert "tests.fail_permanently" in event["message"]
    assert "the card was declined" in event["message"]
    assert event["tags"]["arcature.task"] == "tests.fail_permanently"
    assert event["tags"]["arcature.queue"] == "default"
    assert event["tags"]["arcature.error_kind"] == "permanent"
    context = event["contexts"]["arcature job"]
    assert context["id"] == str(job.pk)
    assert context["attempt"] == 1
    assert "Permanent" in context["traceback"]
    assert event["fingerprint"] == ["arcature-dead-job", "tests.fail_permanently", "permanent"]


def test_retries_and_successes_are_not_reported(reported: list[dict[str, Any]]) -> None:
    flaky = Job.objects.enqueue("tests.always_fails")  # two attempts: retry, then dead
    run_job(flaky)
    assert reported == []  # the first failure will be retried: not news yet
    run_job(Job.objects.enqueue("tests.add", args=[1, 2]))
    assert reported == []
    run_job(flaky)
    [event] = reported
    assert event["tags"]["arcature.error_kind"] == "exhausted"
    assert event["contexts"]["arcature job"]["attempt"] == 2


def test_a_fenced_out_death_is_not_reported(reported: list[dict[str, Any]]) -> None:
    job = Job.objects.enqueue("tests.noop")
    [claimed] = Job.objects.claim("w1", lease=60, batch=1)
    Job.objects.cancel(job.pk)  # an operator cancels it: the worker's claim is gone
    Job.objects.mark_dead(claimed.id, claimed.claim_token, "permanent", "stale worker")
    assert reported == []

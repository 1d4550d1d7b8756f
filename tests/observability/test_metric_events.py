"""Counters for the rarer landed writes (lost claims, releases, sweeps), in this process,
and the rule that an observer can never break the write it observes."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone
from prometheus_client import REGISTRY

from django_arcature import signals
from django_arcature.contrib import prometheus
from django_arcature.models import Job, JobStatus
from django_arcature.testing import run_job

# Transactional: jobs_claimed, like job_enqueued, is sent once the claim commits.
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def counting() -> Iterator[None]:
    prometheus.install()
    yield
    prometheus.uninstall()


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_a_fenced_out_success_counts_as_lost_never_as_succeeded(counting: None) -> None:
    labels = {"queue": "default", "task": "tests.noop"}
    succeeded = {**labels, "outcome": "succeeded", "error_kind": ""}
    lost = {**labels, "outcome": "lost", "error_kind": ""}
    before = (
        sample("arcature_jobs_finished_total", **succeeded),
        sample("arcature_jobs_finished_total", **lost),
        sample("arcature_jobs_started_total", **labels),
    )
    job = Job.objects.enqueue("tests.noop")
    [claimed] = Job.objects.claim("w1", lease=60, batch=1)
    Job.objects.cancel(job.pk)  # the operator wins: the worker's claim is gone
    Job.objects.mark_succeeded(claimed.id, claimed.claim_token)
    after = (
        sample("arcature_jobs_finished_total", **succeeded),
        sample("arcature_jobs_finished_total", **lost),
        sample("arcature_jobs_started_total", **labels),
    )
    assert after[0] - before[0] == 0
    assert after[1] - before[1] == 1
    assert after[2] - before[2] == 1


def test_releases_and_sweeps_are_counted(counting: None) -> None:
    labels = {"queue": "default", "task": "tests.noop"}
    released = sample("arcature_jobs_released_total", **labels)
    requeued = sample("arcature_jobs_swept_total", outcome="requeued")
    Job.objects.enqueue_many("tests.noop", [(), ()])
    first, second = Job.objects.claim("w1", lease=60, batch=2)
    Job.objects.release(first.id, first.claim_token)
    Job.objects.filter(pk=second.id).update(
        lease_expires_at=timezone.now() - timedelta(minutes=5)  # as if the worker had died
    )
    assert Job.objects.sweep_expired_leases() == 1
    assert sample("arcature_jobs_released_total", **labels) - released == 1
    assert sample("arcature_jobs_swept_total", outcome="requeued") - requeued == 1


def test_a_failing_observer_never_breaks_the_enqueue_claim_or_run(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(sender: Any, **kwargs: Any) -> None:
        raise RuntimeError("the metrics backend is down")

    hooked = (
        signals.jobs_enqueuing,
        signals.jobs_claimed,
        signals.job_attempt_started,
        signals.job_attempt_finished,
    )
    for signal in hooked:
        signal.connect(broken, weak=False)
    try:
        with caplog.at_level(logging.ERROR, logger="django.dispatch"):
            job = run_job(Job.objects.enqueue("tests.add", args=[2, 3]))
    finally:
        for signal in hooked:
            signal.disconnect(broken)
    assert (job.status, job.result) == (JobStatus.SUCCEEDED, 5)
    failures = [
        r
        for r in caplog.records
        if r.name == "django.dispatch" and "the metrics backend is down" in r.getMessage()
    ]
    assert len(failures) == len(hooked)

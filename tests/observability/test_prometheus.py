"""Prometheus metrics read the way Prometheus reads them, after a known run.

The exposition is parsed with prometheus-client's own text parser. Worker-side
counters come from a real worker process (``--metrics-port``); the web side's
from the Django view in this process.
"""

from __future__ import annotations

import socket
import time
import urllib.request
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from django_arcature.contrib import prometheus
from django_arcature.models import Job, JobStatus
from tests.concurrency.conftest import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def scrape(port: int, timeout: float = 30) -> Samples:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
                return parse(reply.read().decode())
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def finished() -> bool:
    return not Job.objects.filter(
        queue="default", status__in=(JobStatus.PENDING, JobStatus.RUNNING)
    ).exists()


def test_worker_counters_histograms_and_queue_gauges(start_worker: Any) -> None:
    for i in range(5):
        Job.objects.enqueue("tests.add", args=[i, 1])
    Job.objects.enqueue("tests.fail_permanently", args=["no"])
    Job.objects.enqueue("tests.flaky_once")  # retried once, then succeeds
    Job.objects.enqueue_many("tests.noop", [()] * 3, queue="later", delay=timedelta(hours=1))
    Job.objects.enqueue_many("tests.noop", [()] * 2, queue="unserved")
    port = free_port()
    worker = start_worker("--queue", "default", "--metrics-port", str(port))
    wait_until(finished, what="the default queue to drain")
    # Outcomes are counted when written (give the last batch's write a moment), and
    # the gauges are sampled at most every 5 seconds: scrape until both are current.
    deadline = time.monotonic() + 15
    while True:
        samples = scrape(port)
        done = value(
            samples,
            "arcature_jobs_finished_total",
            queue="default",
            task="tests.add",
            outcome="succeeded",
            error_kind="",
        )
        ready = value(samples, "arcature_queue_ready_jobs", queue="default")
        if (done == 5 and ready == 0) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    add = {"queue": "default", "task": "tests.add"}
    flaky = {"queue": "default", "task": "tests.flaky_once"}
    assert value(samples, "arcature_jobs_started_total", **add) == 5
    assert (
        value(samples, "arcature_jobs_finished_total", **add, outcome="succeeded", error_kind="")
        == 5
    )
    assert value(samples, "arcature_jobs_started_total", **flaky) == 2
    assert (
        value(samples, "arcature_jobs_finished_total", **flaky, outcome="retried", error_kind="")
        == 1
    )
    assert (
        value(samples, "arcature_jobs_finished_total", **flaky, outcome="succeeded", error_kind="")
        == 1
    )
    assert (
        value(
            samples,
            "arcature_jobs_finished_total",
            queue="default",
            task="tests.fail_permanently",
            outcome="dead",
            error_kind="permanent",
        )
        == 1
    )
    assert value(samples, "arcature_job_run_seconds_count", **add) == 5
    assert value(samples, "arcature_job_run_seconds_bucket", **add, le="+Inf") == 5
    assert value(samples, "arcature_job_queue_wait_seconds_count", **add) == 5
    # Enqueued in another process: not this worker's to count.
    assert value(samples, "arcature_jobs_enqueued_total", **add) == 0
    # Gauges, sampled from the database at scrape time.
    assert value(samples, "arcature_queue_scheduled_jobs", queue="later") == 3
    assert value(samples, "arcature_queue_ready_jobs", queue="later") == 0
    assert value(samples, "arcature_queue_ready_jobs", queue="unserved") == 2
    assert value(samples, "arcature_queue_oldest_ready_age_seconds", queue="unserved") > 0
    assert value(samples, "arcature_queue_ready_jobs", queue="default") == 0
    assert value(samples, "arcature_queue_running_jobs", queue="default") == 0
    worker.signal(15)
    assert worker.wait(30) == 0, worker.log


@pytest.fixture
def counting() -> Iterator[None]:
    prometheus.install()
    yield
    prometheus.uninstall()


def test_the_web_view_counts_enqueues_and_samples_the_queues(
    counting: None, client: Client
) -> None:
    def scraped() -> Samples:
        response = client.get("/metrics")
        assert response.status_code == 200
        assert response["Content-Type"].startswith("text/plain")
        return parse(response.content.decode())

    before = scraped()
    Job.objects.enqueue_many("tests.noop", [()] * 4, queue="web")
    Job.objects.enqueue("tests.add", args=[1, 2], queue="web")
    prometheus.registry.queue_collector().sample_seconds = 0  # sample again now
    after = scraped()
    for task, count in (("tests.noop", 4), ("tests.add", 1)):
        key = {"queue": "web", "task": task}
        grown = value(after, "arcature_jobs_enqueued_total", **key) - value(
            before, "arcature_jobs_enqueued_total", **key
        )
        assert grown == count
    assert value(after, "arcature_queue_ready_jobs", queue="web") == 5


def test_bounded_counts_past_the_limit_use_the_estimate_or_count_exactly() -> None:
    from django_arcature.contrib.prometheus.collector import QueueCollector

    Job.objects.enqueue_many("tests.noop", [()] * 30, queue="big")
    collector = QueueCollector(count_limit=10, sample_seconds=0)
    sample = collector.sample()
    assert sample is not None
    line = sample.queues["big"]
    if line.estimated:  # PostgreSQL, MariaDB: the planner's figure, never below the bound
        assert line.ready >= 11
    else:  # SQLite keeps no estimate: counted exactly
        assert line.ready == 30


@pytest.mark.heavy
@pytest.mark.only_on(
    "postgresql",
    reason="worker processes sharing one metrics port: the database only feeds them jobs",
)
def test_several_workers_on_one_host_share_one_port_in_multiprocess_mode(
    start_worker: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = tmp_path / "prometheus"
    directory.mkdir()
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(directory))
    port = free_port()
    first = start_worker("--metrics-port", str(port), "--concurrency", "1")
    scrape(port)  # the first worker holds the port
    second = start_worker("--metrics-port", str(port), "--concurrency", "1")
    wait_until(lambda: "served by another process" in second.log, what="the second worker")
    # One job that only the test ends for each worker: a worker with its one thread
    # busy claims nothing more, so each of the two is run by a different worker, and
    # the sum below is over both processes whoever wins the race for the sleeps
    # (left to the race, the first worker could claim all 40 before the second,
    # still starting on a loaded machine, looked).
    release = tmp_path / "release"
    gates = [Job.objects.enqueue("tests.wait_for_file", args=[str(release), 120]) for _ in "ab"]
    wait_until(
        lambda: (
            Job.objects.filter(pk__in=[gate.pk for gate in gates], status=JobStatus.RUNNING)
            .values("locked_by")
            .distinct()
            .count()
            == 2
        ),
        timeout=60,
        what="each worker to run one gate job",
    )
    Job.objects.enqueue_many("tests.sleep", [(0.05,)] * 40)
    release.touch()
    wait_until(finished, timeout=60, what="the queue to drain")
    runners = set(Job.objects.values_list("locked_by", flat=True))
    assert len(runners) == 2, "both workers should have run jobs"
    sleep = {"queue": "default", "task": "tests.sleep", "outcome": "succeeded", "error_kind": ""}
    gate = {**sleep, "task": "tests.wait_for_file"}
    deadline = time.monotonic() + 30
    while (
        value(scrape(port), "arcature_jobs_finished_total", **sleep) != 40
        or value(scrape(port), "arcature_jobs_finished_total", **gate) != 2
    ):
        assert time.monotonic() < deadline, "the sums over both processes never reached 40 and 2"
        time.sleep(0.2)
    # The serving worker exits; the other takes the port over and still reports both.
    first.signal(15)
    assert first.wait(30) == 0, first.log
    wait_until(lambda: "serving metrics" in second.log, timeout=30, what="the takeover")
    assert value(scrape(port), "arcature_jobs_finished_total", **sleep) == 40
    # One gate job each: the exited process's count is still in the sum.
    assert value(scrape(port), "arcature_jobs_finished_total", **gate) == 2
    second.signal(15)
    assert second.wait(30) == 0, second.log


def test_a_port_in_use_without_multiprocess_mode_is_refused(start_worker: Any) -> None:
    with socket.socket() as taken:
        taken.bind(("", 0))
        taken.listen()
        port = taken.getsockname()[1]
        worker = start_worker("--metrics-port", str(port), "--burst")
        assert worker.wait(30) != 0
    assert "PROMETHEUS_MULTIPROC_DIR" in worker.log

"""OpenTelemetry: from a request's span, through enqueue, into a real worker process.

The test process traces into the SDK's InMemorySpanExporter; the worker process
does too and writes its spans to a file at exit (tests/testapp/observability.py).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import transaction
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from django_arcature.contrib import otel
from django_arcature.models import Job
from tests.testapp.observability import span_record

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def exporter() -> Iterator[tuple[InMemorySpanExporter, TracerProvider]]:
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    otel.install(tracer_provider=provider)
    try:
        yield spans, provider
    finally:
        otel.uninstall()


def worker_spans(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_a_trace_runs_from_the_request_into_each_attempt_in_the_worker(
    exporter: tuple[InMemorySpanExporter, TracerProvider],
    start_worker: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    spans, provider = exporter
    tracer = provider.get_tracer("the web app")
    with tracer.start_as_current_span("POST /signup", kind=SpanKind.SERVER) as request:
        flaky = Job.objects.enqueue("tests.flaky_once")  # fails once, then succeeds
        doomed = Job.objects.enqueue("tests.fail_permanently", args=["card declined"])
        batch = Job.objects.enqueue_many("tests.add", [(1, 2), (3, 4)], queue="math")
    request_trace = f"{request.get_span_context().trace_id:032x}"
    producers = {
        record["attributes"].get("messaging.message.id"): record
        for record in map(span_record, spans.get_finished_spans())
        if record["kind"] == "PRODUCER"
    }
    assert len(producers) == 3  # one per enqueue call, the batch's included
    for record in producers.values():
        assert record["trace_id"] == request_trace
        assert record["parent_id"] == f"{request.get_span_context().span_id:016x}"
        assert record["attributes"]["messaging.system"] == "arcature"
        assert record["attributes"]["messaging.operation.type"] == "send"
    flaky_send = producers[str(flaky.pk)]
    assert flaky_send["name"] == "send default"
    batch_send = producers[str(batch[0].pk)]
    assert batch_send["name"] == "send math"
    assert batch_send["attributes"]["messaging.batch.message_count"] == 2
    # The context is stored with the job.
    assert (
        Job.objects.get(pk=flaky.pk).trace_context["traceparent"].split("-")[2]
        == (flaky_send["span_id"])
    )

    spans_file = tmp_path / "worker-spans.jsonl"
    monkeypatch.setenv("ARCATURE_TEST_SPANS", str(spans_file))
    worker = start_worker("--burst")
    assert worker.wait(60) == 0, worker.log
    consumed = [s for s in worker_spans(spans_file) if s["kind"] == "CONSUMER"]
    by_job: dict[str, list[dict[str, Any]]] = {}
    for record in consumed:
        by_job.setdefault(record["attributes"]["messaging.message.id"], []).append(record)

    # Two attempts of the flaky job, both children of its producer span.
    attempts = sorted(by_job[str(flaky.pk)], key=lambda s: s["attributes"]["arcature.attempt"])
    assert [s["attributes"]["arcature.outcome"] for s in attempts] == ["retried", "succeeded"]
    for record in attempts:
        assert record["name"] == "process default"
        assert record["trace_id"] == request_trace
        assert record["parent_id"] == flaky_send["span_id"]
        assert record["attributes"]["messaging.operation.type"] == "process"
        assert record["attributes"]["messaging.destination.name"] == "default"
        assert record["attributes"]["arcature.task"] == "tests.flaky_once"
    assert attempts[0]["status"] == "ERROR"
    assert attempts[1]["status"] == "UNSET"

    [death] = by_job[str(doomed.pk)]
    assert death["status"] == "ERROR"
    assert "card declined" in death["description"]
    assert death["attributes"]["error.type"] == "permanent"
    [event] = death["events"]
    assert event["name"] == "exception"
    assert "Permanent" in event["attributes"]["exception.stacktrace"]

    for job in batch:
        [run] = by_job[str(job.pk)]
        assert run["parent_id"] == batch_send["span_id"]
        assert run["attributes"]["arcature.outcome"] == "succeeded"
    assert len(consumed) == 5


def test_a_handlers_own_spans_nest_under_its_attempt(
    exporter: tuple[InMemorySpanExporter, TracerProvider],
    start_worker: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    jobs = {
        "inside sync": Job.objects.enqueue("tests.traced_sync"),
        "inside async": Job.objects.enqueue("tests.traced_async"),
        "inside timed": Job.objects.enqueue("tests.traced_timed"),
    }
    spans_file = tmp_path / "worker-spans.jsonl"
    monkeypatch.setenv("ARCATURE_TEST_SPANS", str(spans_file))
    worker = start_worker("--burst")
    assert worker.wait(60) == 0, worker.log
    spans = worker_spans(spans_file)
    consumers = {
        s["attributes"]["messaging.message.id"]: s for s in spans if s["kind"] == "CONSUMER"
    }
    for name, job in jobs.items():
        [inner] = [s for s in spans if s["name"] == name]
        attempt = consumers[str(job.pk)]
        assert inner["parent_id"] == attempt["span_id"], name
        assert inner["trace_id"] == attempt["trace_id"], name


def test_an_enqueue_rolled_back_is_never_reported_as_sent(
    exporter: tuple[InMemorySpanExporter, TracerProvider],
) -> None:
    spans, _ = exporter

    class Rollback(Exception):
        pass

    def enqueue_then_fail() -> None:
        with transaction.atomic():
            Job.objects.enqueue("tests.noop")
            raise Rollback

    with pytest.raises(Rollback):
        enqueue_then_fail()
    assert spans.get_finished_spans() == ()
    with transaction.atomic():
        job = Job.objects.enqueue("tests.noop")
        assert spans.get_finished_spans() == ()  # sent once committed, not before
    [sent] = spans.get_finished_spans()
    assert sent.attributes is not None
    assert sent.attributes["messaging.message.id"] == str(job.pk)


def test_without_tracing_jobs_carry_no_context() -> None:
    assert Job.objects.enqueue("tests.noop").trace_context == {}
    assert "ARCATURE_TEST_SPANS" not in os.environ

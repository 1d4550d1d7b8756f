"""OpenTelemetry span links from a workflow node's attempt to its upstream nodes' attempts.

Run in this process (``drain``) with the SDK's in-memory exporter: each node's
CONSUMER span links to the CONSUMER span of every upstream node's attempt that
ran, a fan-in to all of its branches, and jobs outside workflows get no links and
no extra writes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from django_arcature import Workflow
from django_arcature.contrib import otel
from django_arcature.models import Job
from django_arcature.testing import drain
from tests.testapp import workflow_jobs as wf

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    otel.install(tracer_provider=provider)
    try:
        yield exporter
    finally:
        otel.uninstall()


def attempts(exporter: InMemorySpanExporter) -> dict[str, list[ReadableSpan]]:
    found: dict[str, list[ReadableSpan]] = {}
    for span in exporter.get_finished_spans():
        if span.kind is SpanKind.CONSUMER:
            assert span.attributes is not None
            found.setdefault(str(span.attributes["messaging.message.id"]), []).append(span)
    return found


def linked(span: ReadableSpan) -> set[tuple[int, int]]:
    return {(link.context.trace_id, link.context.span_id) for link in span.links}


def ids(span: ReadableSpan) -> tuple[int, int]:
    assert span.context is not None
    return (span.context.trace_id, span.context.span_id)


def test_each_node_links_to_the_attempts_of_its_upstream_nodes(
    spans: InMemorySpanExporter,
) -> None:
    flow = Workflow("traced")
    a = flow.add(wf.step, "a")
    b = flow.add(wf.step, "b", after=[a])
    c = flow.add(wf.step, "c", after=[a])
    d = flow.add(wf.step, "d", after=[b, c])
    refund = flow.add(wf.step, "refund", after=[a], when="failed")  # never runs
    flow.enqueue()
    plain = Job.objects.enqueue("tests.noop")
    drain()
    assert Job.objects.get(id=refund.job_id).status == "cancelled"
    runs = attempts(spans)
    [sa], [sb], [sc], [sd] = (runs[str(n.job_id)] for n in (a, b, c, d))
    assert linked(sa) == set()
    assert linked(sb) == linked(sc) == {ids(sa)}
    assert linked(sd) == {ids(sb), ids(sc)}  # the fan-in: both branches
    [sp] = runs[str(plain.pk)]
    assert linked(sp) == set()
    # Only nodes with dependents stored their span; the plain job's row is as enqueued.
    assert otel.PROCESS_KEY in Job.objects.get(id=a.job_id).trace_context
    assert otel.PROCESS_KEY not in Job.objects.get(id=d.job_id).trace_context
    assert otel.PROCESS_KEY not in Job.objects.get(id=plain.pk).trace_context


def test_the_link_is_to_the_attempt_that_succeeded_not_an_earlier_one(
    spans: InMemorySpanExporter, tmp_path: Path
) -> None:
    flow = Workflow("retried")
    marker = str(tmp_path / "snoozed")
    a = flow.add(wf.snooze_once, marker)
    b = flow.add(wf.step, "b", after=[a])
    flow.enqueue()
    drain()
    runs = attempts(spans)
    first, second = sorted(runs[str(a.job_id)], key=lambda s: s.start_time or 0)
    [sb] = runs[str(b.job_id)]
    assert linked(sb) == {ids(second)}
    assert ids(first) != ids(second)


def test_a_workflow_enqueued_without_tracing_is_not_marked(spans: InMemorySpanExporter) -> None:
    otel.uninstall()
    flow = Workflow("untraced")
    a = flow.add(wf.step, "a")
    flow.add(wf.step, "b", after=[a])
    flow.enqueue()
    assert Job.objects.get(id=a.job_id).trace_context == {}

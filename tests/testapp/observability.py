"""Tracing inside worker processes started by the tests, when ``ARCATURE_TEST_SPANS`` is set.

The worker traces into the SDK's InMemorySpanExporter, and writes what it holds
as JSON lines to that file when the process exits, for the test (another
process) to read. Costs nothing when the variable is unset.
"""

from __future__ import annotations

import atexit
import json
import os
from typing import Any

_path = os.environ.get("ARCATURE_TEST_SPANS")


def span_record(span: Any) -> dict[str, Any]:
    """What the tests check of a finished SDK span, in JSON-friendly form."""
    context = span.get_span_context()
    return {
        "name": span.name,
        "kind": span.kind.name,
        "trace_id": f"{context.trace_id:032x}",
        "span_id": f"{context.span_id:016x}",
        "parent_id": f"{span.parent.span_id:016x}" if span.parent else None,
        "attributes": dict(span.attributes or {}),
        "status": span.status.status_code.name,
        "description": span.status.description,
        "events": [{"name": e.name, "attributes": dict(e.attributes or {})} for e in span.events],
        "start": span.start_time,
        "end": span.end_time,
    }


if _path:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from django_arcature.contrib import otel

    _exporter = InMemorySpanExporter()
    _provider = TracerProvider()
    _provider.add_span_processor(SimpleSpanProcessor(_exporter))
    otel.install(tracer_provider=_provider)
    trace.set_tracer_provider(_provider)  # what handlers' own tracers use

    @atexit.register
    def _dump() -> None:
        with open(str(_path), "w") as out:
            for span in _exporter.get_finished_spans():
                out.write(json.dumps(span_record(span)) + "\n")

"""``python -m django_arcature.bench.worker [arcature_worker options]``.

An ordinary ``arcature_worker`` that also knows the benchmark's no-op job; the
settings come from ``DJANGO_SETTINGS_MODULE`` as for ``manage.py``. With
``ARCATURE_BENCH_TRACING=1`` it traces every attempt through the OpenTelemetry
SDK (batched, into an exporter that drops the spans), to measure what tracing
costs a worker.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import Any


def enable_tracing() -> None:
    """Trace into the SDK with a batching processor and an exporter that drops spans."""
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    from django_arcature.contrib import otel

    class Dropping(SpanExporter):
        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider: Any = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Dropping()))
    otel.install(tracer_provider=provider)


def main(argv: list[str]) -> None:
    import django

    django.setup()
    from django.core.management import call_command

    from . import jobs  # noqa: F401  (registers the no-op job)

    if os.environ.get("ARCATURE_BENCH_TRACING") == "1":
        enable_tracing()
    call_command("arcature_worker", *argv)


if __name__ == "__main__":
    main(sys.argv[1:])

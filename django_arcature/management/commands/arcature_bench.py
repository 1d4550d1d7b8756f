"""``manage.py arcature_bench``: measure the queue on this project's own database."""

from __future__ import annotations

import json
import os
import platform
import signal
import statistics
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.db import connections

from django_arcature.bench.jobs import TASK
from django_arcature.bench.measure import (
    SCRATCH_QUEUE,
    Bench,
    BenchFailed,
    BenchInterrupted,
    BenchRefused,
)
from django_arcature.management.database import add_database_argument
from django_arcature.management.ready import RefusedDatabaseStopsCommand


def _load_average() -> str:
    """The machine's 1, 5 and 15 minute load averages (a busy machine measures slower)."""
    try:
        return " ".join(f"{value:.2f}" for value in os.getloadavg())
    except OSError:  # not available on this platform
        return "unknown"


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


@contextmanager
def _sigterm_stops(bench: Bench) -> Iterator[None]:
    """Turn SIGTERM (a supervisor, a CI timeout) into a stop that unwinds the cleanup.

    Python's default action ends the process at once, skipping ``finally``: the
    bench's worker processes kept running and its rows stayed in the scratch queue.
    The handler only sets ``bench.stop``, which the bench checks at every wait and
    between enqueues: an exception raised from a handler lands wherever the main
    thread is, a ``__del__`` included, where Python prints it and carries on.
    """
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return

    def terminate(signum: int, frame: object) -> None:
        bench.stop.set()

    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class Command(RefusedDatabaseStopsCommand):
    help = (
        "Measure django-arcature on the configured database: enqueue rate (one by one and "
        "bulk), drain rate with 1..K worker processes, and idle pickup latency. Works in its "
        f"own scratch queue ({SCRATCH_QUEUE!r} by default), deletes only the rows it created, "
        "and refuses to start if that queue holds other jobs. Stop workers that serve every "
        "queue first, or they will take the benchmark's jobs."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--jobs", type=_positive, default=5000, help="Jobs per drain/bulk.")
        parser.add_argument(
            "--single", type=_positive, default=500, help="Jobs enqueued one by one."
        )
        parser.add_argument(
            "--workers", type=_positive, default=2, help="Drain with 1 up to this many processes."
        )
        parser.add_argument("--samples", type=_positive, default=20, help="Pickup samples.")
        parser.add_argument("--repeat", type=_positive, default=1, help="Runs per figure (median).")
        parser.add_argument("--queue", default=SCRATCH_QUEUE, help="The scratch queue.")
        add_database_argument(parser)
        parser.add_argument("--json", action="store_true", help="Print JSON instead of a table.")

    def handle(self, *args: Any, **options: Any) -> None:
        using = self.migrated_database(options)
        bench = Bench(
            task=TASK,
            queue=options["queue"],
            using=using,
            worker_command=[
                sys.executable,
                "-m",
                "django_arcature.bench.worker",
                "--database",
                using,
            ],
        )
        try:
            bench.check_scratch()
        except BenchRefused as exc:
            raise CommandError(str(exc)) from exc
        results: dict[str, Any] = {
            "database": connections[using].vendor,
            "python": platform.python_version(),
            "jobs": options["jobs"],
            "repeat": options["repeat"],
        }
        started = time.monotonic()
        try:
            with _sigterm_stops(bench):
                self._measure(bench, options, results)
                if bench.stop.is_set():
                    raise BenchInterrupted("stopped by SIGTERM")
        except (BenchFailed, BenchInterrupted) as exc:
            if isinstance(exc, BenchInterrupted):
                exc = BenchInterrupted(
                    f"{exc}; the benchmark's workers were stopped and its rows deleted"
                )
            raise CommandError(str(exc)) from None
        finally:
            # Whatever stopped the run (a failure, Ctrl-C, SIGTERM): no worker left
            # running and no row left in the scratch queue.
            bench.stop_workers()
            bench.clear()
        results["seconds"] = round(time.monotonic() - started, 1)
        if options["json"]:
            self.stdout.write(json.dumps(results, indent=2))
        else:
            self._table(results)

    def _measure(self, bench: Bench, options: dict[str, Any], results: dict[str, Any]) -> None:
        repeat = options["repeat"]
        self._progress(options, "enqueue one by one")
        results["enqueue_single_per_s"] = statistics.median(
            bench.enqueue_single(options["single"]) for _ in range(repeat)
        )
        self._progress(options, "enqueue in bulk")
        results["enqueue_bulk_per_s"] = statistics.median(
            bench.enqueue_bulk(options["jobs"]) for _ in range(repeat)
        )
        drain: dict[str, float] = {}
        worker_cpu: dict[str, float] = {}
        server_cpu: dict[str, float] = {}
        for processes in range(1, options["workers"] + 1):
            self._progress(options, f"drain with {processes} worker process(es)")
            rates, workers, server = [], [], []
            for _ in range(repeat):
                rates.append(bench.drain(options["jobs"], processes))
                if bench.cpu_us_per_job is not None:
                    workers.append(bench.cpu_us_per_job)
                if bench.server_cpu_us_per_job is not None:
                    server.append(bench.server_cpu_us_per_job)
            drain[str(processes)] = statistics.median(rates)
            if workers:
                worker_cpu[str(processes)] = statistics.median(workers)
            if server:
                server_cpu[str(processes)] = statistics.median(server)
        results["drain_per_s"] = drain
        # CPU per job is steadier than the rate on a busy machine (Linux only).
        results["drain_worker_cpu_us_per_job"] = worker_cpu
        results["drain_server_cpu_us_per_job"] = server_cpu
        self._progress(options, "idle pickup latency")
        results.update(bench.pickup(options["samples"]))
        results["load_average"] = _load_average()

    def _progress(self, options: dict[str, Any], what: str) -> None:
        if not options["json"] and options["verbosity"] >= 1:
            self.stderr.write(f"measuring: {what}…")

    def _table(self, r: dict[str, Any]) -> None:
        rows = [
            ("enqueue, one by one", f"{r['enqueue_single_per_s']:,.0f} jobs/s"),
            ("enqueue, bulk", f"{r['enqueue_bulk_per_s']:,.0f} jobs/s"),
            *(
                (f"drain, {n} worker process{'es' if n != '1' else ''}", f"{rate:,.0f} jobs/s")
                for n, rate in r["drain_per_s"].items()
            ),
            *(
                (
                    f"  CPU per job, {n} process{'es' if n != '1' else ''}",
                    f"worker {us:,.0f} µs"
                    + (
                        f", PostgreSQL {r['drain_server_cpu_us_per_job'][n]:,.0f} µs"
                        if n in r["drain_server_cpu_us_per_job"]
                        else ""
                    ),
                )
                for n, us in r["drain_worker_cpu_us_per_job"].items()
            ),
            (
                "idle pickup p50 / p95",
                f"{r['pickup_p50_ms']:.1f} ms / {r['pickup_p95_ms']:.1f} ms",
            ),
        ]
        if "pickup_handler_p50_ms" in r:
            rows.append(
                (
                    "  to the handler thread",
                    f"{r['pickup_handler_p50_ms']:.1f} ms / {r['pickup_handler_p95_ms']:.1f} ms",
                )
            )
            for step, ms in r["pickup_breakdown"]["steps_p50_ms"].items():
                rows.append((f"    {step.replace('_', ' ')} (p50)", f"{ms:.2f} ms"))
        width = max(len(name) for name, _ in rows)
        self.stdout.write(
            f"django-arcature on {r['database']} ({r['jobs']:,} no-op jobs per drain, "
            f"median of {r['repeat']}), {r['seconds']}s, load average {r['load_average']}"
        )
        for name, value in rows:
            self.stdout.write(f"  {name.ljust(width)}  {value:>22}")

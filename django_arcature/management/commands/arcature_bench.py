"""``manage.py arcature_bench``: measure the queue on this project's own database.

The table and the progress lines follow the project's ``LANGUAGE_CODE``
(``management/wording.py``); ``--json`` does not: its keys are what
``benchmarks/`` and dashboards read, the same in every language.
"""

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
from django.utils.text import format_lazy
from django.utils.translation import gettext, gettext_lazy, ngettext

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
from django_arcature.management.wording import Translated, ljust, rjust, width


def _cpu(worker: float, server: float | None) -> str:
    """A drain's CPU per job: the workers', and PostgreSQL's where it was read."""
    if server is None:
        return gettext("worker %(worker)s µs") % {"worker": f"{worker:,.0f}"}
    return gettext("worker %(worker)s µs, PostgreSQL %(server)s µs") % {
        "worker": f"{worker:,.0f}",
        "server": f"{server:,.0f}",
    }


def _load_average() -> str:
    """The machine's 1, 5 and 15 minute load averages (a busy machine measures slower)."""
    try:
        return " ".join(f"{value:.2f}" for value in os.getloadavg())
    except OSError:  # not available on this platform
        return "-"


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
    help = Translated(
        format_lazy(
            gettext_lazy(
                "Measure django-arcature on the configured database: enqueue rate (one by "
                "one and bulk), drain rate with 1..K worker processes, and idle pickup "
                "latency. Works in its own scratch queue ({queue} by default), deletes only "
                "the rows it created, and refuses to start if that queue holds other jobs. "
                "Stop workers that serve every queue first, or they will take the benchmark's "
                "jobs."
            ),
            queue=repr(SCRATCH_QUEUE),
        )
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--jobs", type=_positive, default=5000, help=gettext("Jobs per drain/bulk.")
        )
        parser.add_argument(
            "--single", type=_positive, default=500, help=gettext("Jobs enqueued one by one.")
        )
        parser.add_argument(
            "--workers",
            type=_positive,
            default=2,
            help=gettext("Drain with 1 up to this many processes."),
        )
        parser.add_argument(
            "--samples", type=_positive, default=20, help=gettext("Pickup samples.")
        )
        parser.add_argument(
            "--repeat", type=_positive, default=1, help=gettext("Runs per figure (median).")
        )
        parser.add_argument("--queue", default=SCRATCH_QUEUE, help=gettext("The scratch queue."))
        add_database_argument(parser)
        parser.add_argument(
            "--json", action="store_true", help=gettext("Print JSON instead of a table.")
        )

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
                    raise BenchInterrupted(gettext("stopped by SIGTERM"))
        except (BenchFailed, BenchInterrupted) as exc:
            if isinstance(exc, BenchInterrupted):
                exc = BenchInterrupted(
                    gettext(
                        "%(problem)s; the benchmark's workers were stopped and its rows deleted"
                    )
                    % {"problem": exc}
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
        self._progress(options, gettext("enqueue one by one"))
        results["enqueue_single_per_s"] = statistics.median(
            bench.enqueue_single(options["single"]) for _ in range(repeat)
        )
        self._progress(options, gettext("enqueue inside a transaction"))
        results.update(bench.enqueue_in_transaction(options["single"]))
        self._progress(options, gettext("enqueue in bulk"))
        results["enqueue_bulk_per_s"] = statistics.median(
            bench.enqueue_bulk(options["jobs"]) for _ in range(repeat)
        )
        drain: dict[str, float] = {}
        worker_cpu: dict[str, float] = {}
        server_cpu: dict[str, float] = {}
        for processes in range(1, options["workers"] + 1):
            self._progress(
                options,
                ngettext(
                    "drain with %(count)d worker process",
                    "drain with %(count)d worker processes",
                    processes,
                )
                % {"count": processes},
            )
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
        self._progress(options, gettext("idle pickup latency"))
        results.update(bench.pickup(options["samples"]))
        results["load_average"] = _load_average()

    def _progress(self, options: dict[str, Any], what: str) -> None:
        if not options["json"] and options["verbosity"] >= 1:
            self.stderr.write(gettext("measuring: %(what)s…") % {"what": what})

    def _table(self, r: dict[str, Any]) -> None:
        def rate(per_second: float) -> str:
            return gettext("%(rate)s jobs/s") % {"rate": f"{per_second:,.0f}"}

        rows = [
            (gettext("enqueue, one by one"), rate(r["enqueue_single_per_s"])),
            (
                gettext("enqueue in a transaction p50 / p99"),
                f"{r['enqueue_in_transaction_p50_us']:,.0f} µs / "
                f"{r['enqueue_in_transaction_p99_us']:,.0f} µs",
            ),
            (gettext("enqueue, bulk"), rate(r["enqueue_bulk_per_s"])),
            *(
                (
                    ngettext(
                        "drain, %(count)d worker process",
                        "drain, %(count)d worker processes",
                        int(n),
                    )
                    % {"count": int(n)},
                    rate(per_second),
                )
                for n, per_second in r["drain_per_s"].items()
            ),
            *(
                (
                    "  "
                    + ngettext(
                        "CPU per job, %(count)d worker process",
                        "CPU per job, %(count)d worker processes",
                        int(n),
                    )
                    % {"count": int(n)},
                    _cpu(us, r["drain_server_cpu_us_per_job"].get(n)),
                )
                for n, us in r["drain_worker_cpu_us_per_job"].items()
            ),
            (
                gettext("idle pickup p50 / p95"),
                f"{r['pickup_p50_ms']:.1f} ms / {r['pickup_p95_ms']:.1f} ms",
            ),
        ]
        if "pickup_handler_p50_ms" in r:
            rows.append(
                (
                    "  " + gettext("to the handler thread"),
                    f"{r['pickup_handler_p50_ms']:.1f} ms / {r['pickup_handler_p95_ms']:.1f} ms",
                )
            )
            # The steps by their names in the JSON output: technical names, not prose.
            for step, ms in r["pickup_breakdown"]["steps_p50_ms"].items():
                rows.append((f"    {step} p50", f"{ms:.2f} ms"))
        names = max(width(name) for name, _ in rows)
        self.stdout.write(
            gettext(
                "django-arcature on %(database)s (%(jobs)s no-op jobs per drain, "
                "median of %(repeat)d), %(seconds)ss"
            )
            % {
                "database": r["database"],
                "jobs": f"{r['jobs']:,}",
                "repeat": r["repeat"],
                "seconds": r["seconds"],
            }
        )
        self.stdout.write(gettext("load average: %(load)s") % {"load": r["load_average"]})
        for name, value in rows:
            self.stdout.write(f"  {ljust(name, names)}  {rjust(value, 22)}")

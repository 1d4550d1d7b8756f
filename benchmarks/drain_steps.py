"""Client CPU per job of a drain's two database steps, claim and completion, in one process.

    .venv/bin/python benchmarks/drain_steps.py --jobs 10000 --batch 50 --flush 100

Why: on a shared 2-core machine a drain's wall clock and even its CPU per job move
with the load; these two steps, run back to back in one thread with no handler
threads and no waits to overlap, cost about the same CPU at any load. The loop
claims ``--batch`` jobs at a time (``Job.objects.claim``) and writes them back
``--flush`` at a time as the worker does (``write_completions(plain_alone=True)``,
each with its attempt log), timing each step with ``time.process_time``. Run it
from two checkouts, alternated, to compare them (A/B). PostgreSQL by default;
``--url`` takes any database URL ``tests/dburl.py`` reads.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_URL = "postgres://arcature:arcature@127.0.0.1:5432/" + os.environ.get(
    "ARCATURE_BENCH_DB_NAME", "arcature_drain_steps"
)


def measure(
    jobs: int, batch: int, flush: int, kind: str = "plain", profile: str = ""
) -> dict[str, Any]:
    """Enqueue ``jobs``, then claim and complete them all; CPU µs per job of each step.

    ``kind`` "batch": the jobs are the members of one batch with an ``on_success``
    callback (the callback is enqueued by the last write, and not run). ``profile``:
    a file for the cProfile statistics of the completion writes alone.
    """
    import cProfile

    from django.db import connection

    from django_arcature import registry
    from django_arcature.bench.measure import _backend_cpu
    from django_arcature.models import Job
    from django_arcature.transitions import Completion

    registry.autodiscover()
    from django_arcature.workflows.models import BatchCounter, BatchRun, WorkflowNode

    with connection.cursor() as cursor:
        for model in (WorkflowNode, BatchCounter, BatchRun, Job):  # referencing ones first
            cursor.execute(f"DELETE FROM {connection.ops.quote_name(model._meta.db_table)}")
    if kind == "batch":
        from benchmarks.benchapp.jobs import batch_done, noop
        from django_arcature import Batch

        group = Batch(on_success=batch_done, name="drain steps")
        for _ in range(jobs):
            group.add(noop)
        group.enqueue()
    else:
        Job.objects.enqueue_many("bench.noop", [()] * jobs, queue="default")
    profiler = cProfile.Profile(time.process_time) if profile else None  # CPU, not waits
    statements = 0
    # The server's side of the writes: the CPU of this connection's backend (PostgreSQL,
    # a backend on this machine), read around each write.
    backend = None
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            backend = int(cursor.fetchone()[0])
    server_cpu = 0.0

    def count(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        nonlocal statements
        statements += 1
        return execute(sql, params, many, context)

    claim_cpu = write_cpu = 0.0
    waiting: list[Completion] = []
    writes = 0
    # A checkout from before `plain_alone` (the A side of an A/B) writes as its worker did.
    accepted = inspect.signature(Job.objects.write_completions).parameters
    options = {"plain_alone": True} if "plain_alone" in accepted else {}

    def write(completions: list[Completion]) -> None:
        nonlocal write_cpu, writes, server_cpu
        server_before = _backend_cpu(backend) if backend is not None else None
        started = time.process_time()
        if profiler is not None:
            profiler.enable()
        with connection.execute_wrapper(count):
            Job.objects.write_completions(completions, **options)
        if profiler is not None:
            profiler.disable()
        write_cpu += time.process_time() - started
        writes += 1
        server_after = _backend_cpu(backend) if backend is not None else None
        if server_before is not None and server_after is not None:
            server_cpu += server_after - server_before

    while True:
        started = time.process_time()
        claimed = Job.objects.claim("drain-steps", 30, batch, queues=["default"])
        claimed = [job for job in claimed if job.task_name == "bench.noop"]  # not a callback
        claim_cpu += time.process_time() - started
        if not claimed:
            break
        for job in claimed:
            log = [*job.attempt_log, {"worker": "drain-steps", "error": None}]
            waiting.append(Completion(job.id, job.claim_token, "succeeded", attempt_log=log))
        while len(waiting) >= flush:
            write(waiting[:flush])
            waiting = waiting[flush:]
    if waiting:
        write(waiting)
    if profiler is not None:
        profiler.dump_stats(profile)
    return {
        "vendor": connection.vendor,
        "kind": kind,
        "jobs": jobs,
        "batch": batch,
        "flush": flush,
        "writes": writes,
        # Django-level executes (a multi-statement query counts once: one round trip).
        "executes_per_write": round(statements / max(writes, 1), 2),
        "claim_cpu_us_per_job": round(claim_cpu * 1e6 / jobs, 1),
        "completion_cpu_us_per_job": round(write_cpu * 1e6 / jobs, 1),
        "completion_server_cpu_us_per_job": round(server_cpu * 1e6 / jobs, 1)
        if backend is not None
        else None,
        "load": " ".join(Path("/proc/loadavg").read_text().split()[:3])
        if Path("/proc/loadavg").exists()
        else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=50, help="jobs per claim")
    parser.add_argument("--flush", type=int, default=100, help="completions per write")
    parser.add_argument("--kind", choices=("plain", "batch"), default="plain")
    parser.add_argument("--profile", default="", help="cProfile statistics of the writes, to")
    parser.add_argument("--url", default=DEFAULT_URL, help="the benchmark's database")
    options = parser.parse_args()
    from benchmarks.run import boot

    boot(options.url)
    print(
        json.dumps(
            measure(options.jobs, options.batch, options.flush, options.kind, options.profile)
        ),
        flush=True,
    )


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()

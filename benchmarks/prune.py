"""Prune 1,000,000 finished rows on PostgreSQL while workers keep draining.

    .venv/bin/python benchmarks/prune.py [--rows 1000000] [--jobs 100000] [--batch 1000]

Steps: fill ``arcature_prune_bench`` with ``--rows`` succeeded jobs finished 30
days ago (one INSERT … SELECT from generate_series), VACUUM ANALYZE; enqueue
``--jobs`` no-op jobs and drain them with two ``arcature_worker`` processes while
this process prunes the old rows with the same batches a worker's retention duty
uses; then fill again and drain the same number with no pruning (baseline). Both
drains start from the same table state. The batches are those of
``retention.prune.prune_batch`` (``DELETE … USING (SELECT … LIMIT n FOR UPDATE
SKIP LOCKED)``). Each batch is one autocommit statement, so the time a batch
takes is the longest any of its row locks is held. Prints a Markdown summary.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
URL = "postgres://arcature:arcature@127.0.0.1:5432/arcature_prune_bench"


def fill(rows: int) -> float:
    from django.db import connection

    from django_arcature.models import Job

    table = connection.ops.quote_name(Job._meta.db_table)
    started = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE TABLE {table}")
        cursor.execute(
            f"""
            INSERT INTO {table} (id, task_name, queue, priority, payload, status, attempts,
                max_attempts, available_at, locked_by, lease_seconds, error_kind, last_error,
                last_traceback, result, attempt_log, backend, created_at, started_at, finished_at)
            SELECT gen_random_uuid(), 'bench.noop', 'default', 0, '{{"args": [], "kwargs": {{}}}}',
                'succeeded', 1, 3, t, '', 30, '', '', '', 'null', '[]', '', t, t, t
            FROM (SELECT now() - interval '30 days' - (g * interval '1 millisecond') AS t
                  FROM generate_series(1, %s) AS g) AS s
            """,
            [rows],
        )
    with connection.cursor() as cursor:
        cursor.execute(f"VACUUM ANALYZE {table}")
    return time.perf_counter() - started


class Workers:
    def __init__(self, count: int) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.procs: list[tuple[subprocess.Popen[bytes], Path]] = []
        for _ in range(count):
            log = Path(tempfile.mkstemp(prefix="prune-bench-", suffix=".log")[1])
            with open(log, "w") as out:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "django", "arcature_worker", "-v", "1"],
                    cwd=ROOT,
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            self.procs.append((proc, log))
        deadline = time.monotonic() + 30
        for proc, log in self.procs:
            while "started" not in log.read_text():
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit(f"worker did not start:\n{log.read_text()}")
                time.sleep(0.05)

    def stop(self) -> None:
        for proc, _ in self.procs:
            proc.terminate()
        for proc, log in self.procs:
            proc.wait(60)
            log.unlink(missing_ok=True)


def drain(jobs: int, while_pruning: bool, batch: int) -> dict[str, Any]:
    from django.db import connection
    from django.db.models import Max, Min

    from benchmarks.benchapp.jobs import noop
    from django_arcature.models import Job
    from django_arcature.retention.prune import prune_batch
    from django_arcature.retention.rules import PruneRule

    Job.objects.filter(task_name="bench.noop", finished_at__gt=time_ago(days=1)).delete()
    workers = Workers(2)
    batches: list[float] = []
    pruned = 0
    prune_seconds = 0.0
    stop = threading.Event()

    def pruner() -> None:
        nonlocal pruned, prune_seconds
        rule = PruneRule("succeeded", timedelta(days=7))
        started = time.perf_counter()
        try:
            while not stop.is_set():
                t0 = time.perf_counter()
                count = prune_batch(rule, "default", batch)
                batches.append(time.perf_counter() - t0)
                pruned += count
                if count < batch:
                    break
        finally:
            prune_seconds = time.perf_counter() - started
            connection.close()

    try:
        for start in range(0, jobs, 10_000):
            noop.enqueue_many([[]] * min(10_000, jobs - start))
        thread = threading.Thread(target=pruner)
        if while_pruning:
            thread.start()
        active = Job.objects.filter(status__in=("pending", "running"))
        while active.exists():
            time.sleep(0.2)
        if while_pruning:
            thread.join()
    finally:
        stop.set()
        workers.stop()
    recent = Job.objects.filter(finished_at__gt=time_ago(days=1))
    span = recent.aggregate(first=Min("started_at"), last=Max("finished_at"))
    seconds = (span["last"] - span["first"]).total_seconds()
    result: dict[str, Any] = {"drain": recent.count() / seconds, "drain_seconds": seconds}
    if while_pruning:
        ordered = sorted(batches)
        result.update(
            pruned=pruned,
            prune_seconds=prune_seconds,
            batches=len(batches),
            p50=statistics.median(ordered),
            p99=ordered[int(len(ordered) * 0.99) - 1],
            max=ordered[-1],
        )
    return result


def time_ago(**delta: float) -> Any:
    from django.utils import timezone

    return timezone.now() - timedelta(**delta)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1000)
    options = parser.parse_args()
    os.environ["DATABASE_URL"] = URL
    os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.settings"
    sys.path.insert(0, str(ROOT))
    from benchmarks.run import ensure_database

    ensure_database(URL)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    # Both drains start from the same state: the finished rows, freshly analysed.
    filled = fill(options.rows)
    during = drain(options.jobs, True, options.batch)
    fill(options.rows)
    baseline = drain(options.jobs, False, options.batch)
    print(f"load average before: {load}; {options.rows:,} finished rows filled in {filled:.1f}s")
    print()
    print("| | value |")
    print("|---|---|")
    rows_per_second = during["pruned"] / during["prune_seconds"]
    print(
        f"| rows pruned | {during['pruned']:,} in {during['batches']:,} batches of "
        f"{options.batch} |"
    )
    print(f"| prune time | {during['prune_seconds']:.1f} s ({rows_per_second:,.0f} rows/s) |")
    print(
        f"| lock duration per batch (p50 / p99 / max) | {during['p50'] * 1000:.1f} / "
        f"{during['p99'] * 1000:.1f} / {during['max'] * 1000:.1f} ms |"
    )
    print(
        f"| drain of {options.jobs:,} jobs, 2 workers, no pruning | {baseline['drain']:,.0f} "
        f"jobs/s ({baseline['drain_seconds']:.1f} s) |"
    )
    print(
        f"| the same while pruning | {during['drain']:,.0f} jobs/s "
        f"({during['drain_seconds']:.1f} s) |"
    )


if __name__ == "__main__":
    main()

"""Workflows, batches and ``wait()`` against plain jobs, per database, side by side in one run.

    .venv/bin/python benchmarks/workflows.py --db sqlite,postgres,mysql

Per database, with the same two ``arcature_worker`` processes running throughout
(started once, so every figure of a round sees the same workers and the same
load), each round measures, in an order that rotates from round to round:

* **plain**: a drain of ``nodes + 2`` no-op jobs (``enqueue_many``);
* **fan-out/fan-in**: a workflow of one root, ``nodes`` no-op nodes after it and
  one node after all of them (``nodes + 2`` jobs, ``2 x nodes`` edges);
* **batch**: a batch of ``nodes`` no-op members with an ``on_success`` callback.

A drain rate is jobs / (last ``finished_at`` minus first ``started_at``), both on the
database's clock; the ratios to the plain drain of the same round are what the
targets are about (fan-out ≥ 70 % on PostgreSQL; batch the same). While each
drain runs, a sampler on its own connection counts lock waits every 10 ms:
backends in ``pg_stat_activity`` with ``wait_event_type = 'Lock'`` (PostgreSQL),
``INNODB_TRX`` rows in ``LOCK WAIT`` plus the server's ``Innodb_row_lock_waits``
over the drain (MariaDB); SQLite has one writer at a time and no such view.

Then ``wait()`` latency, three ways. First from the commit of the transaction
that finishes the job: ``--wait-samples`` jobs in a queue no worker serves, each
cancelled by another thread (the same trigger as a completion) while waited for;
this is ``wait()``'s own latency, the one the ≤ 5 ms p50 target on PostgreSQL is
about. Then as many jobs run by the idle workers, each waited for, from their
``finished_at`` (the database's clock; on PostgreSQL the completion
transaction's *start*, so the whole completion write is included) and from a
stamp the handler returns (which adds the worker's batching of its writes).

Results are printed as JSON lines and written between markers into
``benchmarks/workflows.md`` (unless ``--no-write``), with the load average
before and after each database. Each database is its own child process.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = "benchmarks.workflow_settings"
SERVERS = {
    "sqlite": "sqlite:///var/{name}.sqlite3",
    "postgres": "postgres://arcature:arcature@127.0.0.1:5432/{name}",
    "mysql": "mysql://arcature:arcature@127.0.0.1:3306/{name}",
}
LABELS = {"sqlite": "SQLite (WAL file)", "postgres": "PostgreSQL 15", "mysql": "MariaDB 10.11"}
KINDS = ("plain", "fanout", "batch")
BEGIN, END = "<!-- workflows:begin -->", "<!-- workflows:end -->"


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def percentile(ordered: list[float], pct: float) -> float:
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(pct / 100 * len(ordered) + 0.5) - 1))
    return ordered[index]


# --- in a child process: one database ---------------------------------------------------------


def child(db: str, options: argparse.Namespace) -> dict[str, Any]:
    from benchmarks.run import boot

    boot(options.url or SERVERS[db].format(name=options.db_name), SETTINGS)
    return WorkflowBench(db, options).run()


class LockSampler(threading.Thread):
    """Counts lock waits on the server every ``every`` seconds until stopped."""

    def __init__(self, vendor: str, every: float = 0.01) -> None:
        super().__init__(daemon=True)
        self.vendor = vendor
        self.every = every
        self.samples: list[int] = []
        self.kinds: dict[str, int] = {}
        self.row_lock_waits: int | None = None
        self._finish = threading.Event()
        self._ready = threading.Event()
        self.error = ""

    def run(self) -> None:
        from django.db import connection

        try:
            self._sample(connection)
        except Exception as exc:  # a sampler must not break the benchmark
            self.error = repr(exc)
        finally:
            self._ready.set()
            connection.close()

    def _sample(self, connection: Any) -> None:
        with connection.cursor() as cursor:
            if self.vendor == "postgresql":
                query = (
                    "SELECT wait_event FROM pg_stat_activity WHERE datname = current_database() "
                    "AND pid <> pg_backend_pid() AND wait_event_type = 'Lock'"
                )
            elif self.vendor == "mysql":
                cursor.execute("SHOW GLOBAL STATUS LIKE 'Innodb_row_lock_waits'")
                before = int(cursor.fetchone()[1])
                query = (
                    "SELECT 'row lock' FROM information_schema.INNODB_TRX "
                    "WHERE trx_state = 'LOCK WAIT'"
                )
            else:
                self._ready.set()
                return
            self._ready.set()
            while not self._finish.is_set():
                cursor.execute(query)
                rows = cursor.fetchall()
                self.samples.append(len(rows))
                for (kind,) in rows:
                    self.kinds[kind] = self.kinds.get(kind, 0) + 1
                self._finish.wait(self.every)
            if self.vendor == "mysql":
                cursor.execute("SHOW GLOBAL STATUS LIKE 'Innodb_row_lock_waits'")
                self.row_lock_waits = int(cursor.fetchone()[1]) - before

    def start_sampling(self) -> None:
        self.start()
        self._ready.wait(10)

    def finish(self) -> dict[str, Any]:
        self._finish.set()
        self.join(30)
        if self.vendor not in ("postgresql", "mysql"):
            return {}
        waiting = [n for n in self.samples if n]
        return {
            "lock_samples": len(self.samples),
            "lock_samples_waiting": len(waiting),
            "lock_waiters_max": max(self.samples, default=0),
            "lock_waiters_mean": statistics.mean(self.samples) if self.samples else 0.0,
            "lock_kinds": self.kinds,
            "row_lock_waits": self.row_lock_waits,
            "sampler_error": self.error,
        }


def longest_idle_gap(spans: Iterable[tuple[datetime | None, datetime | None]]) -> float:
    """Seconds of the longest stretch, between two jobs, in which none was running.

    A drain that stalls (workers idle or blocked while jobs wait) shows here even
    when its rate alone could be a busy machine's.
    """
    intervals = sorted((start, end) for start, end in spans if start and end)
    longest = 0.0
    reach: datetime | None = None
    for start, end in intervals:
        if reach is not None and start > reach:
            longest = max(longest, (start - reach).total_seconds())
        reach = end if reach is None else max(reach, end)
    return longest


class WorkflowBench:
    def __init__(self, db: str, options: argparse.Namespace) -> None:
        from django.db import connection

        from django_arcature.bench.measure import Bench as Measure

        self.db = db
        self.options = options
        self.vendor = connection.vendor
        self.measure = Measure(
            task="bench.noop",
            queue="default",
            worker_command=[
                sys.executable,
                "-m",
                "django",
                "arcature_worker",
                *(["--concurrency", str(options.concurrency)] if options.concurrency else []),
            ],
            env={"PYTHONPATH": str(ROOT), "DJANGO_SETTINGS_MODULE": SETTINGS},
            cwd=ROOT,
        )

    def log(self, message: str) -> None:
        print(f"[{self.db}] {message}", file=sys.stderr, flush=True)

    def clear(self) -> None:
        """Delete every row the benchmark wrote (the database is the benchmark's own)."""
        from django.db import connection

        tables = [
            "django_arcature_workflowedge",
            "django_arcature_workflownode",
            "django_arcature_jobprogress",
            "django_arcature_workflowcounter",
            "django_arcature_workflowrun",
            "django_arcature_batchcounter",
            "django_arcature_batchrun",
            "django_arcature_job",
        ]
        with connection.cursor() as cursor:
            if self.vendor == "postgresql":
                cursor.execute("TRUNCATE TABLE " + ", ".join(tables))
            else:
                for table in tables:
                    cursor.execute(f"DELETE FROM {connection.ops.quote_name(table)}")

    # -- one drain ---------------------------------------------------------------------

    def enqueue(self, kind: str) -> int:
        from benchmarks.benchapp.jobs import batch_done, noop
        from django_arcature import Batch, Workflow

        nodes = int(self.options.nodes)
        if kind == "plain":
            noop.enqueue_many([[]] * (nodes + 2))
            return nodes + 2
        if kind == "fanout":
            flow = Workflow("bench fan-out/fan-in")
            root = flow.add(noop)
            middle = [flow.add(noop, after=[root]) for _ in range(nodes)]
            flow.add(noop, after=middle)
            flow.enqueue()
            return nodes + 2
        batch = Batch(on_success=batch_done, name="bench batch")
        for _ in range(nodes):
            batch.add(noop)
        batch.enqueue()
        return nodes + 1

    def drain(self, kind: str) -> dict[str, Any]:
        from django.db.models import Count, Max, Min

        from django_arcature.bench.measure import cpu_between
        from django_arcature.models import Job, JobStatus

        self.clear()
        sampler = LockSampler(self.vendor)
        sampler.start_sampling()
        cpu_before = self.measure.workers_cpu()
        started = time.monotonic()
        expected = self.enqueue(kind)
        enqueued = time.monotonic() - started
        active = Job.objects.filter(
            status__in=(JobStatus.PENDING, JobStatus.RUNNING, JobStatus.WAITING)
        )
        deadline = time.monotonic() + self.options.drain_timeout
        while Job.objects.count() < expected or active.exists():
            if time.monotonic() > deadline:
                sampler.finish()
                raise SystemExit(f"{kind} did not drain in {self.options.drain_timeout}s")
            time.sleep(0.05)
        cpu_after = self.measure.workers_cpu()
        locks = sampler.finish()
        counts = dict(Job.objects.values_list("status").annotate(n=Count("id")))
        if counts != {JobStatus.SUCCEEDED: expected}:
            raise SystemExit(f"{kind}: expected {expected} succeeded jobs, found {counts}")
        span = Job.objects.aggregate(first=Min("started_at"), last=Max("finished_at"))
        seconds = max((span["last"] - span["first"]).total_seconds(), 1e-6)
        gap = longest_idle_gap(Job.objects.values_list("started_at", "finished_at"))
        cpu = (
            cpu_between(cpu_before, cpu_after) * 1e6 / expected
            if cpu_before is not None and cpu_after is not None
            else None
        )
        return {
            "jobs": expected,
            "seconds": seconds,
            "rate": expected / seconds,
            "enqueue_seconds": enqueued,
            # Less sensitive to a busy machine than the rate: compare variants by it.
            "worker_cpu_us_per_job": cpu,
            # A stall: the longest stretch of the drain in which no job was running.
            "idle_gap_max_s": gap,
            **locks,
        }

    # -- wait() latency ----------------------------------------------------------------

    def wait_latency(self) -> dict[str, Any]:
        from benchmarks.benchapp.jobs import stamp

        self.clear()
        from_finished: list[float] = []
        from_stamp: list[float] = []
        from_enqueue: list[float] = []
        time.sleep(0.5)  # the workers settle into their idle wait
        for _ in range(self.options.wait_samples):
            time.sleep(random.uniform(0.02, 0.06))
            before = time.time()
            job = stamp.enqueue()
            done = job.wait(timeout=30)
            returned = time.time()
            assert done.finished_at is not None
            assert isinstance(done.result, float)
            from_finished.append((returned - done.finished_at.timestamp()) * 1000)
            from_stamp.append((returned - done.result) * 1000)
            from_enqueue.append((returned - before) * 1000)
        from_finished.sort()
        from_stamp.sort()
        from_enqueue.sort()
        from_commit = self.wait_after_commit()
        return {
            "wait_commit_p50_ms": statistics.median(from_commit),
            "wait_commit_p99_ms": percentile(from_commit, 99),
            "wait_samples": len(from_finished),
            "wait_finished_p50_ms": statistics.median(from_finished),
            "wait_finished_p99_ms": percentile(from_finished, 99),
            "wait_stamp_p50_ms": statistics.median(from_stamp),
            "wait_stamp_p99_ms": percentile(from_stamp, 99),
            "wait_enqueue_p50_ms": statistics.median(from_enqueue),
            "wait_enqueue_p99_ms": percentile(from_enqueue, 99),
        }

    def wait_after_commit(self) -> list[float]:
        """From the commit of the transaction that finishes a job to ``wait()`` returning.

        The job sits in a queue no worker serves; another thread cancels it (the
        operator's path, through the same trigger as a completion) and stamps the
        moment ``cancel()`` returned, which is just after its commit. This leaves the
        worker's own latency out: only the notification (or the poll) is measured.
        """
        from django.db import connection

        from benchmarks.benchapp.jobs import stamp
        from django_arcature.models import Job

        found: list[float] = []
        for _ in range(self.options.wait_samples):
            job = stamp.using(queue="bench-wait-idle").enqueue()
            committed: list[float] = []

            def finish(job_id: Any = job.pk, committed: list[float] = committed) -> None:
                try:
                    time.sleep(random.uniform(0.02, 0.06))
                    Job.objects.cancel(job_id)
                    committed.append(time.perf_counter())
                finally:
                    connection.close()

            thread = threading.Thread(target=finish)
            thread.start()
            job.wait(timeout=30)
            returned = time.perf_counter()
            thread.join()
            found.append(max(returned - committed[0], 0.0) * 1000)
        return sorted(found)

    # -- all of it ---------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        results: dict[str, Any] = {"db": self.db, "load_before": load_average(), "rounds": []}
        self.clear()
        self.measure.start_workers(self.options.workers)
        try:
            for number in range(self.options.repeat):
                kinds = tuple(k for k in KINDS if k in self.options.kinds.split(","))
                shift = number % len(kinds)
                order = kinds[shift:] + kinds[:shift]
                found: dict[str, Any] = {"order": list(order)}
                for kind in order:
                    found[kind] = self.drain(kind)
                    self.log(
                        f"round {number + 1} {kind}: {found[kind]['rate']:,.0f} jobs/s, "
                        f"{found[kind]['worker_cpu_us_per_job'] or 0:,.0f} µs worker CPU/job, "
                        f"longest idle gap {found[kind]['idle_gap_max_s']:.3f} s"
                    )
                results["rounds"].append(found)
                # A subset with the plain drain (``--kinds plain,fanout``) has its
                # ratios too: the same round's plain drain is what they are against.
                for kind in ("fanout", "batch"):
                    if kind in found and "plain" in found:
                        found[f"{kind}_ratio"] = found[kind]["rate"] / found["plain"]["rate"]
                        self.log(f"round {number + 1} {kind} ratio: {found[f'{kind}_ratio']:.0%}")
            if len(kinds) < len(KINDS):
                return results  # a partial run (--kinds): the rounds only, nothing to render
            results.update(self.wait_latency())
        finally:
            self.measure.stop_workers()
            self.clear()
        rounds = results["rounds"]
        for kind in KINDS:
            results[f"{kind}_rate"] = statistics.median(r[kind]["rate"] for r in rounds)
        results["fanout_ratio"] = statistics.median(r["fanout_ratio"] for r in rounds)
        results["batch_ratio"] = statistics.median(r["batch_ratio"] for r in rounds)
        results["load_after"] = load_average()
        return results


# --- the parent ---------------------------------------------------------------------------------


def _locks(r: dict[str, Any], kind: str) -> str:
    parts = []
    for found in r["rounds"]:
        d = found[kind]
        if "lock_samples" not in d:
            return "-"
        text = f"{d['lock_samples_waiting']}/{d['lock_samples']} (max {d['lock_waiters_max']})"
        if d.get("row_lock_waits") is not None:
            text += f", {d['row_lock_waits']} row-lock waits"
        parts.append(text)
    return "; ".join(parts)


def _cpu(r: dict[str, Any], kind: str) -> str:
    found = [f[kind]["worker_cpu_us_per_job"] for f in r["rounds"]]
    if any(value is None for value in found):
        return "-"
    return f"{statistics.median(found):,.0f} µs"


def render(results: list[dict[str, Any]], options: argparse.Namespace) -> str:
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"Measured {stamp} on {platform.machine()} ({os.cpu_count()} cores), Python "
        f"{platform.python_version()}; {options.workers} worker processes; "
        f"{options.nodes:,} nodes; {options.repeat} rounds (median); "
        f"{options.wait_samples} wait() samples.",
        "",
        "| database | plain drain | fan-out/fan-in | ratio | batch + callback | ratio "
        "| wait() p50 / p99 from the finishing commit | from finished_at (worker) "
        "| from handler stamp | load before → after |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        ratios = ", ".join(f"{f['fanout_ratio']:.0%}" for f in r["rounds"])
        bratios = ", ".join(f"{f['batch_ratio']:.0%}" for f in r["rounds"])
        lines.append(
            f"| {LABELS.get(r['db'], r['db'])} | {r['plain_rate']:,.0f}/s "
            f"| {r['fanout_rate']:,.0f}/s | **{r['fanout_ratio']:.0%}** ({ratios}) "
            f"| {r['batch_rate']:,.0f}/s | **{r['batch_ratio']:.0%}** ({bratios}) "
            f"| {r['wait_commit_p50_ms']:.1f} / {r['wait_commit_p99_ms']:.1f} ms "
            f"| {r['wait_finished_p50_ms']:.1f} / {r['wait_finished_p99_ms']:.1f} ms "
            f"| {r['wait_stamp_p50_ms']:.1f} / {r['wait_stamp_p99_ms']:.1f} ms "
            f"| {r['load_before']} → {r['load_after']} |"
        )
    lines += [
        "",
        "Lock waits while draining (samples every 10 ms with at least one backend waiting "
        "for a lock / samples, per round):",
        "",
        "| database | plain | fan-out/fan-in | batch |",
        "|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {LABELS.get(r['db'], r['db'])} | {_locks(r, 'plain')} | {_locks(r, 'fanout')} "
            f"| {_locks(r, 'batch')} |"
        )
    lines += [
        "",
        "Worker CPU per job (both processes, user + system; median over rounds), which a busy "
        "machine disturbs less than the rates:",
        "",
        "| database | plain | fan-out/fan-in | batch |",
        "|---|---|---|---|",
    ]
    for r in results:
        cells = [_cpu(r, kind) for kind in KINDS]
        lines.append(f"| {LABELS.get(r['db'], r['db'])} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write(text: str, path: Path) -> None:
    old = path.read_text() if path.exists() else ""
    block = f"{BEGIN}\n{text}\n{END}"
    if BEGIN in old and END in old:
        new = old[: old.index(BEGIN)] + block + old[old.index(END) + len(END) :]
    else:
        new = old.rstrip() + "\n\n" + block + "\n"
    path.write_text(new)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", default="sqlite,postgres,mysql", help="comma-separated list")
    parser.add_argument("--db-name", default="arcature_workflow_bench", help="database name")
    parser.add_argument("--url", help="a database URL instead of --db's local server")
    parser.add_argument("--nodes", type=int, default=10_000, help="fan-out width, batch size")
    parser.add_argument("--workers", type=int, default=2, help="worker processes")
    parser.add_argument("--concurrency", type=int, default=0, help="threads per worker")
    parser.add_argument("--repeat", type=int, default=3, help="rounds (median)")
    parser.add_argument("--wait-samples", type=int, default=200)
    parser.add_argument(
        "--kinds",
        default=",".join(KINDS),
        help="drains to run (a subset prints the rounds' JSON only, renders nothing)",
    )
    parser.add_argument("--drain-timeout", type=float, default=900.0)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "workflows.md"))
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.one:
        print("RESULT " + json.dumps(child(options.one, options)), flush=True)
        return []
    results = []
    forwarded = list(sys.argv[1:] if argv is None else argv)
    for db in options.db.split(","):
        command = [sys.executable, str(Path(__file__).resolve()), "--one", db, *forwarded]
        out = subprocess.run(command, cwd=ROOT, stdout=subprocess.PIPE, text=True, check=False)
        lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
        if out.returncode or not lines:
            sys.stderr.write(out.stdout)
            raise SystemExit(f"the workflow benchmark on {db} failed")
        result = json.loads(lines[-1].removeprefix("RESULT "))
        print(json.dumps(result), flush=True)
        results.append(result)
    if set(options.kinds.split(",")) != set(KINDS):
        return results
    text = render(results, options)
    print(text)
    if not options.no_write:
        write(text, Path(options.out))
    return results


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()

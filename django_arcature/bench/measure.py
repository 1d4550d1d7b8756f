"""Enqueue rates, drain rate with N worker processes, idle pickup latency.

Shared by ``manage.py arcature_bench`` (on the user's database, in a scratch
queue, deleting only its own rows) and ``benchmarks/run.py`` (on a dedicated
database). Drain is timed on the database's clock (first ``started_at`` to last
``finished_at`` of the measured jobs), so the time to start the worker
processes is not counted. Pickup latency is from the enqueue call (and from
its commit) to the claim's ``started_at``: the database's clock against this
host's, so it is meaningful on one host or with synchronised clocks.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.db import DEFAULT_DB_ALIAS

#: The scratch queue of ``manage.py arcature_bench``.
SCRATCH_QUEUE = "arcature-bench"


class BenchRefused(RuntimeError):
    """The scratch queue holds jobs the benchmark did not create."""


class BenchInterrupted(BaseException):
    """:attr:`Bench.stop` was set (the command's SIGTERM): unwind through the cleanup.

    A BaseException, as KeyboardInterrupt is, so no ``except Exception`` on the way
    can swallow it and carry on measuring."""


class BenchFailed(RuntimeError):
    """The measured jobs did not all succeed in time (e.g. another worker took them)."""


def _health_state(path: Path) -> str | None:
    """The state a worker's health file reports, or None before it is written."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    state = record.get("state") if isinstance(record, dict) else None
    return state if isinstance(state, str) else None


def percentile(ordered: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    return ordered[max(0, round(len(ordered) * pct / 100) - 1)]


@dataclass(frozen=True)
class EnqueueStamps:
    """One pickup sample's enqueue, on this host's ``CLOCK_REALTIME`` (``time.time_ns``)."""

    pk: Any
    call_ns: int
    #: The INSERT handed to the driver (after the enqueue's own Python work).
    sent_ns: int
    #: The INSERT (and, outside a transaction, its commit) came back.
    committed_ns: int
    #: ``enqueue()`` returned (after the hint, sent once the commit is done).
    returned_ns: int


#: The pickup's steps, in order: (name, from stamp, to stamp). The stamps of the
#: enqueueing process and of the worker are both ``CLOCK_REALTIME`` on one host.
PICKUP_STEPS = (
    ("enqueue_python", "call_ns", "sent_ns"),
    ("enqueue_commit", "sent_ns", "committed_ns"),
    ("delivery", "committed_ns", "woke_ns"),
    ("wake_up", "woke_ns", "taken_ns"),
    ("to_claim", "taken_ns", "claim_sent_ns"),
    ("claim_round_trip", "claim_sent_ns", "claim_back_ns"),
    ("hand_off", "claim_back_ns", "handler_ns"),
)


def _backend_cpu(pid: int) -> float | None:
    """CPU seconds so far of database backend ``pid``, a single-threaded process.

    The kernel's nanosecond count (``schedstat``) where it keeps one: the clock ticks
    of ``stat`` are 10 ms, and a small run's backends (200 jobs at some 50 us each,
    over two connections) then read as no CPU at all. ``schedstat`` counts only the
    process's first thread, so it is not used for our own (threaded) workers.
    """
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        return _process_cpu(pid)


def _threads_cpu(pid: int) -> dict[tuple[int, int], float] | None:
    """CPU seconds so far of each live thread of process ``pid``, in nanoseconds' precision.

    Per thread, so that a thread which ends during a measurement drops out of both
    readings instead of making the difference negative; the whole process's clock
    ticks (10 ms) read a small run's threaded workers (200 jobs at some 75 us each,
    over two processes) as no CPU at all.
    """
    found: dict[tuple[int, int], float] = {}
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return None
    for task in tasks:
        try:
            found[(pid, int(task.name))] = int((task / "schedstat").read_text().split()[0]) / 1e9
        except (OSError, ValueError, IndexError):
            continue  # the thread ended since the listing
    return found or None


def cpu_between(before: dict[Any, float], after: dict[Any, float]) -> float:
    """CPU seconds between two readings by process or thread; a newcomer started at zero."""
    return sum(t - before.get(key, 0.0) for key, t in after.items())


def _process_cpu(pid: int) -> float | None:
    """User + system CPU seconds of process ``pid`` so far, all threads (Linux /proc), or None."""
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / ticks


def _ns(moment: Any) -> int:
    """A datetime as nanoseconds since the epoch (microsecond precision, as stored)."""
    whole = int(moment.timestamp())
    return whole * 1_000_000_000 + int(moment.microsecond) * 1000


def _read_trace(path: Path) -> dict[str, dict[str, Any]]:
    """The worker's pickup trace lines, by job id (the first claim of each job)."""
    found: dict[str, dict[str, Any]] = {}
    for record in _trace_records(path):
        if isinstance(record.get("job"), str):
            found.setdefault(record["job"], record)
    return found


def _trace_records(path: Path) -> Iterator[dict[str, Any]]:
    """The trace file's JSON objects, in order; a missing file or a torn line (the
    worker may be killed mid-write) is skipped, not an error."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            yield record


def _empty_claims(path: Path) -> dict[str, int]:
    """The worker's claims that found nothing, by what woke it before each (its trace).

    A job wake-up that makes a claim find nothing is waste on the pickup's way: the
    second wake-up of one enqueue did so before ``worker.wakeup.WakePairs`` paired them.
    The ``poll`` ones include the look the loop takes after each job has finished.
    """
    found: dict[str, int] = {}
    for record in _trace_records(path):
        if "job" not in record and record.get("batch") == 0:
            source = str(record.get("source", "poll"))
            found[source] = found.get(source, 0) + 1
    return found


def pickup_breakdown(
    enqueued: Sequence[EnqueueStamps],
    traced: dict[str, dict[str, Any]],
    started: dict[Any, int],
) -> dict[str, Any]:
    """Median milliseconds of each pickup step, and from the enqueue call to the handler.

    Only samples the worker traced as woken (not found by its own poll) count for the
    steps; ``woken`` says how many, by source. ``claim_started_db`` is the claim's
    ``started_at`` (the database's clock, stamped at the statement's start) minus the
    moment the claim was sent: the way to the server and its start, a check that both
    clocks agree (it cannot be much below zero on one host).
    """
    steps: dict[str, list[float]] = {name: [] for name, _, _ in PICKUP_STEPS}
    handler: list[float] = []
    db_start: list[float] = []
    sources: dict[str, int] = {}
    for sample in enqueued:
        record = traced.get(str(sample.pk))
        if record is None:
            continue
        stamps = {**dataclasses.asdict(sample), **record}
        handler.append((record["handler_ns"] - sample.call_ns) / 1e6)
        source = str(record.get("source", "poll"))
        sources[source] = sources.get(source, 0) + 1
        if source == "poll":
            continue
        for name, begin, end in PICKUP_STEPS:
            steps[name].append((stamps[end] - stamps[begin]) / 1e6)
        if sample.pk in started:
            db_start.append((started[sample.pk] - record["claim_sent_ns"]) / 1e6)
    if not handler:
        return {}
    handler.sort()
    result: dict[str, Any] = {
        "handler_p50_ms": statistics.median(handler),
        "handler_p95_ms": percentile(handler, 95),
        "woken": sources,
        "steps_p50_ms": {
            name: statistics.median(values) for name, values in steps.items() if values
        },
    }
    if db_start:
        result["claim_started_db_p50_ms"] = statistics.median(db_start)
    return result


@dataclass
class Bench:
    """Runs measurements of ``task`` (a no-op job) in ``queue`` on database ``using``.

    ``worker_command`` is the argv that starts one worker process serving only
    ``queue``; ``env`` is added to each worker's environment (e.g. to turn
    metrics or tracing on for an overhead comparison).
    """

    task: str
    queue: str = SCRATCH_QUEUE
    using: str = DEFAULT_DB_ALIAS
    worker_command: Sequence[str] = ()
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    start_timeout: float = 60.0
    workers: list[tuple[subprocess.Popen[bytes], Path, Path]] = field(default_factory=list)
    #: CPU time the worker processes spent per job in the last :meth:`drain`, in
    #: microseconds (Linux only; None elsewhere). Less sensitive to a busy machine
    #: than the rate, so it is the better figure for comparing worker variants.
    cpu_us_per_job: float | None = None
    #: CPU time PostgreSQL's backends serving this database (the workers' connections,
    #: LISTEN included, not this process's own) spent per job in the last :meth:`drain`,
    #: in microseconds: read from /proc, so only with the server on this host (None
    #: elsewhere, and on other databases). Background processes (WAL writer,
    #: checkpointer) are not counted.
    server_cpu_us_per_job: float | None = None
    #: Set from elsewhere (a signal handler) to stop at the next wait.
    stop: threading.Event = field(default_factory=threading.Event)

    def _check_stop(self) -> None:
        if self.stop.is_set():
            raise BenchInterrupted("stopped by SIGTERM")

    # -- the scratch queue ------------------------------------------------------------

    def jobs(self) -> Any:
        from django_arcature.models import Job

        return Job.objects.using(self.using).filter(queue=self.queue)

    def foreign_jobs(self) -> int:
        """Jobs in the scratch queue that are not the benchmark's."""
        return int(self.jobs().exclude(task_name=self.task)[:1000].count())

    def check_scratch(self) -> None:
        foreign = self.foreign_jobs()
        if foreign:
            raise BenchRefused(
                f"queue {self.queue!r} holds {foreign} job(s) the benchmark did not create; "
                "it deletes the rows of its queue between runs, so it will not use this one. "
                "Pick another with --queue."
            )

    def clear(self) -> int:
        """Delete the benchmark's own rows (its task, in its queue) and nothing else."""
        deleted: int = self.jobs().filter(task_name=self.task).delete()[0]
        return deleted

    # -- enqueue ------------------------------------------------------------------------

    def _manager(self) -> Any:
        from django_arcature.models import Job

        return Job.objects.db_manager(self.using)

    def enqueue_single(self, count: int) -> float:
        """Jobs per second enqueued one by one, each in its own transaction."""
        self.clear()
        manager = self._manager()
        started = time.perf_counter()
        for _ in range(count):
            self._check_stop()
            manager.enqueue(self.task, queue=self.queue)
        return count / (time.perf_counter() - started)

    def enqueue_in_transaction(self, count: int) -> dict[str, float]:
        """What one enqueue adds to a request's own transaction, in microseconds.

        Each sample opens a transaction, writes to it as a view would before
        enqueueing (a ``SELECT`` that starts it on the server), then times the
        ``enqueue()`` call alone (``enqueue_in_transaction_p50_us``/``_p99_us``).

        The commit, outside that timing, is measured beside it: the whole
        transaction is timed, commit and ``on_commit`` hooks included, and the
        samples alternate with the same transaction without the enqueue, so both
        meet the same load; ``..._with_commit_p50_us`` is the difference of their
        medians. Against that read-only transaction it includes the commit's WAL
        flush, which a request that writes anything else pays anyway.
        """
        from django.db import connections, transaction

        self.clear()
        manager = self._manager()
        connection = connections[self.using]
        samples = []
        with_enqueue: list[float] = []
        without: list[float] = []
        for index in range(2 * count):
            self._check_stop()
            enqueues = index % 2 == 0
            began = time.perf_counter()
            with transaction.atomic(using=self.using):
                with connection.cursor() as cursor:
                    cursor.execute("SELECT 1")
                if enqueues:
                    started = time.perf_counter()
                    manager.enqueue(self.task, queue=self.queue)
                    samples.append((time.perf_counter() - started) * 1e6)
            (with_enqueue if enqueues else without).append((time.perf_counter() - began) * 1e6)
        samples.sort()
        return {
            "enqueue_in_transaction_p50_us": percentile(samples, 50),
            "enqueue_in_transaction_p99_us": percentile(samples, 99),
            "enqueue_in_transaction_with_commit_p50_us": statistics.median(with_enqueue)
            - statistics.median(without),
            "transaction_alone_p50_us": statistics.median(without),
        }

    def enqueue_bulk(self, count: int) -> float:
        """Jobs per second with one ``enqueue_many`` call."""
        self.clear()
        started = time.perf_counter()
        self._manager().enqueue_many(self.task, [()] * count, queue=self.queue)
        return count / (time.perf_counter() - started)

    # -- workers ------------------------------------------------------------------------

    def start_workers(self, count: int, env: dict[str, str] | None = None) -> None:
        """Start ``count`` workers and wait until each says it is running.

        Readiness is each worker's ``--health-file`` turning ``ok`` (written by its
        main loop once its threads run), not a line of its log: a project's LOGGING
        may send that log to a file or nowhere, and the bench then never saw it.
        The captured output only explains a worker that exits or never gets ready.
        """
        from django_arcature.worker.health import OK

        env = {**os.environ, **self.env, **(env or {})}
        # The children import the same settings from the same places as this process.
        env["PYTHONPATH"] = os.pathsep.join(path for path in sys.path if path)
        for _ in range(count):
            log = Path(tempfile.mkstemp(prefix="arcature-bench-", suffix=".log")[1])
            # A private folder (mkdtemp: 0700) of our own for the health file.
            health = Path(tempfile.mkdtemp(prefix="arcature-bench-")) / "health.json"
            with open(log, "w") as out:
                proc = subprocess.Popen(
                    [
                        *self.worker_command,
                        "--queue",
                        self.queue,
                        "-v",
                        "1",
                        "--health-file",
                        str(health),
                    ],
                    cwd=self.cwd,
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            self.workers.append((proc, log, health))
        deadline = time.monotonic() + self.start_timeout
        for proc, log, health in self.workers:
            while _health_state(health) != OK:
                self._check_stop()
                if time.monotonic() > deadline or proc.poll() is not None:
                    output = log.read_text()
                    why = (
                        f"exited with status {proc.returncode}"
                        if proc.poll() is not None
                        else f"was not running after {self.start_timeout:g}s"
                    )
                    self.stop_workers()
                    raise BenchFailed(f"a benchmark worker did not start ({why}):\n{output}")
                time.sleep(0.05)

    def stop_workers(self) -> None:
        for proc, _, _ in self.workers:
            if proc.poll() is None:
                proc.terminate()
        for proc, log, health in self.workers:
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.unlink(missing_ok=True)
            shutil.rmtree(health.parent, ignore_errors=True)
        self.workers = []

    def wait_drained(self, timeout: float = 600) -> None:
        from django_arcature.models import JobStatus

        active = self.jobs().filter(
            task_name=self.task, status__in=(JobStatus.PENDING, JobStatus.RUNNING)
        )
        deadline = time.monotonic() + timeout
        while active.exists():
            self._check_stop()
            if time.monotonic() > deadline:
                raise BenchFailed(f"the benchmark's jobs did not drain in {timeout:g}s")
            time.sleep(0.05)

    def _check_all_succeeded(self, count: int) -> None:
        from django_arcature.models import JobStatus

        mine = self.jobs().filter(task_name=self.task)
        succeeded = mine.filter(status=JobStatus.SUCCEEDED).count()
        if succeeded != count:
            strangers = sorted(
                set(mine.exclude(status=JobStatus.SUCCEEDED).values_list("locked_by", flat=True))
            )
            raise BenchFailed(
                f"{succeeded} of {count} benchmark jobs succeeded; the others ended with "
                f"workers {strangers}. A worker serving every queue may have taken them: "
                "run the benchmark where only its own workers serve its queue."
            )

    # -- drain and pickup --------------------------------------------------------------

    def drain(self, count: int, processes: int) -> float:
        """Jobs per second drained by ``processes`` workers, on the database's clock."""
        from django.db.models import Max, Min

        self.clear()
        self.start_workers(processes)
        try:
            cpu_before = self.workers_cpu()
            server_before = self._server_cpu()
            self._manager().enqueue_many(self.task, [()] * count, queue=self.queue)
            self.wait_drained()
            cpu_after = self.workers_cpu()
            server_after = self._server_cpu()
        finally:
            self.stop_workers()
        self.cpu_us_per_job = (
            cpu_between(cpu_before, cpu_after) * 1e6 / count
            if cpu_before is not None and cpu_after is not None
            else None
        )
        self.server_cpu_us_per_job = None
        if server_before is not None and server_after:
            self.server_cpu_us_per_job = cpu_between(server_before, server_after) * 1e6 / count
        self._check_all_succeeded(count)
        span = self.jobs().aggregate(first=Min("started_at"), last=Max("finished_at"))
        seconds: float = max((span["last"] - span["first"]).total_seconds(), 1e-6)
        return count / seconds

    def workers_cpu(self) -> dict[tuple[int, int], float] | None:
        """CPU seconds so far of each thread of the worker processes (Linux /proc), or None."""
        total: dict[tuple[int, int], float] = {}
        for proc, _, _ in self.workers:
            threads = _threads_cpu(proc.pid)
            if threads is None:
                return None
            total.update(threads)
        return total

    def _server_cpu(self) -> dict[int, float] | None:
        """CPU seconds so far of each PostgreSQL backend serving this database but ours."""
        from django.db import connections

        connection = connections[self.using]
        if connection.vendor != "postgresql":
            return None
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid() AND backend_type = 'client backend'"
            )
            pids = [row[0] for row in cursor.fetchall()]
        found = {}
        for pid in pids:
            seconds = _backend_cpu(pid)
            if seconds is None:
                if not Path("/proc/self/stat").exists():
                    return None  # no /proc here at all
                continue  # gone since, or not on this host
            found[pid] = seconds
        return found if found or not pids else None

    def _pickup_cpu(
        self,
        cpu_before: dict[tuple[int, int], float] | None,
        server_before: dict[int, float] | None,
        samples: int,
        started: float,
    ) -> dict[str, float]:
        """CPU per idle pickup, in microseconds: the worker's, and PostgreSQL's backends'.

        Over the whole sampling, so the idle loop's own wake-ups between the samples
        (its polls, heartbeats, the listener's timeouts) are counted in: a figure to
        compare worker variants by, steadier than the latency on a busy machine.
        ``pickup_seconds`` says how long that was.
        """
        found: dict[str, float] = {"pickup_seconds": time.monotonic() - started}
        cpu_after, server_after = self.workers_cpu(), self._server_cpu()
        if cpu_before is not None and cpu_after is not None:
            found["pickup_worker_cpu_us"] = cpu_between(cpu_before, cpu_after) * 1e6 / samples
        if server_before is not None and server_after:
            found["pickup_server_cpu_us"] = cpu_between(server_before, server_after) * 1e6 / samples
        return found

    def pickup(self, samples: int, settle: float = 1.0) -> dict[str, Any]:
        """Idle pickup latency in milliseconds: p50/p95 from the enqueue call and its commit,
        to the claim's ``started_at`` (the database's clock) and to the handler thread's start,
        with the break-down of :func:`pickup_breakdown` under ``"pickup_breakdown"``."""
        from django.db import connections

        from django_arcature.worker.pickup_trace import ENV

        self.clear()
        folder = Path(tempfile.mkdtemp(prefix="arcature-pickup-"))
        trace_file = folder / "trace.jsonl"
        self.start_workers(1, env={ENV: str(trace_file)})
        manager = self._manager()
        enqueued: list[EnqueueStamps] = []
        statement: list[int] = []

        def stamp_sql(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
            statement.append(time.time_ns())
            try:
                return execute(sql, params, many, context)
            finally:
                statement.append(time.time_ns())

        try:
            time.sleep(settle)  # let the worker settle into its idle wait
            cpu_before, server_before = self.workers_cpu(), self._server_cpu()
            sampling_started = time.monotonic()
            with connections[self.using].execute_wrapper(stamp_sql):
                for _ in range(samples):
                    self._check_stop()
                    time.sleep(random.uniform(0.2, 0.4))
                    statement.clear()
                    before = time.time_ns()
                    pk = manager.enqueue(self.task, queue=self.queue).pk
                    after = time.time_ns()
                    # Outside a transaction the INSERT commits as it returns: its last
                    # statement's end is the commit (SQLite and MariaDB read back after).
                    sent = statement[0] if statement else before
                    committed = statement[1] if len(statement) > 1 else after
                    enqueued.append(EnqueueStamps(pk, before, sent, committed, after))
            self.wait_drained()
            cpu = self._pickup_cpu(cpu_before, server_before, samples, sampling_started)
        finally:
            self.stop_workers()
        try:
            traced = _read_trace(trace_file)
            empty = _empty_claims(trace_file)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        started = {
            pk: _ns(moment)
            for pk, moment in self.jobs().values_list("pk", "started_at")
            if moment is not None
        }
        from_call = sorted((started[e.pk] - e.call_ns) / 1e6 for e in enqueued)
        from_commit = sorted((started[e.pk] - e.returned_ns) / 1e6 for e in enqueued)
        results: dict[str, Any] = {
            "pickup_p50_ms": statistics.median(from_call),
            "pickup_p95_ms": percentile(from_call, 95),
            "pickup_commit_p50_ms": statistics.median(from_commit),
            "pickup_commit_p95_ms": percentile(from_commit, 95),
        }
        results.update(cpu)
        # Per job enqueued, by what woke the worker before the empty claim.
        results["pickup_empty_claims_per_job"] = {
            source: count / samples for source, count in sorted(empty.items())
        }
        breakdown = pickup_breakdown(enqueued, traced, started)
        if breakdown:
            results["pickup_handler_p50_ms"] = breakdown.pop("handler_p50_ms")
            results["pickup_handler_p95_ms"] = breakdown.pop("handler_p95_ms")
            results["pickup_breakdown"] = breakdown
        return results

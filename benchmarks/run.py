"""Measure django-arcature on each database and write the table into benchmarks/README.md.

    .venv/bin/python benchmarks/run.py --db sqlite,postgres,mysql

Per database: enqueue one by one (each its own transaction) and in bulk; drain
throughput of no-op jobs with one and with two ``arcature_worker`` processes
(timed on the database's clock, first claim to last completion); idle pickup
latency (enqueue call to claim, one job at a time into an idle worker); and a
worker's resident memory across a long run. Django's default settings apply
(``CONN_MAX_AGE = 0``); the worker runs with its default options.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
#: The benchmark's database (and SQLite file) name; ``ARCATURE_BENCH_DB_NAME`` gives
#: two checkouts on one server a database each, since every run empties the table.
NAME = os.environ.get("ARCATURE_BENCH_DB_NAME", "arcature_worker_bench")
URLS = {
    "sqlite": f"sqlite:///var/{'bench' if NAME == 'arcature_worker_bench' else NAME}.sqlite3",
    "postgres": f"postgres://arcature:arcature@127.0.0.1:5432/{NAME}",
    "mysql": f"mysql://arcature:arcature@127.0.0.1:3306/{NAME}",
    # Through PgBouncer in transaction pooling (scripts/start-databases.sh starts it):
    # LISTEN does not deliver there, so the worker polls; "-listen" gives the LISTEN
    # connection its own direct alias (ARCATURE["LISTEN_DATABASE"]).
    "pgbouncer": f"postgres://arcature:arcature@127.0.0.1:6432/{NAME}",
    "pgbouncer-listen": f"postgres://arcature:arcature@127.0.0.1:6432/{NAME}",
}
LABELS = {
    "sqlite": "SQLite (WAL file)",
    "postgres": "PostgreSQL 15",
    "mysql": "MariaDB 10.11",
    "pgbouncer": "PostgreSQL 15 via PgBouncer (transaction pooling)",
    "pgbouncer-listen": "PgBouncer + LISTEN on a direct connection",
}


# --- run in a child process, one per database -----------------------------------------------


def ensure_database(url: str) -> None:
    """Create the benchmark database on a server if it is missing."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    name = parts.path.lstrip("/")
    if parts.scheme.startswith("postgres"):
        import psycopg

        with psycopg.connect(
            host=parts.hostname,
            port=parts.port,
            user=parts.username,
            password=parts.password,
            dbname="postgres",
            autocommit=True,
        ) as conn:
            if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
                conn.execute(f'CREATE DATABASE "{name}"')
    elif parts.scheme.startswith("mysql"):
        import MySQLdb

        conn = MySQLdb.connect(
            host=parts.hostname, port=parts.port, user=parts.username, password=parts.password
        )
        conn.cursor().execute(f"CREATE DATABASE IF NOT EXISTS `{name}` CHARACTER SET utf8mb4")
        conn.close()


def boot(url: str, settings: str = "benchmarks.settings") -> None:
    """Django set up on the benchmark's database ``url`` (created if missing), migrated.

    For a benchmark's own process, before it imports anything of Django's: the
    settings module reads ``DATABASE_URL``, set here.
    """
    os.environ["DATABASE_URL"] = url
    os.environ["DJANGO_SETTINGS_MODULE"] = settings
    ensure_database(url)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def child(db: str, options: argparse.Namespace) -> dict[str, Any]:
    if db.startswith("pgbouncer"):
        os.environ["ARCATURE_PGBOUNCER"] = "1"
    if db == "pgbouncer-listen":
        os.environ["ARCATURE_BENCH_LISTEN_URL"] = URLS["postgres"]
    boot(URLS[db])
    bench = Bench(db, options)
    return bench.run()


class Bench:
    """The measurements of ``django_arcature.bench.measure`` on a dedicated database.

    Between runs the whole table is truncated (it holds only the benchmark's
    rows), so each run starts from the same state with no dead rows behind.
    """

    def __init__(self, db: str, options: argparse.Namespace) -> None:
        from django_arcature.bench.measure import Bench as Measure
        from django_arcature.models import Job

        self.db = db
        self.options = options
        self.Job = Job
        self.measure = Measure(
            task="bench.noop",
            queue="default",
            worker_command=[sys.executable, "-m", "django", "arcature_worker"],
            env={"PYTHONPATH": str(ROOT)},
            cwd=ROOT,
        )
        self.measure.clear = self.clear  # type: ignore[method-assign]

    def clear(self) -> int:
        from django.db import connection

        table = self.Job._meta.db_table
        # TRUNCATE leaves no dead rows behind, so each run starts from the same state.
        verb = "DELETE FROM" if connection.vendor == "sqlite" else "TRUNCATE TABLE"
        with connection.cursor() as cursor:
            cursor.execute(f"{verb} {connection.ops.quote_name(table)}")
        return 0

    def run(self) -> dict[str, Any]:
        results: dict[str, Any] = {"db": self.db}
        if self.options.memory_only:
            results.update(self.memory())
            self.clear()
            return results
        if self.options.drain_only:
            results.update(self.drain_only())
            self.clear()
            return results
        repeat, measure, jobs = self.options.repeat, self.measure, self.options.jobs
        results["enqueue_single"] = statistics.median(
            measure.enqueue_single(self.options.single) for _ in range(repeat)
        )
        results["enqueue_bulk"] = statistics.median(
            measure.enqueue_bulk(jobs) for _ in range(repeat)
        )
        results["drain_1"] = statistics.median(measure.drain(jobs, 1) for _ in range(repeat))
        rates, workers, server = [], [], []
        for _ in range(repeat):
            rates.append(measure.drain(jobs, 2))
            workers.append(measure.cpu_us_per_job)
            server.append(measure.server_cpu_us_per_job)
        results["drain_2"] = statistics.median(rates)
        # CPU per job with 2 processes: the workers' and, on PostgreSQL on this host,
        # the server backends' serving them (None where it cannot be read).
        results["drain_2_worker_cpu_us"] = _median_or_none(workers)
        results["drain_2_server_cpu_us"] = _median_or_none(server)
        results.update(measure.pickup(self.options.samples))
        results.update(self.memory())
        self.clear()
        return results

    def drain_only(self) -> dict[str, Any]:
        """``--drain-only``: the 2-process drain, its CPU per job (worker and server) and,
        on PostgreSQL, the share of its updates that were HOT (written on their page,
        with no new index entry), per run: the figures to compare worker variants by."""
        runs: list[dict[str, Any]] = []
        rates: list[float] = []
        workers: list[float | None] = []
        server: list[float | None] = []
        for _ in range(self.options.repeat):
            before = self.updates()
            rate = self.measure.drain(self.options.jobs, 2)
            after = self.updates()
            rates.append(rate)
            workers.append(self.measure.cpu_us_per_job)
            server.append(self.measure.server_cpu_us_per_job)
            runs.append(
                {
                    "drain_2": rate,
                    "worker_cpu_us": self.measure.cpu_us_per_job,
                    "server_cpu_us": self.measure.server_cpu_us_per_job,
                    "updates": None if before is None or after is None else after[0] - before[0],
                    "hot_updates": None
                    if before is None or after is None
                    else after[1] - before[1],
                    "load": load_average(),
                }
            )
        return {
            "drain_2": statistics.median(rates),
            "drain_2_worker_cpu_us": _median_or_none(workers),
            "drain_2_server_cpu_us": _median_or_none(server),
            "drain_runs": runs,
        }

    def updates(self) -> tuple[int, int] | None:
        """The job table's updates and HOT updates so far (PostgreSQL), else None."""
        from django.db import connection

        if connection.vendor != "postgresql":
            return None
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_stat_clear_snapshot()")
            cursor.execute(
                "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables "
                "WHERE relid = %s::regclass",
                [self.Job._meta.db_table],
            )
            row = cursor.fetchone()
        return (int(row[0]), int(row[1])) if row else None

    def memory(self) -> dict[str, float]:
        from benchmarks.benchapp.jobs import noop

        total = self.options.rss_jobs
        if self.db != "postgres" and not self.options.memory_only:
            total //= 5
        self.clear()
        self.measure.start_workers(1)
        proc = self.measure.workers[0][0]
        samples: list[tuple[int, float]] = []
        chunk = 10_000
        try:
            done = 0
            while done < total:
                noop.enqueue_many([[]] * min(chunk, total - done))
                done += min(chunk, total - done)
                self.measure.wait_drained()
                samples.append((done, rss_mb(proc.pid)))
                self.clear()
        finally:
            self.measure.stop_workers()
        return {
            "rss_jobs": total,
            "rss_first_mb": samples[0][1],
            "rss_last_mb": samples[-1][1],
            "rss_max_mb": max(mb for _, mb in samples),
            # Growth from the first sample (after the first 10,000 jobs, once the
            # worker's caches are warm) to the largest: "flat" means within 10 %.
            "rss_growth_pct": (max(mb for _, mb in samples) / samples[0][1] - 1) * 100,
            "rss_samples": [[jobs, round(mb, 2)] for jobs, mb in samples],
        }


def _median_or_none(values: list[float | None]) -> float | None:
    known = [value for value in values if value is not None]
    return statistics.median(known) if known else None


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


# --- the parent: run each database, write the README -------------------------------------


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f} µs"


def write_readme(results: list[dict[str, Any]], options: argparse.Namespace, load: str) -> None:
    lines = [
        "| database | enqueue 1-by-1 | bulk enqueue | drain 1 proc | drain 2 procs "
        "| idle pickup p50 / p95 (from enqueue call) | from commit p50 / p95 "
        "| worker RSS (first → last) | CPU per job, 2 procs (worker / server) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {LABELS[r['db']]} | {r['enqueue_single']:,.0f}/s | {r['enqueue_bulk']:,.0f}/s "
            f"| {r['drain_1']:,.0f}/s | {r['drain_2']:,.0f}/s "
            f"| {r['pickup_p50_ms']:.1f} ms / {r['pickup_p95_ms']:.1f} ms "
            f"| {r['pickup_commit_p50_ms']:.1f} ms / {r['pickup_commit_p95_ms']:.1f} ms "
            f"| {r['rss_first_mb']:.0f} → {r['rss_last_mb']:.0f} MB over {r['rss_jobs']:,} jobs "
            f"| {_us(r.get('drain_2_worker_cpu_us'))} / {_us(r.get('drain_2_server_cpu_us'))} |"
        )
    table = "\n".join(lines)
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    readme = ROOT / "benchmarks" / "README.md"
    text = readme.read_text() if readme.exists() else ""
    begin, end = "<!-- results:begin -->", "<!-- results:end -->"
    block = (
        f"{begin}\nMeasured {stamp} on {platform.machine()} ({os.cpu_count()} cores), Python "
        f"{platform.python_version()}; load average before the run: {load}. "
        f"{options.jobs:,} no-op jobs per drain, median of {options.repeat}; "
        f"{options.samples} pickup samples.\n\n{table}\n{end}"
    )
    if begin in text and end in text:
        text = text[: text.index(begin)] + block + text[text.index(end) + len(end) :]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    readme.write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", default="sqlite,postgres,mysql", help="comma-separated list")
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs per drain and bulk run")
    parser.add_argument("--single", type=int, default=2_000, help="jobs enqueued one by one")
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure (median)")
    parser.add_argument("--samples", type=int, default=60, help="idle pickup samples")
    parser.add_argument(
        "--rss-jobs", type=int, default=100_000, help="long run on PostgreSQL (1/5 elsewhere)"
    )
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument(
        "--memory-only",
        action="store_true",
        help="only the worker RSS run, --rss-jobs on every --db (1,000,000: see README); "
        "prints its JSON, writes nothing",
    )
    parser.add_argument(
        "--drain-only",
        action="store_true",
        help="only the 2-process drain with its worker and server CPU per job (and, on "
        "PostgreSQL, its HOT updates), --repeat times on every --db; prints its JSON, "
        "writes nothing",
    )
    parser.add_argument("--one", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.one:
        print("RESULT " + json.dumps(child(options.one, options)), flush=True)
        return
    load = load_average()
    results = []
    for db in options.db.split(","):
        argv = [sys.executable, __file__, "--one", db, *sys.argv[1:]]
        out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
        lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
        if out.returncode or not lines:
            sys.stderr.write(out.stdout + out.stderr)
            raise SystemExit(f"benchmark on {db} failed")
        result = json.loads(lines[-1].removeprefix("RESULT "))
        print(json.dumps(result), flush=True)
        results.append(result)
    if not options.no_write and not options.memory_only and not options.drain_only:
        write_readme(results, options, load)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()

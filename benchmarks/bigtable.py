"""The hot statements on a job table dominated by finished rows, against a small table.

    .venv/bin/python benchmarks/bigtable.py --db postgres --finished 3000000
    .venv/bin/python benchmarks/bigtable.py --db mysql,sqlite --finished 1000000

In production the job table holds millions of finished rows and few live ones, and
the planner's statistics (taken by the last ANALYZE, when nothing was pending) say
"there are no pending rows". Per database this builds that table once (in SQL:
``generate_series`` on PostgreSQL, the sequence engine on MariaDB, a recursive CTE on
SQLite; it is reused by later runs), deletes live rows, runs ``VACUUM ANALYZE`` (or
``ANALYZE``), then adds pending jobs and measures, against the same steps on an empty
table in a second database:

* **claim / heartbeat / completion**: per batch of 50, the claim, a heartbeat of the
  batch and its batched completion (median ms), plus the claim's plan;
* **sweep**: jobs whose leases expired returned to pending, per second;
* **enqueue 1-by-1**: ``noop.enqueue()`` in its own transaction, per second;
* **drain**: ``--jobs`` pending jobs drained by ``--procs`` real ``arcature_worker``
  processes, timed on the database's clock (first claim to last completion).

The big databases are ``arc_plan_big`` (``var/arc_plan_big.sqlite3``), the small
ones ``arc_plan_small``; ``--prefix`` changes both. Results go to
``benchmarks/scale.md`` (section "Big tables") unless ``--no-write``; the claim's
plans go to ``var/bigtable-plans-<db>.txt``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SERVERS = {
    "postgres": "postgres://arcature:arcature@127.0.0.1:5432/",
    "mysql": "mysql://arcature:arcature@127.0.0.1:3306/",
}
LABELS = {"sqlite": "SQLite (WAL file)", "postgres": "PostgreSQL 15", "mysql": "MariaDB 10.11"}
FINISHED_DEFAULT = {"postgres": 3_000_000, "mysql": 1_000_000, "sqlite": 1_000_000}
BATCH = 50
#: Enqueues sent before one-by-one enqueue is timed (``Scale.enqueue_single``; ``--warm-up``).
WARM_UP_ENQUEUES = 100


def url_for(db: str, name: str) -> str:
    if db == "sqlite":
        return f"sqlite:///var/{name}.sqlite3"
    return SERVERS[db] + name


# --- one database, one size, in a child process ---------------------------------------------


def child(db: str, name: str, phase: str, options: argparse.Namespace) -> dict[str, Any]:
    from benchmarks.run import boot

    boot(url_for(db, name))
    return Scale(db, name, options).run(phase)


class Scale:
    def __init__(self, db: str, name: str, options: argparse.Namespace) -> None:
        from django.db import connection

        from benchmarks.run import Bench
        from django_arcature.models import Job

        self.db, self.name, self.options = db, name, options
        self.big = name.endswith("_big")
        self.Job = Job
        self.connection = connection
        self.vendor = connection.vendor
        self.table = connection.ops.quote_name(Job._meta.db_table)
        self.bench = Bench(db, options)  # its worker processes and drain wait
        self.plans: list[str] = []

    def sql(self, statement: str, params: Any = None) -> list[Any]:
        with self.connection.cursor() as cursor:
            cursor.execute(statement, params)
            return list(cursor.fetchall()) if cursor.description else []

    def log(self, message: str) -> None:
        print(f"[{self.db}/{self.name}] {message}", file=sys.stderr, flush=True)

    # -- table states --------------------------------------------------------------------------

    def finished_rows(self) -> int:
        return self.Job.objects.exclude(status__in=("pending", "running")).count()

    def build(self) -> None:
        """Bring the big table up to ``--finished`` finished rows (once; later runs reuse it)."""
        from django.db import transaction

        from tests.plans import finished_rows_sql

        wanted: int = self.options.finished or FINISHED_DEFAULT[self.db]
        have = self.finished_rows()
        if have >= wanted:
            self.log(f"{have:,} finished rows already there")
            return
        chunk = 500_000
        started = time.perf_counter()
        for start in range(have + 1, wanted + 1, chunk):
            stop = min(start + chunk, wanted + 1)
            with transaction.atomic():
                self.sql(finished_rows_sql(self.vendor, self.table, start, stop, wanted))
            self.log(f"built {stop - 1:,} of {wanted:,} ({time.perf_counter() - started:.0f} s)")

    def reset(self) -> None:
        """No live rows, fresh statistics: the state the plan has to survive."""
        if self.big:
            self.sql(f"DELETE FROM {self.table} WHERE status IN ('pending', 'running')")
            if self.vendor == "postgresql":
                self.sql(f"VACUUM ANALYZE {self.table}")
            elif self.vendor == "mysql":
                self.sql(f"ANALYZE TABLE {self.table}")
            else:
                self.sql("ANALYZE")
        else:
            self.bench.clear()

    # -- measurements --------------------------------------------------------------------------

    def run(self, phase: str) -> dict[str, Any]:
        """One phase; the parent alternates small and big runs so load changes hit both."""
        if phase == "setup":
            if self.big:
                self.build()
            self.reset()
            return {"finished_rows": self.finished_rows() if self.big else 0}
        if phase == "batches":
            result = self.batches()
            plans = ROOT / "var" / f"bigtable-plans-{self.db}-{self.name}.txt"
            plans.parent.mkdir(exist_ok=True)
            plans.write_text("\n\n".join(self.plans) + "\n")
            return {**result, "plans_file": str(plans.relative_to(ROOT))}
        if phase == "sweep":
            return {"sweep": self.sweep()}
        if phase == "enqueue":
            return {"enqueue_single": self.enqueue_single()}
        if phase == "drain":
            return {"drain": self.drain()}
        raise SystemExit(f"unknown phase {phase!r}")

    def explain_claim(self) -> None:
        """Record the plans of the claim's statements (executed, then rolled back)."""
        from tests.plans import explained

        def claim() -> object:
            return self.Job.objects.claim("explain", 30, BATCH)

        for statement, plan in explained(
            "default",
            claim,
            lambda sql: "SAVEPOINT" not in sql.upper(),
            # MariaDB's ANALYZE runs the UPDATE, and the claim then finds its rows taken.
            analyze=self.vendor == "postgresql",
        ):
            if self.vendor == "postgresql":
                from tests.plans import pg_text

                text = pg_text("default", statement.sql, statement.params)
            else:
                text = json.dumps(plan, indent=1, default=str)
            self.plans.append(f"-- {statement.sql.strip()}\n{text}")

    def batches(self) -> dict[str, Any]:
        """Claim a batch, heartbeat it, complete it in one batched write; per-step timings."""
        from benchmarks.benchapp.jobs import noop
        from django_arcature.managers import Completion

        pending: int = self.options.pending
        noop.enqueue_many([[]] * pending)
        self.explain_claim()
        claim_ms, beat_ms, done_ms = [], [], []
        manager = self.Job.objects
        for _ in range(min(self.options.batches, pending // BATCH)):
            t0 = time.perf_counter()
            claimed = manager.claim("bench", 30, BATCH)
            t1 = time.perf_counter()
            manager.heartbeat_many([(c.id, c.claim_token) for c in claimed], 30)
            t2 = time.perf_counter()
            manager.complete_batch([Completion(c.id, c.claim_token, "succeeded") for c in claimed])
            t3 = time.perf_counter()
            claim_ms.append((t1 - t0) * 1000)
            beat_ms.append((t2 - t1) * 1000)
            done_ms.append((t3 - t2) * 1000)
        self.reset()
        return {
            "claim_ms": statistics.median(claim_ms),
            "claim_p95_ms": sorted(claim_ms)[int(len(claim_ms) * 0.95) - 1],
            "heartbeat_ms": statistics.median(beat_ms),
            "complete_ms": statistics.median(done_ms),
        }

    def sweep(self) -> float:
        """Expired leases back to pending: jobs per second."""
        from benchmarks.benchapp.jobs import noop

        count: int = self.options.sweep
        noop.enqueue_many([[]] * count)
        while self.Job.objects.claim("sweep", 1, 500):
            pass
        time.sleep(1.2)  # every lease (1 s, database clock) has run out
        started = time.perf_counter()
        swept = 0
        while moved := self.Job.objects.sweep_expired_leases(batch=500):
            swept += moved
        seconds = time.perf_counter() - started
        assert swept == count, (swept, count)
        self.reset()
        return count / seconds

    def enqueue_single(self) -> float:
        """One-by-one enqueues per second, after ``--warm-up`` untimed ones.

        Each measurement runs in a process of its own: its first enqueues read every
        index's upper pages into a cold connection (and SQLite's page cache, which is
        per connection), a one-off cost that is larger on a deeper index and that a
        long-running web process does not pay per enqueue. Untimed, it no longer
        weighs on a short timed stretch.
        """
        from benchmarks.benchapp.jobs import noop

        count: int = self.options.single
        for _ in range(self.options.warm_up):
            noop.enqueue()
        started = time.perf_counter()
        for _ in range(count):
            noop.enqueue()
        rate = count / (time.perf_counter() - started)
        self.reset()
        return rate

    def drain(self) -> float:
        from django.db.models import Max, Min

        from benchmarks.benchapp.jobs import noop

        self.reset()
        mark = self.sql("SELECT " + self.now_sql())[0][0]
        if isinstance(mark, str):  # SQLite: text in the stored format
            mark = datetime.fromisoformat(mark)
        if mark.tzinfo is None:  # the database's clock is UTC on every database
            mark = mark.replace(tzinfo=UTC)
        jobs: int = self.options.jobs
        self.bench.measure.start_workers(self.options.procs)
        try:
            noop.enqueue_many([[]] * jobs)
            self.bench.measure.wait_drained()
        finally:
            self.bench.measure.stop_workers()
        ran = self.Job.objects.filter(started_at__gte=mark)
        span = ran.aggregate(first=Min("started_at"), last=Max("finished_at"))
        assert ran.filter(status="succeeded").count() == jobs
        seconds: float = (span["last"] - span["first"]).total_seconds()
        return jobs / seconds

    def now_sql(self) -> str:
        from django_arcature.db import now_sql

        return now_sql(self.vendor).replace("%%", "%")


# --- the parent ---------------------------------------------------------------------------------


def write_results(results: list[dict[str, Any]], options: argparse.Namespace, load: str) -> None:
    pairs: dict[str, dict[str, dict[str, Any]]] = {}
    for r in results:
        pairs.setdefault(r["db"], {})["big" if r["name"].endswith("_big") else "small"] = r
    lines = [
        "| database | finished rows | claim of 50 (p50) | heartbeat of 50 | batched completion "
        "of 50 | sweep | enqueue 1-by-1 | drain "
        f"({options.procs} procs) | drain big/small |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for db, pair in pairs.items():
        small, big = pair.get("small"), pair.get("big")
        for r in [row for row in (small, big) if row is not None]:
            ratio = ""
            if r is big and small is not None:
                ratio = f"**{big['drain'] / small['drain']:.2f}**"
            lines.append(
                f"| {LABELS[db]} | {r['finished_rows']:,} | {r['claim_ms']:.2f} ms "
                f"| {r['heartbeat_ms']:.2f} ms | {r['complete_ms']:.2f} ms "
                f"| {r['sweep']:,.0f}/s | {r['enqueue_single']:,.0f}/s | {r['drain']:,.0f}/s "
                f"| {ratio} |"
            )
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    command = "benchmarks/bigtable.py " + " ".join(sys.argv[1:])
    block = (
        f"Measured {stamp} on {platform.machine()} ({os.cpu_count()} cores); load average "
        f"before the run: {load}. {options.pending:,} pending jobs for the claim loop "
        f"({options.batches} batches), {options.sweep:,} expired leases, "
        f"{options.single:,} single enqueues, {options.jobs:,} jobs per drain "
        f"(median of {options.repeat}).\n\n```console\n$ .venv/bin/python {command}\n```\n\n"
        + "\n".join(lines)
    )
    print(block)
    if options.no_write:
        return
    path = ROOT / "benchmarks" / "scale.md"
    text = path.read_text() if path.exists() else "# Scale\n"
    key = ",".join(pairs) + ("" if options.prefix == "arc_plan" else f":{options.prefix}")
    begin, end = f"<!-- bigtable:{key}:begin -->", f"<!-- bigtable:{key}:end -->"
    block = f"{begin}\n{block}\n{end}"
    if begin in text and end in text:
        text = text[: text.index(begin)] + block + text[text.index(end) + len(end) :]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    path.write_text(text)


def run_child(db: str, name: str, phase: str) -> dict[str, Any]:
    argv = [sys.executable, __file__, "--one", db, name, phase, *sys.argv[1:]]
    out = subprocess.run(argv, cwd=ROOT, stdout=subprocess.PIPE, text=True, check=False)
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    if out.returncode or not lines:
        sys.stderr.write(out.stdout)
        raise SystemExit(f"benchmark {phase} on {db}/{name} failed")
    result: dict[str, Any] = json.loads(lines[-1].removeprefix("RESULT "))
    print(f"{db}/{name} {phase}: {json.dumps(result)}", file=sys.stderr, flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", default="postgres", help="comma-separated: postgres,mysql,sqlite")
    parser.add_argument("--finished", type=int, help="finished rows (default 3M PG, 1M others)")
    parser.add_argument("--pending", type=int, default=20_000, help="pending jobs, claim loop")
    parser.add_argument("--batches", type=int, default=200, help="claim batches timed")
    parser.add_argument("--sweep", type=int, default=2_000, help="expired leases swept")
    parser.add_argument("--single", type=int, default=2_000, help="jobs enqueued one by one")
    parser.add_argument(
        "--warm-up", type=int, default=WARM_UP_ENQUEUES, help="untimed enqueues before --single"
    )
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per drain")
    parser.add_argument("--procs", type=int, default=2, help="worker processes per drain")
    parser.add_argument("--repeat", type=int, default=3, help="drains per figure (median)")
    parser.add_argument("--prefix", default="arc_plan", help="database name prefix")
    parser.add_argument("--only", choices=("big", "small"), help="one size only")
    parser.add_argument("--build-only", action="store_true", help="build, analyse, stop")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--one", nargs=3, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.one:
        db, name, phase = options.one
        result = child(db, name, phase, options)
        print("RESULT " + json.dumps(result), flush=True)
        return
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    sizes = [size for size in ("small", "big") if options.only in (None, size)]
    results = []
    for db in options.db.split(","):
        names = {size: f"{options.prefix}_{size}" for size in sizes}
        found: dict[str, dict[str, Any]] = {
            size: {"db": db, "name": name, "drains": []} for size, name in names.items()
        }
        for size, name in names.items():
            found[size].update(run_child(db, name, "setup"))
        if options.build_only:
            continue
        # Small and big take turns, so a change in the machine's load hits both alike.
        for phase in ("batches", "sweep", "enqueue"):
            for size, name in names.items():
                found[size].update(run_child(db, name, phase))
        for _ in range(options.repeat):
            for size, name in names.items():
                found[size]["drains"].append(run_child(db, name, "drain")["drain"])
        for result in found.values():
            result["drain"] = statistics.median(result["drains"])
            print(json.dumps(result), flush=True)
            results.append(result)
    if results:
        write_results(results, options, load)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()

"""What idle workers cost the database, with and without same-host wake-up hints.

    .venv/bin/python benchmarks/idle_load.py --db postgres,mysql,sqlite --seconds 30

Issue 13 asks that faster idle pickup (``ARCATURE["WAKE_HINTS"]``, and LISTEN on
PostgreSQL) does not raise the load idle workers put on the database. Per database
and per combination of settings this starts 1, then 4, real ``arcature_worker``
processes on an empty queue, lets them settle, and counts for ``--seconds`` what
they send:

* **client side, every database**: each worker process counts every statement its
  Django connections execute (a wrapper appended to ``connection.execute_wrappers``
  by a ``connection_created`` receiver) and every commit and rollback, with a
  timestamp, and writes them out when it stops; only those inside the window count.
  PostgreSQL's LISTEN connection is not one of Django's and is not counted here
  (it sends nothing while idle; the server-side count includes it).
* **server side, PostgreSQL**: ``xact_commit + xact_rollback`` of the benchmark's
  database in ``pg_stat_database``, read over a connection to another database so
  that the reading is not counted (statistics reach that view within about a
  second; ``pg_stat_statements`` is not installed on this server, and is not set up
  here).
* **server side, MariaDB**: the server-wide ``Questions`` counter, minus the
  reading statements themselves, over the window and over an equal window just
  before with no worker running (the server is shared: that baseline shows what
  others sent meanwhile).

In the same run, per combination, the idle pickup latency (p50/p95 from the
enqueue call, one worker) from ``django_arcature.bench.measure``. Workers run with
the default ``POLL_INTERVAL`` (1 s) and their hint sockets in ``var/idle-hints``.
Results go to ``benchmarks/scale.md`` (``<!-- idle:begin -->``) unless ``--no-write``.
The database is ``arc_idle`` (``--name``), ``var/arc_idle.sqlite3`` on SQLite.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.bigtable import LABELS, url_for  # noqa: E402

HINT_DIR = ROOT / "var" / "idle-hints"


def combinations(db: str) -> list[dict[str, bool]]:
    listen = (True, False) if db == "postgres" else (False,)
    return [{"listen": li, "hints": hi} for li in listen for hi in (False, True)]


def arcature_settings(combo: dict[str, bool]) -> dict[str, Any]:
    return {
        "USE_LISTEN_NOTIFY": combo["listen"],
        "WAKE_HINTS": combo["hints"],
        "WAKE_HINT_DIR": str(HINT_DIR),
    }


# --- inside a worker process ----------------------------------------------------------------


def worker_main(argv: list[str]) -> None:
    """``arcature_worker`` with the combination's settings, counting what it sends."""
    os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.settings"
    from django.conf import settings

    settings.ARCATURE = json.loads(os.environ["ARCATURE_IDLE_SETTINGS"])
    import django

    django.setup()
    from django.core.management import call_command
    from django.db.backends.base.base import BaseDatabaseWrapper
    from django.db.backends.signals import connection_created

    events: list[tuple[float, str]] = []  # list.append is atomic: threads may share it

    def counted(kind: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(self: BaseDatabaseWrapper) -> Any:
            if self.connection is not None:
                events.append((time.time(), kind))
            return method(self)

        return wrapper

    for name, kind in (("_commit", "COMMIT"), ("_rollback", "ROLLBACK")):
        setattr(BaseDatabaseWrapper, name, counted(kind, getattr(BaseDatabaseWrapper, name)))

    def count(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        events.append((time.time(), " ".join(str(sql).split())[:60]))
        return execute(sql, params, many, context)

    def install(sender: Any, connection: Any, **kwargs: Any) -> None:
        connection.execute_wrappers.append(count)

    connection_created.connect(install, weak=False)
    try:
        call_command("arcature_worker", *argv)
    finally:
        Path(os.environ["ARCATURE_IDLE_EVENTS"]).write_text(json.dumps(events))


# --- one database, in a child process ---------------------------------------------------------


class Idle:
    def __init__(self, db: str, options: argparse.Namespace) -> None:
        from django.db import connection

        self.db, self.options = db, options
        self.connection = connection
        self.url = url_for(db, options.name)

    def measure_for(self, combo: dict[str, bool], events: Path) -> Any:
        from django_arcature.bench.measure import Bench as Measure

        return Measure(
            task="bench.noop",
            queue="default",
            worker_command=[sys.executable, __file__, "--worker"],
            env={
                "ARCATURE_IDLE_SETTINGS": json.dumps(arcature_settings(combo)),
                "ARCATURE_IDLE_EVENTS": str(events),
                "DATABASE_URL": self.url,
            },
            cwd=ROOT,
        )

    # -- server-side counters ----------------------------------------------------------------

    def server_count(self) -> int | None:
        """Statements (MariaDB) or transactions (PostgreSQL) the server has seen so far."""
        if self.db == "postgres":
            import psycopg

            with psycopg.connect(
                "host=127.0.0.1 port=5432 user=arcature password=arcature dbname=postgres",
                autocommit=True,
            ) as conn:
                row = conn.execute(
                    "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s",
                    [self.options.name],
                ).fetchone()
                return int(row[0]) if row else None
        if self.db == "mysql":
            with self.connection.cursor() as cursor:
                cursor.execute("SHOW GLOBAL STATUS LIKE 'Questions'")
                return int(cursor.fetchone()[1])
        return None

    def server_delta(self, before: int | None, after: int | None) -> int | None:
        if before is None or after is None:
            return None
        # On MariaDB the reading itself is one question (and the connection's
        # set-up, counted once in the first reading's own window).
        return after - before - (1 if self.db == "mysql" else 0)

    # -- one window ----------------------------------------------------------------------------

    def window(self, combo: dict[str, bool], workers: int) -> dict[str, Any]:
        seconds: float = self.options.seconds
        result: dict[str, Any] = {**combo, "workers": workers}
        if self.db == "mysql":  # what the shared server receives with no worker of ours
            first = self.server_count()
            time.sleep(seconds)
            result["baseline_server"] = self.server_delta(first, self.server_count())
        folder = Path(tempfile.mkdtemp(prefix="arcature-idle-"))
        files = [folder / f"w{n}.json" for n in range(workers)]
        measures = [self.measure_for(combo, path) for path in files]
        for measure in measures:
            measure.start_workers(1)
        try:
            time.sleep(self.options.settle)
            before = self.server_count()
            t0 = time.time()
            time.sleep(seconds)
            t1 = time.time()
            after = self.server_count()
        finally:
            for measure in measures:
                measure.stop_workers()
        statements: dict[str, int] = {}
        total = 0
        for path in files:
            for moment, kind in json.loads(path.read_text()):
                if t0 <= moment < t1:
                    total += 1
                    statements[kind] = statements.get(kind, 0) + 1
            path.unlink()
        folder.rmdir()
        result.update(
            seconds=t1 - t0,
            client=total,
            client_per_s_per_worker=total / (t1 - t0) / workers,
            server=self.server_delta(before, after),
            statements=dict(sorted(statements.items(), key=lambda kv: -kv[1])[:8]),
        )
        if result["server"] is not None:
            result["server_per_s_per_worker"] = result["server"] / (t1 - t0) / workers
        return result

    def pickup(self, combo: dict[str, bool]) -> dict[str, float]:
        """Idle pickup with the same settings on the enqueueing side (hints are sent there)."""
        from django.conf import settings

        settings.ARCATURE = arcature_settings(combo)
        with tempfile.TemporaryDirectory() as folder:
            measure = self.measure_for(combo, Path(folder) / "pickup.json")
            measure.clear = self.clear
            result: dict[str, float] = measure.pickup(self.options.samples)
            return result

    def clear(self) -> int:
        from django_arcature.models import Job

        verb = "DELETE FROM" if self.connection.vendor == "sqlite" else "TRUNCATE TABLE"
        with self.connection.cursor() as cursor:
            cursor.execute(f"{verb} {self.connection.ops.quote_name(Job._meta.db_table)}")
        return 0

    def run(self) -> list[dict[str, Any]]:
        rows = []
        for combo in combinations(self.db):
            self.clear()
            pickup = self.pickup(combo)
            for workers in self.options.workers:
                self.clear()
                row = {**self.window(combo, workers), **pickup, "load": load_average()}
                print(json.dumps(row), file=sys.stderr, flush=True)
                rows.append(row)
        return rows


def child(db: str, options: argparse.Namespace) -> list[dict[str, Any]]:
    os.environ["DATABASE_URL"] = url_for(db, options.name)
    os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.settings"
    from benchmarks.run import ensure_database

    ensure_database(os.environ["DATABASE_URL"])
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    HINT_DIR.mkdir(parents=True, exist_ok=True)
    return Idle(db, options).run()


# --- the parent ---------------------------------------------------------------------------------


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| database | LISTEN | hints | workers | client statements/s per worker "
        "| server count/s per worker | pickup p50 / p95 | load average |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        server = "n/a"
        if r.get("server_per_s_per_worker") is not None:
            unit = "transactions" if r["db"] == "postgres" else "questions"
            server = f"{r['server_per_s_per_worker']:.2f} {unit}"
            if "baseline_server" in r:
                server += f" (baseline {r['baseline_server'] / r['seconds']:.2f}/s)"
        listen = ("on" if r["listen"] else "off") if r["db"] == "postgres" else "-"
        lines.append(
            f"| {LABELS[r['db']]} | {listen} | {'on' if r['hints'] else 'off'} | {r['workers']} "
            f"| {r['client_per_s_per_worker']:.2f} | {server} "
            f"| {r['pickup_p50_ms']:.1f} / {r['pickup_p95_ms']:.1f} ms | {r['load']} |"
        )
    return "\n".join(lines)


def write_results(rows: list[dict[str, Any]], options: argparse.Namespace, load: str) -> None:
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    command = "benchmarks/idle_load.py " + " ".join(sys.argv[1:])
    block = (
        f"Measured {stamp} on {platform.machine()} ({os.cpu_count()} cores); load average "
        f"before the run: {load}. Windows of {options.seconds:.0f} s after "
        f"{options.settle:.0f} s of settling; pickup over {options.samples} jobs.\n\n"
        f"```console\n$ .venv/bin/python {command}\n```\n\n" + table(rows)
    )
    print(block)
    if options.no_write:
        return
    path = ROOT / "benchmarks" / "scale.md"
    text = path.read_text()
    begin, end = "<!-- idle:begin -->", "<!-- idle:end -->"
    if begin in text and end in text:
        text = (
            text[: text.index(begin) + len(begin)] + "\n" + block + "\n" + text[text.index(end) :]
        )
    else:
        text = text.rstrip() + f"\n\n{begin}\n{block}\n{end}\n"
    path.write_text(text)


def main() -> None:
    if sys.argv[1:2] == ["--worker"]:
        worker_main(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", default="postgres,mysql,sqlite", help="comma-separated")
    parser.add_argument("--name", default="arc_idle", help="database name")
    parser.add_argument("--seconds", type=float, default=30.0, help="counting window")
    parser.add_argument("--settle", type=float, default=3.0, help="idle before counting")
    parser.add_argument("--workers", default="1,4", help="worker counts, comma-separated")
    parser.add_argument("--samples", type=int, default=40, help="pickup samples")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    options = parser.parse_args()
    options.workers = [int(n) for n in str(options.workers).split(",")]
    if options.one:
        found_rows = child(options.one, options)
        print("RESULT " + json.dumps([{**row, "db": options.one} for row in found_rows]))
        return
    load = load_average()
    rows: list[dict[str, Any]] = []
    for db in options.db.split(","):
        argv = [sys.executable, __file__, "--one", db, *sys.argv[1:]]
        out = subprocess.run(argv, cwd=ROOT, stdout=subprocess.PIPE, text=True, check=False)
        found = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
        if out.returncode or not found:
            sys.stderr.write(out.stdout)
            raise SystemExit(f"idle load on {db} failed")
        rows.extend(json.loads(found[-1].removeprefix("RESULT ")))
    write_results(rows, options, load)


if __name__ == "__main__":
    main()

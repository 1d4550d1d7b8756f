"""One-by-one enqueue, django-arcature against django-tasks-db, in the same run.

    pip install django-tasks-db          # benchmark-only; not a dependency of the project
    .venv/bin/python benchmarks/enqueue_peers.py --db postgres

Each contender enqueues ``--jobs`` no-op jobs one by one, each INSERT its own
transaction (autocommit, as a view does): django-arcature through ``noop.enqueue()``
(the ``@job`` API), django-tasks-db through ``peer_noop.enqueue()`` (Django's
``django.tasks`` with its ``DatabaseBackend``). Both tables live in the same
database and are emptied before every timed stretch; rounds alternate which
contender goes first (ABBA), so a slow minute on this shared machine hurts both
alike. The figure that matters is the ratio within a round; the table gives the
median of the rounds' rates and of their ratios, and the load average before and
after.

By default one worker's wake-up socket is bound (and never read, like a busy
worker's) in the same-host hint folder, so each of our enqueues pays for the
hint it sends after commit, as it does in a deployment with a worker on the
host. ``--profile`` runs one extra round of ours under cProfile and prints where
the time goes. ``--server-binding`` (PostgreSQL) opens the connection both
contenders share with Django's ``OPTIONS`` ``server_side_binding=True`` and
``prepare_threshold=5``: psycopg binds parameters on the server and prepares a
statement it has run five times, for both alike. The default is Django's own
(parameters inlined by the client, nothing prepared), which works behind PgBouncer
in transaction pooling.

``--bare-table`` (PostgreSQL) measures a ceiling no schema of ours can pass: in a
database of its own (the usual name plus ``_bare``), our job table is stripped to
its primary key (no claim, list or unique index, no CHECK constraint, no NOTIFY
trigger), a table no worker could claim from efficiently. Whatever ratio that
table reaches is the most any index or constraint work on the server could give.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import platform
import pstats
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
NAME = os.environ.get("ARCATURE_DB_NAME", "arcature_enqueue_peers")
URLS = {
    "sqlite": f"sqlite:///var/{NAME}.sqlite3",
    "postgres": f"postgres://arcature:arcature@127.0.0.1:5432/{NAME}",
    "mysql": f"mysql://arcature:arcature@127.0.0.1:3306/{NAME}",
}
LABELS = {"sqlite": "SQLite (WAL file)", "postgres": "PostgreSQL 15", "mysql": "MariaDB 10.11"}
CONTENDERS = ("arcature", "tasks_db")


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


# --- in a child process, one per database ----------------------------------------------


class Round:
    """The two contenders' enqueue loops and the table emptying between them."""

    def __init__(self) -> None:
        from django_tasks_db.models import DBTaskResult

        from benchmarks.benchapp.jobs import noop
        from benchmarks.benchapp.peer_tasks import peer_noop
        from django_arcature.models import Job

        self.tables = {"arcature": Job._meta.db_table, "tasks_db": DBTaskResult._meta.db_table}
        self.enqueue: dict[str, Callable[[], object]] = {
            "arcature": noop.enqueue,
            "tasks_db": peer_noop.enqueue,
        }

    def clear(self, contender: str) -> None:
        from django.db import connection

        verb = "DELETE FROM" if connection.vendor == "sqlite" else "TRUNCATE TABLE"
        with connection.cursor() as cursor:
            cursor.execute(f"{verb} {connection.ops.quote_name(self.tables[contender])}")

    def rate(self, contender: str, count: int) -> tuple[float, float]:
        """Jobs per second, ``count`` enqueues of one contender, each its own transaction,
        and this process's CPU time per enqueue in microseconds (the Python path's cost,
        without the wait for the database)."""
        from django.db import connection

        assert connection.get_autocommit(), "each enqueue must commit on its own"
        self.clear(contender)
        enqueue = self.enqueue[contender]
        cpu = time.process_time()
        started = time.perf_counter()
        for _ in range(count):
            enqueue()
        elapsed = time.perf_counter() - started
        return count / elapsed, (time.process_time() - cpu) / count * 1e6


def bind_listeners(count: int) -> list[tuple[socket.socket, str]]:
    """``count`` wake-up sockets where our workers bind theirs, never read (a busy worker)."""
    from django_arcature.hints import hint_directory

    directory = hint_directory("default")
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    bound = []
    for index in range(count):
        path = str(directory / f"bench-{os.getpid()}-{index}.sock")
        receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        receiver.bind(path)
        bound.append((receiver, path))
    return bound


def calls_per_enqueue(bench: Round, contender: str, count: int = 200) -> int:
    """Python function calls one enqueue makes (cProfile's count): unlike a time, the
    same on a busy machine as on an idle one."""
    profiler = cProfile.Profile()
    bench.clear(contender)
    enqueue = bench.enqueue[contender]
    profiler.enable()
    for _ in range(count):
        enqueue()
    profiler.disable()
    return pstats.Stats(profiler).total_calls // count  # type: ignore[attr-defined, no-any-return]


def profile_round(bench: Round, count: int, top: int) -> str:
    profiler = cProfile.Profile()
    bench.clear("arcature")
    profiler.enable()
    started = time.perf_counter()
    for _ in range(count):
        bench.enqueue["arcature"]()
    seconds = time.perf_counter() - started
    profiler.disable()
    out = io.StringIO()
    out.write(f"profiled: {count} enqueues in {seconds:.3f} s ({count / seconds:,.0f}/s)\n")
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    return out.getvalue()


#: What ``--bare-table`` drops from our table: every index but the primary key, every
#: CHECK and UNIQUE constraint, and the NOTIFY trigger of migration 0002.
STRIP_SQL = """
DROP TRIGGER IF EXISTS arcature_notify_inserted ON django_arcature_job;
DO $$
DECLARE r record;
BEGIN
    FOR r IN SELECT conname FROM pg_constraint
             WHERE conrelid = 'django_arcature_job'::regclass AND contype IN ('c', 'u') LOOP
        EXECUTE format('ALTER TABLE django_arcature_job DROP CONSTRAINT %I', r.conname);
    END LOOP;
    FOR r IN SELECT indexrelid::regclass::text AS name FROM pg_index
             WHERE indrelid = 'django_arcature_job'::regclass AND NOT indisprimary LOOP
        EXECUTE format('DROP INDEX %s', r.name);
    END LOOP;
END $$;
"""


def strip_our_table() -> None:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(STRIP_SQL)


def child(db: str, options: argparse.Namespace) -> dict[str, Any]:
    url = URLS[db]
    if options.bare_table:
        if db != "postgres":
            raise SystemExit("--bare-table is for PostgreSQL only")
        url = f"{url}_bare"
    os.environ["DATABASE_URL"] = url
    os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.peer_settings"
    if options.server_binding and db == "postgres":
        os.environ["ARCATURE_BENCH_SERVER_BINDING"] = "1"
    from benchmarks.run import ensure_database

    ensure_database(url)
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    if options.bare_table:
        strip_our_table()
    bench = Round()
    listeners = bind_listeners(options.listeners)
    try:
        for contender in CONTENDERS:  # warm up: connection, caches, first-call imports
            bench.rate(contender, min(200, options.jobs))
        rounds: list[dict[str, float]] = []
        cpu: dict[str, list[float]] = {contender: [] for contender in CONTENDERS}
        for index in range(options.rounds):
            order = CONTENDERS if index % 2 == 0 else CONTENDERS[::-1]
            measured = {contender: bench.rate(contender, options.jobs) for contender in order}
            rounds.append({contender: rate for contender, (rate, _) in measured.items()})
            for contender, (_, micros) in measured.items():
                cpu[contender].append(micros)
        calls = {contender: calls_per_enqueue(bench, contender) for contender in CONTENDERS}
        profile = profile_round(bench, options.jobs, options.top) if options.profile else ""
        for contender in CONTENDERS:
            bench.clear(contender)
    finally:
        for receiver, path in listeners:
            receiver.close()
            os.unlink(path)
    ratios = [r["arcature"] / r["tasks_db"] for r in rounds]
    return {
        "db": db,
        "rounds": rounds,
        "arcature": statistics.median(r["arcature"] for r in rounds),
        "tasks_db": statistics.median(r["tasks_db"] for r in rounds),
        "ratio": statistics.median(ratios),
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "calls": calls,
        "cpu_us": {contender: statistics.median(cpu[contender]) for contender in CONTENDERS},
        "profile": profile,
    }


# --- the parent --------------------------------------------------------------------------


def table(results: list[dict[str, Any]], options: argparse.Namespace, loads: list[str]) -> str:
    binding = (
        "PostgreSQL with server_side_binding=True and prepare_threshold=5 for both; "
        if options.server_binding
        else ""
    )
    if options.bare_table:
        binding += "our table stripped to its primary key (--bare-table); "
    lines = [
        f"{options.jobs:,} no-op jobs one by one per contender and round, {options.rounds} "
        f"rounds (ABBA), {options.listeners} idle worker socket(s) on the host; "
        f"{binding}Python {platform.python_version()}, {os.cpu_count()} cores; load average "
        f"before {loads[0]}, after {loads[1]}.",
        "",
        "| database | django-arcature | django-tasks-db | ratio (median of rounds) "
        "| ratio range | client CPU per enqueue (ours / theirs) | Python calls per enqueue |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {LABELS[r['db']]} | {r['arcature']:,.0f}/s | {r['tasks_db']:,.0f}/s "
            f"| {r['ratio']:.2f}x | {r['ratio_min']:.2f}-{r['ratio_max']:.2f}x "
            f"| {r['cpu_us']['arcature']:.0f} µs / {r['cpu_us']['tasks_db']:.0f} µs "
            f"| {r['calls']['arcature']:,} / {r['calls']['tasks_db']:,} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", default="postgres,mysql,sqlite", help="comma-separated list")
    parser.add_argument("--jobs", type=int, default=3_000, help="enqueues per contender/round")
    parser.add_argument("--rounds", type=int, default=6, help="rounds (order alternates)")
    parser.add_argument("--listeners", type=int, default=1, help="idle worker sockets to bind")
    parser.add_argument("--profile", action="store_true", help="cProfile one round of ours")
    parser.add_argument(
        "--server-binding",
        action="store_true",
        help="PostgreSQL: server-side binding and prepared statements for both contenders",
    )
    parser.add_argument(
        "--bare-table",
        action="store_true",
        help="PostgreSQL: our table stripped to its primary key, in a database of its own "
        "(the ceiling no index or constraint work can pass)",
    )
    parser.add_argument("--top", type=int, default=30, help="profile lines to print")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.one:
        print("RESULT " + json.dumps(child(options.one, options)), flush=True)
        return
    loads = [load_average()]
    results = []
    for db in options.db.split(","):
        argv = [sys.executable, __file__, "--one", db, *sys.argv[1:]]
        out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
        lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
        if out.returncode or not lines:
            sys.stderr.write(out.stdout + out.stderr)
            raise SystemExit(f"benchmark on {db} failed")
        result = json.loads(lines[-1].removeprefix("RESULT "))
        if result.pop("profile"):
            print(f"--- profile on {db} ---")
            print(json.loads(lines[-1].removeprefix("RESULT "))["profile"])
        print(json.dumps(result), flush=True)
        results.append(result)
    loads.append(load_average())
    print(table(results, options, loads))


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()

"""One-by-one enqueue against pgqueuer, the in-transaction cost, and async producers: one run.

    .venv/bin/python benchmarks/enqueue_latency.py --db postgres --jobs 2000 --rounds 6
    .venv/bin/python benchmarks/enqueue_latency.py --db mysql,sqlite      # ours only

Per round, alternating the order (ABBA), each contender's table emptied first:

* **ours, autocommit**: ``noop.enqueue()`` ``--jobs`` times, each its own transaction.
* **pgqueuer** (PostgreSQL; benchmark-only install): ``await queries.enqueue("noop",
  None)`` ``--jobs`` times on its documented psycopg async connection in autocommit,
  into its own database (``pgq install``'s schema).
* **django-tasks-db** (if installed): ``peer_noop.enqueue()``, as enqueue_peers.py.
* **floor: bare INSERT** (PostgreSQL): the very INSERT our enqueue sends (its
  parameters merged into it, a fresh id each time) on a psycopg connection of its
  own in autocommit, with none of our code or Django's around it: one round trip
  and one durable commit per job, the limit any one-by-one enqueue into this table
  meets on this machine.

Then, once per round: the time one ``enqueue()`` adds inside a request's own
transaction (``bench.measure.Bench.enqueue_in_transaction``: p50 and p99 of the call,
and the p50 with its commit, against the same transaction without it), on
PostgreSQL its breakdown (``ladder:`` figures, ``--ladder`` samples per rung: a bare
round trip, our INSERT alone, through Django's cursor, the enqueue first and second
in its transaction, its Python alone; see ``Contenders.ladder``), the server's part
of that INSERT (``server ladder:`` figures: the INSERT and its COMMIT into scratch
copies of the job table that add its primary key, CHECKs, indexes and trigger one at a
time, and prepared; see ``Contenders.server_ladder``), and
async producers through Django's ASGI handler (``AsyncClient``): an ``async def``
view awaiting ``noop.aenqueue()`` against a sync view calling ``noop.enqueue()``
(which the ASGI handler runs in its thread) and an async view awaiting
``sync_to_async(noop.enqueue)()``, in requests per second and the enqueue call's
own time inside the view. One worker wake-up socket is bound in the hint folder
(as enqueue_peers.py), so our enqueues pay for the hint they send.

``--server-binding`` (PostgreSQL) gives our connection Django's ``server_side_binding``
with ``prepare_threshold=5`` (as enqueue_peers.py): psycopg then prepares the INSERT,
which saves the server its parse and plan per enqueue; a project can choose that only
without transaction pooling, so it is a separate figure, not the default one.
``--prepare`` sets ``prepare_threshold=5`` alone: Django keeps binding on the client,
and our INSERT (only it) goes through a server-binding cursor that psycopg prepares.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
NAME = os.environ.get("ARCATURE_DB_NAME", "arcature_enqueue_latency")
URLS = {
    "sqlite": f"sqlite:///var/{NAME}.sqlite3",
    "postgres": f"postgres://arcature:arcature@127.0.0.1:5432/{NAME}",
    "mysql": f"mysql://arcature:arcature@127.0.0.1:3306/{NAME}",
}

#: The enqueue call's own time inside each view (microseconds), per view.
VIEW_TIMES: dict[str, list[float]] = {}


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


# --- the ASGI views ---------------------------------------------------------------------


async def native_view(request: Any) -> Any:
    from django.http import HttpResponse

    from benchmarks.benchapp.jobs import noop

    started = time.perf_counter()
    await noop.aenqueue()
    VIEW_TIMES.setdefault("async view, await aenqueue()", []).append(
        (time.perf_counter() - started) * 1e6
    )
    return HttpResponse(b"ok")


async def hop_view(request: Any) -> Any:
    from asgiref.sync import sync_to_async
    from django.http import HttpResponse

    from benchmarks.benchapp.jobs import noop

    started = time.perf_counter()
    await sync_to_async(noop.enqueue)()
    VIEW_TIMES.setdefault("async view, await sync_to_async(enqueue)()", []).append(
        (time.perf_counter() - started) * 1e6
    )
    return HttpResponse(b"ok")


def sync_view(request: Any) -> Any:
    from django.http import HttpResponse

    from benchmarks.benchapp.jobs import noop

    started = time.perf_counter()
    noop.enqueue()
    VIEW_TIMES.setdefault("sync view, enqueue()", []).append((time.perf_counter() - started) * 1e6)
    return HttpResponse(b"ok")


def urlpatterns_() -> list[Any]:
    from django.urls import path

    return [path("native", native_view), path("hop", hop_view), path("sync", sync_view)]


urlpatterns: list[Any] = []


# --- contenders ---------------------------------------------------------------------------


class Contenders:
    def __init__(self, db: str, options: argparse.Namespace) -> None:
        from django.db import connection

        from benchmarks.benchapp.jobs import noop
        from django_arcature.bench.measure import Bench
        from django_arcature.models import Job

        self.connection = connection
        self.noop = noop
        self.table = Job._meta.db_table
        self.measure = Bench(task="bench.noop", queue="default", worker_command=[])
        self.measure.clear = self.clear  # type: ignore[method-assign]
        self.loop = asyncio.new_event_loop()
        self.pgqueuer: Any = None
        self.tasks_db: Any = None
        self.floor: tuple[Any, str, str] | None = (
            self.floor_statement() if db == "postgres" else None
        )
        if db == "postgres" and not options.no_pgqueuer:
            try:
                import pgqueuer  # noqa: F401
            except ImportError:
                pass
            else:
                from benchmarks.enqueue_bulk import PgQueuer, ensure_pg_database

                ensure_pg_database(f"{NAME}_pgqueuer")
                self.pgqueuer = PgQueuer(f"{NAME}_pgqueuer")
                self.pgqueuer.loop.close()
                self.pgqueuer.loop = self.loop
                self.loop.run_until_complete(self.pgqueuer._setup())
        try:
            from django_tasks_db.models import DBTaskResult

            from benchmarks.benchapp.peer_tasks import peer_noop
        except ImportError:
            pass
        else:
            self.tasks_db = (peer_noop, DBTaskResult._meta.db_table)

    def clear(self, table: str | None = None) -> int:
        verb = "DELETE FROM" if self.connection.vendor == "sqlite" else "TRUNCATE TABLE"
        with self.connection.cursor() as cursor:
            cursor.execute(f"{verb} {table or self.table}")
        return 0

    def floor_statement(self) -> tuple[Any, str, str]:
        """A psycopg connection of its own, the SQL our enqueue sends (parameters
        merged), and the id written in it (replaced per call)."""
        import psycopg

        from benchmarks.our_insert import our_insert_sql

        sql, ident = our_insert_sql(self.noop)
        raw = psycopg.connect(
            host="127.0.0.1", user="arcature", password="arcature", dbname=NAME, autocommit=True
        )
        return raw, sql, ident

    def names(self) -> list[str]:
        names = ["ours"]
        if self.floor is not None:
            names.append("floor: bare INSERT")
        if self.pgqueuer is not None:
            names.append("pgqueuer")
        if self.tasks_db is not None:
            names.append("django-tasks-db")
        return names

    def our_pid(self) -> int | None:
        if self.connection.vendor != "postgresql":
            return None
        with self.connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            return int(cursor.fetchone()[0])

    def rate(self, name: str, count: int) -> dict[str, float]:
        """Rate, and client and server (PostgreSQL backend) CPU per enqueue in µs."""
        from benchmarks.enqueue_bulk import backend_cpu_seconds

        if name == "pgqueuer":
            return self.loop.run_until_complete(self._pgqueuer(count))
        if name == "floor: bare INSERT":
            return self._floor(name, count)
        if name == "ours":
            self.clear()
            enqueue = self.noop.enqueue
        else:
            peer_noop, table = self.tasks_db
            self.clear(table)
            enqueue = peer_noop.enqueue
        pid = self.our_pid()
        server = backend_cpu_seconds(pid) if pid else 0.0
        cpu = time.process_time()
        started = time.perf_counter()
        for _ in range(count):
            enqueue()
        elapsed = time.perf_counter() - started
        result = {
            name: count / elapsed,
            f"{name}_client_us": (time.process_time() - cpu) / count * 1e6,
        }
        if pid:
            result[f"{name}_server_us"] = (backend_cpu_seconds(pid) - server) / count * 1e6
        return result

    def _floor(self, name: str, count: int) -> dict[str, float]:
        from benchmarks.enqueue_bulk import backend_cpu_seconds
        from benchmarks.our_insert import with_fresh_id

        self.clear()
        assert self.floor is not None
        raw, sql, ident = self.floor
        pid = raw.info.backend_pid
        server = backend_cpu_seconds(pid)
        cpu = time.process_time()
        started = time.perf_counter()
        for _ in range(count):
            raw.execute(with_fresh_id(sql, ident)).fetchone()
        elapsed = time.perf_counter() - started
        return {
            name: count / elapsed,
            f"{name}_client_us": (time.process_time() - cpu) / count * 1e6,
            f"{name}_server_us": (backend_cpu_seconds(pid) - server) / count * 1e6,
        }

    async def _pgqueuer(self, count: int) -> dict[str, float]:
        from benchmarks.enqueue_bulk import backend_cpu_seconds

        queries = self.pgqueuer.queries
        await self.pgqueuer.conn.execute("TRUNCATE pgqueuer")
        pid = self.pgqueuer.conn.info.backend_pid
        server = backend_cpu_seconds(pid)
        cpu = time.process_time()
        started = time.perf_counter()
        for _ in range(count):
            await queries.enqueue("noop", None)
        elapsed = time.perf_counter() - started
        return {
            "pgqueuer": count / elapsed,
            "pgqueuer_client_us": (time.process_time() - cpu) / count * 1e6,
            "pgqueuer_server_us": (backend_cpu_seconds(pid) - server) / count * 1e6,
        }

    def ladder(self, count: int) -> dict[str, float]:
        """Where an in-transaction ``enqueue()`` call's time goes: p50 of each rung, in µs.

        Every sample opens a transaction with ``SELECT 1`` (as
        ``Bench.enqueue_in_transaction`` does) and times one rung; the rungs take
        turns, sample by sample, so a change in the machine's load reaches them all
        alike. The rungs: a ``SELECT 1`` round trip (the wire and the two wake-ups,
        no work); our INSERT as one literal statement on Django's own psycopg
        connection (the statement's server time on top); the same INSERT with its
        parameters through Django's cursor (Django's cursor wrapper and psycopg's
        client-side binding on top); our ``enqueue()`` first in its transaction and a
        second one in the same transaction (a per-transaction cost would show as a
        difference); and the enqueue's Python alone (the row built and its INSERT
        prepared, nothing sent). Only on PostgreSQL (the literal rung is psycopg's).
        """
        import uuid

        import psycopg
        from django.db import transaction

        from benchmarks.our_insert import with_fresh_id
        from django_arcature.manager.row_insert import prepare_insert
        from django_arcature.models import Job

        connection = self.connection
        alias = connection.alias
        noop = self.noop

        def build() -> Any:
            row, statements = Job.objects._build(
                noop.name, args=(), kwargs=None, queue=None, priority=None, delay=None,
                run_at=None, max_attempts=None, unique_key=None, backend="",
            )  # fmt: skip
            return row, prepare_insert(row, alias, statements)

        _, prepared = build()
        assert prepared is not None
        connection.ensure_connection()
        raw = connection.connection
        literal = psycopg.ClientCursor(raw).mogrify(prepared.sql, prepared.params)
        ident = next(
            text for text in (prepared.params[0].hex, str(prepared.params[0])) if text in literal
        )

        def select_one() -> None:
            raw.execute("SELECT 1").fetchone()

        def literal_insert() -> None:
            raw.execute(with_fresh_id(literal, ident)).fetchone()

        def cursor_insert() -> None:
            params = list(prepared.params)
            params[0] = uuid.uuid4()
            with connection.cursor() as cursor:
                cursor.execute(prepared.sql, params)
                cursor.fetchone()

        def second_enqueue() -> None:
            noop.enqueue()

        rungs: list[tuple[str, Any, bool]] = [
            ("round trip: SELECT 1", select_one, False),
            ("our INSERT, literal, on Django's psycopg connection", literal_insert, False),
            ("our INSERT, with parameters, through Django's cursor", cursor_insert, False),
            ("enqueue(), first in its transaction", noop.enqueue, False),
            ("enqueue(), second in the same transaction", second_enqueue, True),
            ("enqueue's Python alone: row built, INSERT prepared", build, False),
        ]
        samples: dict[str, list[float]] = {name: [] for name, _, _ in rungs}
        self.clear()
        for index in range(count * len(rungs)):
            name, rung, after_one = rungs[index % len(rungs)]
            with transaction.atomic(using=alias):
                with connection.cursor() as cursor:
                    cursor.execute("SELECT 1")
                if after_one:
                    noop.enqueue()
                started = time.perf_counter()
                rung()
                samples[name].append((time.perf_counter() - started) * 1e6)
        self.clear()
        return {f"ladder: {name}": statistics.median(times) for name, times in samples.items()}

    def server_ladder(self, count: int) -> dict[str, float]:
        """Where the server's part of our INSERT goes: p50 of the INSERT and of its COMMIT
        per rung, in µs, on a psycopg connection of its own (no Django, no Python of ours).

        The rungs are the INSERT our enqueue sends (literal, a fresh id each time) into
        scratch copies of the job table (``CREATE TABLE ... (LIKE ...)`` in the bench
        database, dropped afterwards) that add one part of the real table's schema at a
        time: no index or constraint; the primary key; the primary key and the CHECK
        constraints; every index without the CHECKs; every index and CHECK (the real table
        minus its trigger); then the real table (with its statement-level INSERT trigger,
        whose ``pg_notify`` shows in the COMMIT too); then the real table with the INSERT
        sent as parameters and prepared (what ``--prepare`` lets psycopg do: no parse or
        plan per statement). Each sample is ``BEGIN; SELECT 1;`` then the timed INSERT,
        then the timed COMMIT; the rungs take turns sample by sample. The differences
        between rungs are what each part costs; the schema itself is the migrations'.
        """
        import uuid

        from psycopg.types.json import Jsonb

        from benchmarks.our_insert import with_fresh_id

        assert self.floor is not None
        raw, sql, ident = self.floor
        scratch = {
            "arcature_ladder_bare": ["INCLUDING DEFAULTS"],
            "arcature_ladder_pk": ["INCLUDING DEFAULTS"],
            "arcature_ladder_checks": ["INCLUDING DEFAULTS", "INCLUDING CONSTRAINTS"],
            "arcature_ladder_indexes": ["INCLUDING DEFAULTS", "INCLUDING INDEXES"],
            "arcature_ladder_all": ["INCLUDING ALL"],
        }
        quoted = f'"{self.table}"'
        assert quoted in sql
        for name, like in scratch.items():
            raw.execute(f"DROP TABLE IF EXISTS {name}")
            raw.execute(f"CREATE TABLE {name} (LIKE {quoted} {' '.join(like)})")
        raw.execute("ALTER TABLE arcature_ladder_pk ADD PRIMARY KEY (id)")
        raw.execute("ALTER TABLE arcature_ladder_checks ADD PRIMARY KEY (id)")

        def literal(table: str) -> Any:
            statement = sql.replace(quoted, table, 1)

            def insert() -> None:
                raw.execute(with_fresh_id(statement, ident)).fetchone()

            return insert

        # The same INSERT with the id and the payload as parameters, prepared by psycopg.
        payload = '\'{"args": [], "kwargs": {}}\''
        assert payload in sql
        with_params = (
            sql.replace("%", "%%").replace(f"'{ident}'", "%s", 1).replace(payload, "%s", 1)
        )

        def prepared() -> None:
            params = [uuid.uuid4(), Jsonb({"args": [], "kwargs": {}})]
            raw.execute(with_params, params, prepare=True).fetchone()

        rungs: list[tuple[str, Any]] = [
            ("no index or constraint", literal("arcature_ladder_bare")),
            ("primary key", literal("arcature_ladder_pk")),
            ("primary key + CHECKs", literal("arcature_ladder_checks")),
            ("every index, no CHECK", literal("arcature_ladder_indexes")),
            ("every index and CHECK, no trigger", literal("arcature_ladder_all")),
            ("the job table (with its trigger)", literal(quoted)),
            ("the job table, prepared", prepared),
        ]
        inserts: dict[str, list[float]] = {name: [] for name, _ in rungs}
        commits: dict[str, list[float]] = {name: [] for name, _ in rungs}
        self.clear()
        try:
            for index in range(count * len(rungs)):
                name, rung = rungs[index % len(rungs)]
                raw.execute("BEGIN")
                raw.execute("SELECT 1")
                started = time.perf_counter()
                rung()
                inserts[name].append((time.perf_counter() - started) * 1e6)
                started = time.perf_counter()
                raw.execute("COMMIT")
                commits[name].append((time.perf_counter() - started) * 1e6)
        finally:
            for name in scratch:
                raw.execute(f"DROP TABLE IF EXISTS {name}")
            self.clear()
        result = {}
        for name in inserts:
            result[f"server ladder: INSERT, {name}"] = statistics.median(inserts[name])
            result[f"server ladder: COMMIT, {name}"] = statistics.median(commits[name])
        return result

    def asgi(self, count: int) -> dict[str, float]:
        """Requests per second through the ASGI handler, per view."""
        from asgiref.sync import async_to_sync
        from django.test import AsyncClient

        from django_arcature.db import async_pg

        client = AsyncClient()
        rates = {}

        async def requests(url: str) -> float:
            try:
                await client.get(url)  # warm: the loop's connection, first imports
                started = time.perf_counter()
                for _ in range(count):
                    await client.get(url)
                return count / (time.perf_counter() - started)
            finally:
                await async_pg.aclose_all()

        for url, label in (
            ("/native", "async view, await aenqueue()"),
            ("/sync", "sync view, enqueue()"),
            ("/hop", "async view, await sync_to_async(enqueue)()"),
        ):
            self.clear()
            rates[label] = async_to_sync(requests)(url)
        return rates


def bind_listener() -> Any:
    from benchmarks.enqueue_peers import bind_listeners

    return bind_listeners(1)


def child(db: str, options: argparse.Namespace) -> dict[str, Any]:
    os.environ["DATABASE_URL"] = URLS[db]
    if options.server_binding and db == "postgres":
        os.environ["ARCATURE_BENCH_SERVER_BINDING"] = "1"
    elif options.prepare and db == "postgres":
        os.environ["ARCATURE_BENCH_PREPARE_THRESHOLD"] = "5"
    os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.peer_settings"
    from benchmarks.run import ensure_database

    ensure_database(URLS[db])
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    global urlpatterns
    urlpatterns = urlpatterns_()
    settings.ROOT_URLCONF = __name__
    settings.ALLOWED_HOSTS = ["testserver"]
    call_command("migrate", verbosity=0)
    contenders = Contenders(db, options)
    listeners = bind_listener()
    result: dict[str, Any] = {
        "db": db,
        "server_binding": bool(options.server_binding and db == "postgres"),
        "prepare": bool(options.prepare and not options.server_binding and db == "postgres"),
        "load_before": load_average(),
    }
    try:
        for name in contenders.names():
            contenders.rate(name, min(200, options.jobs))
        rounds = []
        for index in range(options.rounds):
            names = contenders.names()
            order = names if index % 2 == 0 else names[::-1]
            measured: dict[str, Any] = {}
            for name in order:
                measured.update(contenders.rate(name, options.jobs))
            measured.update(contenders.measure.enqueue_in_transaction(options.jobs))
            if db == "postgres":
                measured.update(contenders.ladder(options.ladder))
                measured.update(contenders.server_ladder(options.ladder))
            measured.update(contenders.asgi(options.requests))
            rounds.append(measured)
    finally:
        for receiver, path in listeners:
            receiver.close()
            os.unlink(path)
        contenders.clear()
        if contenders.floor is not None:
            contenders.floor[0].close()
    result["rounds"] = rounds
    for key in rounds[0]:
        result[key] = statistics.median(r[key] for r in rounds)
    peers = [name for name in ("pgqueuer", "django-tasks-db") if name in rounds[0]]
    if peers:
        ratios = [r["ours"] / max(r[name] for name in peers) for r in rounds]
        result["vs_fastest_peer"] = statistics.median(ratios)
        result["vs_fastest_peer_range"] = [min(ratios), max(ratios)]
    if "floor: bare INSERT" in rounds[0]:
        result["vs_floor"] = statistics.median(r["ours"] / r["floor: bare INSERT"] for r in rounds)
    result["view_enqueue_p50_us"] = {
        label: statistics.median(times) for label, times in VIEW_TIMES.items()
    }
    result["load_after"] = load_average()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", default="postgres", help="comma-separated list")
    parser.add_argument("--jobs", type=int, default=2000, help="enqueues per contender and round")
    parser.add_argument("--requests", type=int, default=500, help="ASGI requests per view")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument(
        "--ladder", type=int, default=500, help="PostgreSQL: samples per rung of the breakdown"
    )
    parser.add_argument("--no-pgqueuer", action="store_true")
    parser.add_argument(
        "--server-binding",
        action="store_true",
        help="PostgreSQL: server-side binding with prepared statements for our connection",
    )
    parser.add_argument(
        "--prepare",
        action="store_true",
        help="PostgreSQL: prepare_threshold=5 alone (client-side binding): our INSERT prepared",
    )
    parser.add_argument("--one", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.one:
        print("RESULT " + json.dumps(child(options.one, options)), flush=True)
        return
    for db in options.db.split(","):
        argv = [sys.executable, __file__, "--one", db, *sys.argv[1:]]
        out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
        lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
        if out.returncode or not lines:
            sys.stderr.write(out.stdout + out.stderr)
            raise SystemExit(f"benchmark on {db} failed")
        print(json.dumps(json.loads(lines[-1].removeprefix("RESULT ")), indent=1), flush=True)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()

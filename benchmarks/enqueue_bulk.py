"""Bulk enqueue against the physical limit (``COPY`` from ``psql``) and pgqueuer, one run.

    .venv/bin/python benchmarks/enqueue_bulk.py --db postgres --jobs 20000 --rounds 5
    .venv/bin/python benchmarks/enqueue_bulk.py --db postgres --ablate      # per index/trigger
    .venv/bin/python benchmarks/enqueue_bulk.py --db mysql,sqlite           # ours only
    .venv/bin/python benchmarks/enqueue_bulk.py --db postgres --overlap     # one call, by phase

Contenders, alternating in each round (ABBA), on one database each time emptied
before a timed stretch:

* **ours**: ``noop.enqueue_many([[]] * 1000)`` called ``--jobs / 1000`` times (a
  batch of 1,000 per call, each call its own transaction, as pgqueuer's figure;
  ``--batch 10000`` for batches of 10,000, for every contender).
* **psql COPY**: the same rows, dumped from the table after our run (``COPY … TO``),
  loaded with ``psql``'s ``\\copy`` in batches of 1,000 rows, each its own
  transaction, timed by ``psql`` itself (``\\timing``): the physical limit for these
  rows, this table and this server, without any client-side work to build them.
* **pgqueuer** (if installed; benchmark-only): ``Queries.enqueue`` with lists of
  1,000 entrypoints, payloads and priorities, on psycopg's async connection, into
  its own database and schema (``pgq install``'s table, trigger and indexes).
* **pgqueuer's COPY**: its rows, dumped from its tables after its run, loaded with
  ``psql`` the same way into its own tables: into ``pgqueuer`` alone (its job table,
  the figure beside ours), and into ``pgqueuer`` and ``pgqueuer_log`` in one
  transaction per batch (its enqueue writes one log row per job in the same
  statement): the physical limit of what its enqueue writes.

Besides the rates: each table's indexes, triggers and CHECKs (from the catalog) and
its COPY text per row; ``goal_of_copy``, 1.5x pgqueuer's rate as a fraction of our
table's COPY limit measured in the same round (above 1: out of reach for any client);
the server's CPU for our rows (the backend's scheduler CPU time
in ``/proc/<pid>/schedstat``, per 1,000 rows), this process's CPU per 1,000 rows, and
with ``--profile`` a cProfile of one round of ours. ``--ablate`` instead loads the
same rows with ``psql`` into copies of our table that each lack one index, the
CHECK constraints or the NOTIFY trigger (or has ``arcature_finished_idx`` full, as
before migration 0018, or the unique key as a partial unique index), and reports
what each costs per 1,000 rows: as ``psql``'s wall time and as the server backend's
CPU for the same COPY. ``--overlap`` instead times one call's three phases (every
chunk checked, rendered and sent; the instances made; the COPY ended, i.e. the wait
for the server's backlog), with this process's CPU and the backend's CPU at each
point, and alternates calls (ABBA) with the COPY alone in autocommit (as shipped)
and inside ``atomic()`` (a ``BEGIN`` and a ``COMMIT`` round trip more, as before).
``--one postgres --bare --calls N`` makes only N calls after the warm-up, for an
instruction count of the process under ``valgrind --tool=callgrind`` (N calls minus
none: the calls' own instructions, which the machine's load does not change).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import itertools
import json
import os
import pstats
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
NAME = os.environ.get("ARCATURE_DB_NAME", "arcature_enqueue_bulk")
URLS = {
    "sqlite": f"sqlite:///var/{NAME}.sqlite3",
    "postgres": f"postgres://arcature:arcature@127.0.0.1:5432/{NAME}",
    "mysql": f"mysql://arcature:arcature@127.0.0.1:3306/{NAME}",
}
PG_ENV = {**os.environ, "PGPASSWORD": "arcature"}
BATCH = 1000


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def backend_cpu_seconds(pid: int) -> float:
    """The CPU time a process on this host has run, in seconds: the scheduler's own
    count in nanoseconds (``/proc/<pid>/schedstat``), where the kernel keeps it.

    ``utime + stime`` (``/proc/<pid>/stat``) count clock ticks of 10 ms: over 20,000
    rows a resolution of 0.5 ms per 1,000, as large as one index's cost, so the
    ablation's variants came out equal or in the wrong order.
    """
    schedstat = Path(f"/proc/{pid}/schedstat")
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int(schedstat.read_text().split()[0]) / 1e9
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def psql(dbname: str, script: str) -> str:
    out = subprocess.run(
        ["psql", "-h", "127.0.0.1", "-U", "arcature", "-d", dbname, "-X", "-q", "-v",
         "ON_ERROR_STOP=1"],
        input=script, env=PG_ENV, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return out.stdout


class Ours:
    def __init__(self) -> None:
        from django.db import connection

        from benchmarks.benchapp.jobs import noop
        from django_arcature.models import Job

        self.noop = noop
        self.table = Job._meta.db_table
        self.connection = connection

    def clear(self) -> None:
        verb = "DELETE FROM" if self.connection.vendor == "sqlite" else "TRUNCATE TABLE"
        with self.connection.cursor() as cursor:
            cursor.execute(f"{verb} {self.table}")

    def backend_pid(self) -> int | None:
        if self.connection.vendor != "postgresql":
            return None
        with self.connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            return int(cursor.fetchone()[0])

    def run(self, jobs: int) -> dict[str, float]:
        """Rate, client CPU and server CPU (PostgreSQL) per 1,000 rows."""
        self.clear()
        pid = self.backend_pid()
        server = backend_cpu_seconds(pid) if pid else 0.0
        cpu = time.process_time()
        started = time.perf_counter()
        for _ in range(jobs // BATCH):
            self.noop.enqueue_many([[]] * BATCH)
        elapsed = time.perf_counter() - started
        result = {
            "rate": jobs / elapsed,
            "client_ms_per_1000": (time.process_time() - cpu) / jobs * 1000 * 1000,
        }
        if pid:
            result["server_ms_per_1000"] = (backend_cpu_seconds(pid) - server) / jobs * 1000 * 1000
        return result

    def dump(self, path: str) -> None:
        with (
            self.connection.cursor() as cursor,
            open(path, "wb") as out,
            cursor.cursor.copy(f"COPY {self.table} TO STDOUT") as stream,
        ):
            for chunk in stream:
                out.write(chunk)


def split_dump(path: str, directory: str) -> list[str]:
    """The dump in files of ``BATCH`` rows each (one ``\\copy`` each)."""
    lines = Path(path).read_bytes().splitlines(keepends=True)
    parts = []
    for index in range(0, len(lines), BATCH):
        part = os.path.join(directory, f"part{index // BATCH:05d}.copy")
        Path(part).write_bytes(b"".join(lines[index : index + BATCH]))
        parts.append(part)
    return parts


def psql_copy(dbname: str, table: str, parts: list[str]) -> float:
    """Rows per second of ``\\copy`` of every part, summed from psql's own timings."""
    return psql_copy_tables(dbname, {table: parts})


def psql_copy_tables(dbname: str, tables: dict[str, list[str]]) -> float:
    """Rows per second (rows of the first table) of ``\\copy`` of the i-th part of every
    table in one transaction per i, summed from psql's own timings.

    One table: each ``\\copy`` is its own transaction, as a bulk call is. Several (a
    pgqueuer enqueue writes its job rows and as many log rows in one statement): the
    parts of one batch go in between ``BEGIN`` and ``COMMIT``, and their times, the
    ``BEGIN``'s and the ``COMMIT``'s (its WAL flush) are all counted.
    """
    names = list(tables)
    script = [f"TRUNCATE {', '.join(names)};", "\\timing on"]
    count = len(tables[names[0]])
    for index in range(count):
        copies = [f"\\copy {name} FROM '{tables[name][index]}'" for name in names]
        script += copies if len(names) == 1 else ["BEGIN;", *copies, "COMMIT;"]
    out = psql(dbname, "\n".join(script) + "\n")
    times = [float(ms) for ms in re.findall(r"Time: ([0-9.]+) ms", out)]
    rows = sum(Path(part).read_bytes().count(b"\n") for part in tables[names[0]])
    return rows / (sum(times) / 1000)


def psql_dump(dbname: str, table: str, path: str) -> None:
    """``\\copy table TO path``: the rows as ``COPY`` text, for :func:`split_dump`."""
    psql(dbname, f"\\copy {table} TO '{path}'\n")


def schema_summary(dbname: str, tables: list[str]) -> dict[str, Any]:
    """What a row of each table enters: its indexes (with their definitions), triggers
    (with level and timing) and CHECK constraints, read from the catalog."""
    import psycopg

    dsn = f"postgresql://arcature:arcature@127.0.0.1:5432/{dbname}"
    summary: dict[str, Any] = {}
    with psycopg.connect(dsn, autocommit=True) as conn:
        for table in tables:
            indexes = conn.execute(
                "SELECT indexdef FROM pg_indexes WHERE tablename = %s ORDER BY indexname",
                [table],
            ).fetchall()
            triggers = conn.execute(
                "SELECT pg_get_triggerdef(oid) FROM pg_trigger "
                "WHERE tgrelid = %s::regclass AND NOT tgisinternal ORDER BY tgname",
                [table],
            ).fetchall()
            checks = conn.execute(
                "SELECT count(*) FROM pg_constraint WHERE conrelid = %s::regclass "
                "AND contype = 'c'",
                [table],
            ).fetchone()
            columns = conn.execute(
                "SELECT count(*) FROM pg_attribute WHERE attrelid = %s::regclass "
                "AND attnum > 0 AND NOT attisdropped",
                [table],
            ).fetchone()
            summary[table] = {
                "columns": columns[0] if columns else 0,
                "indexes": [row[0] for row in indexes],
                "triggers": [row[0] for row in triggers],
                "checks": checks[0] if checks else 0,
            }
    return summary


def bytes_per_row(parts: list[str]) -> float:
    """Mean size of one row's ``COPY`` text (what the server parses per row)."""
    data = [Path(part).read_bytes() for part in parts]
    return sum(len(d) for d in data) / sum(d.count(b"\n") for d in data)


class PgQueuer:
    """pgqueuer's bulk enqueue into its own database (schema from ``pgq install``)."""

    #: What one ``Queries.enqueue`` writes: each job row, and its ``queued`` log row.
    TABLES = ("pgqueuer", "pgqueuer_log")

    def __init__(self, dbname: str) -> None:
        import asyncio

        self.dbname = dbname
        self.dsn = f"postgresql://arcature:arcature@127.0.0.1:5432/{dbname}"
        self.loop = asyncio.new_event_loop()
        self.loop.run_until_complete(self._setup())

    async def _setup(self) -> None:
        import psycopg
        from pgqueuer.db import PsycopgDriver
        from pgqueuer.queries import Queries

        self.conn = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True)
        self.queries = Queries(PsycopgDriver(self.conn))
        with contextlib.suppress(Exception):  # already installed
            await self.queries.install()

    def version(self) -> str:
        from importlib.metadata import version

        return version("pgqueuer")

    def dump(self, directory: str) -> dict[str, list[str]]:
        """Each of :attr:`TABLES` as ``COPY`` text in parts of ``BATCH`` rows (after a
        :meth:`run`, which leaves its rows in place), for :func:`psql_copy_tables`."""
        parts = {}
        for table in self.TABLES:
            sub = os.path.join(directory, table)
            os.makedirs(sub, exist_ok=True)
            dump = os.path.join(sub, "rows.copy")
            psql_dump(self.dbname, table, dump)
            parts[table] = split_dump(dump, sub)
        return parts

    def run(self, jobs: int) -> dict[str, float]:
        """Rate, client CPU and server CPU per 1,000 rows, as :meth:`Ours.run`."""
        return self.loop.run_until_complete(self._run(jobs))

    async def _run(self, jobs: int) -> dict[str, float]:
        # Both: its enqueue writes a row to each (the log's ``queued`` row), and a log
        # left to grow round after round would make its later rounds dearer than ours.
        await self.conn.execute(f"TRUNCATE {', '.join(self.TABLES)}")
        pid = self.conn.info.backend_pid
        names, priorities = ["noop"] * BATCH, [0] * BATCH
        server = backend_cpu_seconds(pid)
        cpu = time.process_time()
        started = time.perf_counter()
        for _ in range(jobs // BATCH):
            # A fresh list per call, as a caller building its batch would.
            payloads: list[bytes | None] = [None] * BATCH
            await self.queries.enqueue(list(names), payloads, list(priorities))
        elapsed = time.perf_counter() - started
        return {
            "pgqueuer": jobs / elapsed,
            "pgqueuer_client_ms_per_1000": (time.process_time() - cpu) / jobs * 1000 * 1000,
            "pgqueuer_server_ms_per_1000": (backend_cpu_seconds(pid) - server) / jobs * 1000 * 1000,
        }


def ensure_pg_database(name: str) -> None:
    from benchmarks.run import ensure_database

    ensure_database(f"postgres://arcature:arcature@127.0.0.1:5432/{name}")


# --- the ablation: what each index, the CHECKs and the trigger cost a bulk load --------

ABLATE_DB = f"{NAME}_ablate"


def ablation(ours: Ours, jobs: int, rounds: int) -> list[dict[str, Any]]:
    """Per variant, psql ``\\copy`` of the same rows into a copy of our table without one
    index (or the CHECKs, or the trigger); the table as migrated alongside, each round."""
    ours.clear()
    for _ in range(jobs // BATCH):
        ours.noop.enqueue_many([[]] * BATCH)
    ensure_pg_database(ABLATE_DB)
    with tempfile.TemporaryDirectory() as directory:
        dump = os.path.join(directory, "rows.copy")
        ours.dump(dump)
        parts = split_dump(dump, directory)
        schema = subprocess.run(
            ["pg_dump", "-h", "127.0.0.1", "-U", "arcature", "-s", "-t", ours.table, NAME],
            env=PG_ENV, capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        schema = "\n".join(
            line
            for line in schema.splitlines()
            if not line.startswith(("\\restrict", "\\unrestrict", "CREATE TRIGGER"))
            and "set_config('search_path'" not in line
        )
        indexes = re.findall(r"CREATE (?:UNIQUE )?INDEX (\S+) ON", schema)
        constraints = re.findall(r"ADD CONSTRAINT (\S+) (?:UNIQUE|CHECK)", schema)
        variants: dict[str, str] = {"as migrated": ""}
        for index in indexes:
            variants[f"without index {index}"] = f"DROP INDEX {index};"
        uniques = re.findall(r"ADD CONSTRAINT (\S+) UNIQUE", schema)
        for name in uniques:
            variants[f"without unique constraint {name}"] = (
                f"ALTER TABLE {ours.table} DROP CONSTRAINT {name};"
            )
        if "arcature_finished_idx" in indexes:
            # What migration 0018 bought: the index as it was, pending rows included.
            variants["arcature_finished_idx full (as before 0018)"] = (
                "DROP INDEX arcature_finished_idx;"
                f"CREATE INDEX arcature_finished_idx ON {ours.table} (status, finished_at);"
            )
        for name in uniques:
            # The candidate left alone: NULL keys (every row without one) out of the index.
            variants[f"{name} as a partial unique index (no NULL keys)"] = (
                f"ALTER TABLE {ours.table} DROP CONSTRAINT {name};"
                f"CREATE UNIQUE INDEX {name} ON {ours.table} (unique_key) "
                "WHERE unique_key IS NOT NULL;"
            )
        checks = [name for name in constraints if name not in uniques]
        variants["without the CHECK constraints"] = "".join(
            f"ALTER TABLE {ours.table} DROP CONSTRAINT {name};" for name in checks
        )
        variants["without the NOTIFY trigger"] = (
            f"DROP TRIGGER arcature_notify_inserted ON {ours.table};"
        )
        variants["primary key only"] = (
            "".join(f"DROP INDEX {index};" for index in indexes)
            + "".join(f"ALTER TABLE {ours.table} DROP CONSTRAINT {name};" for name in constraints)
            + f"DROP TRIGGER arcature_notify_inserted ON {ours.table};"
        )
        results: dict[str, list[float]] = {name: [] for name in variants}
        cpu: dict[str, list[float]] = {name: [] for name in variants}
        for _ in range(rounds):
            for name, change in variants.items():
                psql(
                    ABLATE_DB,
                    "DROP SCHEMA public CASCADE; CREATE SCHEMA public;\n"
                    + trigger_function_sql()
                    + schema
                    + "\n"
                    + f"CREATE TRIGGER arcature_notify_inserted AFTER INSERT ON {ours.table} "
                    "FOR EACH STATEMENT EXECUTE FUNCTION arcature_notify_inserted();\n" + change,
                )
                results[name].append(psql_copy(ABLATE_DB, ours.table, parts))
                cpu[name].append(server_cpu_of_copy(ABLATE_DB, ours.table, parts))
    base = statistics.median(results["as migrated"])
    rows = []
    for name, rates in results.items():
        rate = statistics.median(rates)
        rows.append(
            {
                "variant": name,
                "rate": rate,
                "ms_per_1000": 1000 / rate * 1000,
                "saves_ms_per_1000": 1000 / base * 1000 - 1000 / rate * 1000,
                "server_cpu_ms_per_1000": statistics.median(cpu[name]),
                "server_cpu_saves_ms_per_1000": statistics.median(cpu["as migrated"])
                - statistics.median(cpu[name]),
            }
        )
    return rows


def server_cpu_of_copy(dbname: str, table: str, parts: list[str]) -> float:
    """The backend's CPU (ms per 1,000 rows) for ``COPY`` of every part, each part its
    own transaction, the bytes sent as they are: a figure that a busy machine moves far
    less than a rate (the CPU of the rows, not the wait for a core)."""
    return server_cpu_of_copy_tables(dbname, {table: parts})


def server_cpu_of_copy_tables(dbname: str, tables: dict[str, list[str]]) -> float:
    """As :func:`server_cpu_of_copy`, the i-th part of every table in one transaction
    (see :func:`psql_copy_tables`); per 1,000 rows of the first table."""
    import psycopg

    dsn = f"postgresql://arcature:arcature@127.0.0.1:5432/{dbname}"
    names = list(tables)
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"TRUNCATE {', '.join(names)}")
        pid = conn.info.backend_pid
        before = backend_cpu_seconds(pid)
        rows = 0
        for index in range(len(tables[names[0]])):
            with conn.transaction():
                for name in names:
                    data = Path(tables[name][index]).read_bytes()
                    if name == names[0]:
                        rows += data.count(b"\n")
                    with conn.cursor().copy(f"COPY {name} FROM STDIN") as copy:
                        copy.write(data)
        spent = backend_cpu_seconds(pid) - before
    return spent / rows * 1000 * 1000


def trigger_function_sql() -> str:
    from django_arcature.migrations import __path__ as migrations_path

    text = Path(migrations_path[0], "0002_postgresql_notify_trigger.py").read_text()
    body = text.split('CREATE = f"""', 1)[1].split("DROP TRIGGER", 1)[0]
    return body.replace("{CHANNEL}", "arcature_jobs")


# --- overlap: where one call's time goes ---------------------------------------------------


def overlap(ours: Ours, batch: int, calls: int) -> dict[str, Any]:
    """Medians per 1,000 rows over ``calls`` calls: each phase of the streamed COPY (wall,
    client CPU, the backend's CPU consumed by the end of it), then the COPY alone in
    autocommit against the same call inside ``atomic()``, alternated ABBA in one process."""
    from django_arcature.db import postgresql
    from django_arcature.db.postgresql import PostgreSQLDriver, _chunk_text, _rows_per_write

    pid = ours.backend_pid()
    assert pid is not None
    marks: list[dict[str, float]] = []
    shipped = PostgreSQLDriver.stream_rows

    def timed_stream_rows(self: Any, model: Any, bulk: Any, batch_size: int) -> list[Any]:
        """:meth:`PostgreSQLDriver.stream_rows` (psycopg 3, plain rows) with a clock at each
        phase's end; the statements and their order are the shipped ones."""
        connection = self.connection
        table = connection.ops.quote_name(model._meta.db_table)
        with connection.cursor() as cursor:
            raw = cursor.cursor
            text = _chunk_text(connection, raw, model, bulk)
            points = [(time.perf_counter(), time.process_time(), backend_cpu_seconds(pid))]
            with (
                connection.wrap_database_errors,
                raw.copy(f"COPY {table} ({', '.join(text.columns)}) FROM STDIN") as stream,
            ):
                sent = []
                for chunk in bulk.chunks(_rows_per_write(len(bulk)), saved_on=self.using):
                    stream.write(text.text(chunk))
                    sent.append(chunk)
                points.append((time.perf_counter(), time.process_time(), backend_cpu_seconds(pid)))
                for chunk in sent:
                    chunk.make()
                points.append((time.perf_counter(), time.process_time(), backend_cpu_seconds(pid)))
            points.append((time.perf_counter(), time.process_time(), backend_cpu_seconds(pid)))
        scale = 1000 * 1000 / len(bulk)  # seconds per call -> ms per 1,000 rows
        mark: dict[str, float] = {}
        for name, (start, end) in zip(
            ("send", "make", "end"), itertools.pairwise(points), strict=True
        ):
            mark[f"{name}_wall"] = (end[0] - start[0]) * scale
            mark[f"{name}_client"] = (end[1] - start[1]) * scale
            mark[f"{name}_server_by_end"] = (end[2] - points[0][2]) * scale
        marks.append(mark)
        rows: list[Any] = bulk.rows
        return rows

    ours.clear()
    postgresql.PostgreSQLDriver.stream_rows = timed_stream_rows  # type: ignore[method-assign]
    try:
        for index in range(calls):
            if index and index % max(1, 20_000 // batch) == 0:
                ours.clear()
            ours.noop.enqueue_many([[]] * batch)
    finally:
        postgresql.PostgreSQLDriver.stream_rows = shipped  # type: ignore[method-assign]
    result: dict[str, Any] = {
        key: statistics.median(mark[key] for mark in marks) for key in marks[0]
    }
    one_statement = PostgreSQLDriver.streams_in_one_statement
    modes: dict[str, dict[str, list[float]]] = {
        mode: {"wall": [], "client": [], "server": []} for mode in ("alone", "atomic")
    }
    ours.clear()
    try:
        for index in range(2 * calls):
            if index and index % max(2, 20_000 // batch) == 0:
                ours.clear()
            mode = ("alone", "atomic")[(index + index // 2) % 2]  # ABBA
            PostgreSQLDriver.streams_in_one_statement = (  # type: ignore[method-assign]
                one_statement if mode == "alone" else (lambda self, bulk: False)
            )
            server, cpu, started = (
                backend_cpu_seconds(pid),
                time.process_time(),
                time.perf_counter(),
            )
            ours.noop.enqueue_many([[]] * batch)
            spent = modes[mode]
            spent["wall"].append((time.perf_counter() - started) / batch * 1e6)
            spent["client"].append((time.process_time() - cpu) / batch * 1e6)
            spent["server"].append((backend_cpu_seconds(pid) - server) / batch * 1e6)
    finally:
        PostgreSQLDriver.streams_in_one_statement = one_statement  # type: ignore[method-assign]
    for mode, spent in modes.items():
        for figure, values in spent.items():
            result[f"{mode}_{figure}"] = statistics.median(values)
    result["alone_faster_in_pairs"] = sum(
        alone < atomic
        for alone, atomic in zip(modes["alone"]["wall"], modes["atomic"]["wall"], strict=True)
    ) / len(modes["alone"]["wall"])
    ours.clear()
    return result


# --- the child: one database ------------------------------------------------------------


def child(db: str, options: argparse.Namespace) -> dict[str, Any]:
    global BATCH
    BATCH = options.batch
    from benchmarks.run import boot

    boot(URLS[db])
    ours = Ours()
    ours.run(BATCH * 2)  # warm up
    result: dict[str, Any] = {"db": db, "batch": BATCH, "load_before": load_average()}
    if options.ablate:
        result["ablation"] = ablation(ours, options.jobs, options.rounds)
        result["load_after"] = load_average()
        return result
    if options.bare:
        # Nothing but the calls, for an instruction count of the whole process
        # (``valgrind --tool=callgrind``): its count with --calls N minus with --calls 0.
        ours.clear()
        for index in range(options.calls):
            if index and index % max(1, 20_000 // BATCH) == 0:
                ours.clear()
            ours.noop.enqueue_many([[]] * BATCH)
        ours.clear()
        return result
    if options.overlap:
        result["overlap"] = overlap(ours, BATCH, options.calls)
        result["load_after"] = load_average()
        return result
    peer = None
    if db == "postgres" and not options.no_pgqueuer:
        try:
            import pgqueuer  # noqa: F401
        except ImportError:
            peer = None
        else:
            ensure_pg_database(f"{NAME}_pgqueuer")
            peer = PgQueuer(f"{NAME}_pgqueuer")
            peer.run(BATCH * 2)
            result["pgqueuer_version"] = peer.version()
    rounds: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as directory:
        parts: list[str] = []
        peer_parts: dict[str, list[str]] = {}
        forward = ["ours", "copy", "pgqueuer", "pgqueuer_copy"]
        for index in range(options.rounds):
            measured: dict[str, Any] = {}
            for contender in forward if index % 2 == 0 else forward[::-1]:
                if contender == "ours":
                    measured.update(ours.run(options.jobs))
                elif contender == "copy" and db == "postgres":
                    if not parts:
                        ours.run(options.jobs)
                        dump = os.path.join(directory, "rows.copy")
                        ours.dump(dump)
                        parts = split_dump(dump, directory)
                    measured["copy"] = psql_copy(NAME, ours.table, parts)
                    measured["copy_server_ms_per_1000"] = server_cpu_of_copy(
                        NAME, ours.table, parts
                    )
                elif contender == "pgqueuer" and peer is not None:
                    measured.update(peer.run(options.jobs))
                elif contender == "pgqueuer_copy" and peer is not None:
                    if not peer_parts:
                        peer.run(options.jobs)
                        peer_parts = peer.dump(os.path.join(directory, "pgqueuer"))
                    # Its job table alone (as "copy" is ours), then with the log rows
                    # its enqueue writes in the same transaction: its own limit.
                    alone = {"pgqueuer": peer_parts["pgqueuer"]}
                    measured["pgqueuer_copy"] = psql_copy_tables(peer.dbname, alone)
                    measured["pgqueuer_copy_server_ms_per_1000"] = server_cpu_of_copy_tables(
                        peer.dbname, alone
                    )
                    measured["pgqueuer_copy_with_log"] = psql_copy_tables(peer.dbname, peer_parts)
                    measured["pgqueuer_copy_with_log_server_ms_per_1000"] = (
                        server_cpu_of_copy_tables(peer.dbname, peer_parts)
                    )
            rounds.append(measured)
        if parts:
            result["copy_bytes_per_row"] = bytes_per_row(parts)
            result["schema"] = schema_summary(NAME, [ours.table])
        if peer_parts and peer is not None:
            result["pgqueuer_copy_bytes_per_row"] = {
                table: bytes_per_row(table_parts) for table, table_parts in peer_parts.items()
            }
            result["pgqueuer_schema"] = schema_summary(peer.dbname, list(PgQueuer.TABLES))
    if options.profile:
        profiler = cProfile.Profile()
        ours.clear()
        profiler.enable()
        for _ in range(options.jobs // BATCH):
            ours.noop.enqueue_many([[]] * BATCH)
        profiler.disable()
        buffer = io.StringIO()
        pstats.Stats(profiler, stream=buffer).sort_stats("tottime").print_stats(options.top)
        result["profile"] = buffer.getvalue()
    ours.clear()
    result["rounds"] = rounds
    for key in rounds[0]:
        result[key] = statistics.median(r[key] for r in rounds)
    if "copy" in result:
        result["of_copy"] = statistics.median(r["rate"] / r["copy"] for r in rounds)
    if "pgqueuer" in result:
        cpu = [
            (r["pgqueuer_client_ms_per_1000"] + r["pgqueuer_server_ms_per_1000"])
            / (r["client_ms_per_1000"] + r["server_ms_per_1000"])
            for r in rounds
        ]
        result["cpu_vs_pgqueuer"] = statistics.median(cpu)  # >1: we spend less CPU per row
        ratios = [r["rate"] / r["pgqueuer"] for r in rounds]
        result["vs_pgqueuer"] = statistics.median(ratios)
        result["vs_pgqueuer_range"] = [min(ratios), max(ratios)]
    if "copy" in result and "pgqueuer_copy" in result:
        # The physical question: 1.5x pgqueuer as a fraction of our table's COPY limit
        # (above 1: out of reach for any client), and each table's limit side by side.
        result["goal_of_copy"] = statistics.median(1.5 * r["pgqueuer"] / r["copy"] for r in rounds)
        result["copy_vs_pgqueuer_copy"] = statistics.median(
            r["copy"] / r["pgqueuer_copy"] for r in rounds
        )
        result["copy_vs_pgqueuer_copy_with_log"] = statistics.median(
            r["copy"] / r["pgqueuer_copy_with_log"] for r in rounds
        )
        result["pgqueuer_of_its_copy"] = statistics.median(
            r["pgqueuer"] / r["pgqueuer_copy_with_log"] for r in rounds
        )
    result["load_after"] = load_average()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", default="postgres", help="comma-separated list")
    parser.add_argument("--jobs", type=int, default=20_000, help="rows per timed stretch")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=BATCH, help="rows per call (and per COPY)")
    parser.add_argument("--ablate", action="store_true", help="per-index/trigger cost (psql)")
    parser.add_argument("--profile", action="store_true", help="cProfile one round of ours")
    parser.add_argument("--overlap", action="store_true", help="one call's phases (PostgreSQL)")
    parser.add_argument("--calls", type=int, default=40, help="calls per --overlap/--bare figure")
    parser.add_argument("--bare", action="store_true", help="only --calls calls (callgrind)")
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--no-pgqueuer", action="store_true")
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
        result = json.loads(lines[-1].removeprefix("RESULT "))
        profile = result.pop("profile", "")
        print(json.dumps(result, indent=1), flush=True)
        if profile:
            print(profile)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()

"""django-arcature, the project's own queue, as benchmarks/peers.py measures every queue.

Runs in the project's interpreter with ``benchmarks.settings`` on a database of its
own. Enqueue through the ``@job`` handle (``peer_noop.enqueue(key)`` and
``enqueue_many``), workers are ``manage.py arcature_worker`` at its defaults.
Beside the four figures, two only ours has: the time an enqueue adds to a
request's own transaction, and the physical limit of the bulk figure (``COPY`` of
the same rows into the same table from ``psql``).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .harness import (
    ROOT,
    Peer,
    database_name,
    ensure_pg_database,
    package_version,
    percentile,
    pg_dsn,
    pg_server_version,
    pg_transactions,
)


class Arcature(Peer):
    name = "arcature"
    label = "django-arcature (ours)"
    caveats = {
        "concurrency": "4 threads per worker process (CONCURRENCY default)",
        "finished jobs": "kept (succeeded rows stay until the retention sweep)",
        "wake-up": "LISTEN/NOTIFY plus same-host wake-up hints; 1 s poll fallback",
        "bulk call": "enqueue_many (one streamed COPY on PostgreSQL)",
    }

    def __init__(self) -> None:
        self.db = database_name(self.name)
        url = pg_dsn(self.db).replace("postgresql://", "postgres://", 1)
        os.environ["DATABASE_URL"] = url
        os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.settings"

    def versions(self) -> dict[str, str]:
        return {
            "django-arcature": package_version("django-arcature"),
            "Django": package_version("Django"),
            "psycopg": package_version("psycopg"),
            "PostgreSQL": pg_server_version(),
        }

    def setup(self) -> None:
        ensure_pg_database(self.db)
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        from benchmarks.benchapp.jobs import peer_noop
        from django_arcature.models import Job

        self.job = peer_noop
        self.table = Job._meta.db_table

    def clear(self) -> None:
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute(f"TRUNCATE TABLE {connection.ops.quote_name(self.table)}")

    def enqueue_one(self, key: int) -> None:
        self.job.enqueue(key)

    def enqueue_batch(self, keys: list[int]) -> None:
        self.job.enqueue_many([[key] for key in keys])

    def worker_argv(self) -> list[str]:
        return [sys.executable, "-m", "django", "arcature_worker"]

    def worker_env(self) -> dict[str, str]:
        return {
            "DATABASE_URL": os.environ["DATABASE_URL"],
            "DJANGO_SETTINGS_MODULE": "benchmarks.settings",
        }

    def idle_counter(self) -> float | None:
        return float(pg_transactions(self.db))

    def extras(self, options: Any) -> dict[str, Any]:
        from django.db import connection

        from benchmarks.our_insert import our_insert_sql, with_fresh_id

        sql, ident = our_insert_sql(self.job, (10**9,))  # as enqueue_one's keys

        def bare_insert(key: int) -> None:
            with connection.cursor() as cursor:
                cursor.execute(with_fresh_id(sql, ident))

        in_tx = [self.in_transaction(options.tx_pairs) for _ in range(options.rounds)]
        bare_tx = [
            self.in_transaction(options.tx_pairs, bare_insert) for _ in range(options.rounds)
        ]
        copies = [self.copy_rate(options.jobs) for _ in range(options.rounds)]
        singles = [self.single_floors(options.single, sql, ident) for _ in range(options.rounds)]
        return {
            "in_tx_call_p50_us": statistics.median(r["call_p50"] for r in in_tx),
            "in_tx_call_p99_us": statistics.median(r["call_p99"] for r in in_tx),
            "in_tx_added_p50_us": statistics.median(r["added_p50"] for r in in_tx),
            "in_tx_added_p99_us": statistics.median(r["added_p99"] for r in in_tx),
            "copy_rate": statistics.median(copies),
            "floor_in_tx_added_p50_us": statistics.median(r["added_p50"] for r in bare_tx),
            "floor_in_tx_added_p99_us": statistics.median(r["added_p99"] for r in bare_tx),
            "floor_single": statistics.median(r["ours"] for r in singles),
            "floor_single_any": statistics.median(r["any"] for r in singles),
            **self.pickup_floor(options.samples),
        }

    def single_floors(self, count: int, sql: str, ident: str) -> dict[str, float]:
        """The limits of one-by-one enqueue, in rows/s, on a psycopg connection of its own
        in autocommit (one round trip and one durable commit per row, nothing of ours or
        Django's around it): ``ours``, the very INSERT our ``enqueue()`` sends, into our
        table with its indexes and trigger; ``any``, a row of two columns into a table
        with one index besides its key, as lean as a queue's row can be."""
        from benchmarks.our_insert import with_fresh_id
        from benchmarks.pickup_floor import _connect, create_table

        url = os.environ["DATABASE_URL"]
        create_table(url)
        raw = _connect(url)
        try:
            self.clear()
            started = time.perf_counter()
            for _ in range(count):
                raw.execute(with_fresh_id(sql, ident)).fetchone()
            ours = count / (time.perf_counter() - started)
            started = time.perf_counter()
            for _ in range(count):
                raw.execute("INSERT INTO pickup_floor (status) VALUES ('pending')")
            lean = count / (time.perf_counter() - started)
        finally:
            raw.close()
            self.clear()
        return {"ours": ours, "any": lean}

    def pickup_floor(self, samples: int) -> dict[str, float]:
        """The limit of an idle pickup on this machine, in ms (``benchmarks/pickup_floor.py``):
        a one-row INSERT and NOTIFY from one process, and a LISTENing process of its own
        woken by it and claiming the row in one ``UPDATE … RETURNING`` (its commit relaxed,
        as ours is); with its parts: the producer's commit, the delivery, the claim."""
        from benchmarks.pickup_floor import commit_cost, create_table, floor_run

        url = os.environ["DATABASE_URL"]
        create_table(url)
        run = floor_run(url, samples, relaxed=True)
        cost = commit_cost(url, min(samples, 30))
        return {
            "floor_pickup_ms": run["floor"],
            "floor_pickup_commit_ms": run["commit"],
            "floor_pickup_delivery_ms": run["delivery"],
            "floor_pickup_claim_ms": run["claim_round_trip"],
            "floor_select_1_ms": cost["select_1_ms"],
        }

    def in_transaction(
        self, count: int, enqueue: Callable[[int], object] | None = None
    ) -> dict[str, float]:
        """What an enqueue adds to a request's own transaction, in microseconds.

        Pairs of transactions, alternating: the request's own statement (an UPDATE of
        one row of a table of its own) and commit, with and without one enqueue
        inside. ``call`` is the enqueue call alone, inside the open transaction;
        ``added`` is the whole transaction with it minus the one just before
        without, commit (and the NOTIFY and wake-up hint it sends) included.
        ``enqueue`` replaces our ``enqueue()`` (the floor: the bare INSERT it sends).
        """
        from django.db import connection, transaction

        call_enqueue: Callable[[int], object] = enqueue or self.job.enqueue
        with connection.cursor() as cursor:
            cursor.execute(
                "CREATE TABLE IF NOT EXISTS peers_request_row (id int PRIMARY KEY, hits int)"
            )
            cursor.execute(
                "INSERT INTO peers_request_row VALUES (1, 0) ON CONFLICT (id) DO NOTHING"
            )
        self.clear()
        calls: list[float] = []
        added: list[float] = []
        key = 10**9
        for index in range(count + 20):
            started = time.perf_counter()
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("UPDATE peers_request_row SET hits = hits + 1 WHERE id = 1")
            without = time.perf_counter() - started
            started = time.perf_counter()
            with transaction.atomic():
                with connection.cursor() as cursor:
                    cursor.execute("UPDATE peers_request_row SET hits = hits + 1 WHERE id = 1")
                call_started = time.perf_counter()
                call_enqueue(key + index)
                call = time.perf_counter() - call_started
            with_enqueue = time.perf_counter() - started
            if index >= 20:  # the first pairs warm the path up
                calls.append(call * 1e6)
                added.append((with_enqueue - without) * 1e6)
        calls.sort()
        added.sort()
        return {
            "call_p50": statistics.median(calls),
            "call_p99": percentile(calls, 99),
            "added_p50": statistics.median(added),
            "added_p99": percentile(added, 99),
        }

    def copy_rate(self, jobs: int) -> float:
        """Rows/s of ``COPY ... FROM STDIN`` through ``psql`` of the rows our bulk enqueue
        wrote (ids included: ours are assigned by the client, the column has no
        default), into the same table with its indexes and trigger: the physical limit."""
        from django.db import connection

        self.clear()
        self.job.enqueue_many([[key] for key in range(jobs)])
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) FROM pg_attribute "
                "WHERE attrelid = %s::regclass AND attnum > 0 AND NOT attisdropped",
                [self.table],
            )
            columns = cursor.fetchone()[0]
        parts = urlsplit(os.environ["DATABASE_URL"])
        env = {
            **os.environ,
            "PGHOST": parts.hostname or "127.0.0.1",
            "PGPORT": str(parts.port or 5432),
            "PGUSER": parts.username or "",
            "PGPASSWORD": parts.password or "",
            "PGDATABASE": parts.path.lstrip("/"),
        }
        with tempfile.TemporaryDirectory() as folder:
            rows = Path(folder) / "rows.copy"
            with open(rows, "wb") as out:
                subprocess.run(
                    ["psql", "-X", "-q", "-c", f"COPY {self.table} ({columns}) TO STDOUT"],
                    env=env,
                    stdout=out,
                    check=True,
                )
            self.clear()
            with open(rows, "rb") as data:
                done = subprocess.run(
                    [
                        "psql",
                        "-X",
                        "-q",
                        "-c",
                        "\\timing on",
                        "-c",
                        f"COPY {self.table} ({columns}) FROM STDIN",
                    ],
                    env=env,
                    stdin=data,
                    capture_output=True,
                    text=True,
                    check=False,
                )
        if done.returncode:
            raise RuntimeError(f"psql COPY failed: {done.stderr.strip()}")
        timed = [line for line in done.stdout.splitlines() if line.startswith("Time:")]
        if not timed:
            raise RuntimeError(f"psql printed no timing: {done.stdout!r} {done.stderr!r}")
        millis = float(timed[-1].split()[1])
        self.clear()
        return jobs / (millis / 1000)


ADAPTER = Arcature
__all__ = ["ADAPTER", "ROOT"]

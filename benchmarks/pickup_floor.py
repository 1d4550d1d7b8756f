"""The physical floor of an idle pickup on this machine, without django-arcature.

    .venv/bin/python benchmarks/pickup_floor.py --db postgres,mysql,sqlite --samples 60

What the queue's own pickup (``benchmarks/pickup.py``) is compared with. Two
processes and a scratch table of two columns (``pickup_floor``, in the benchmark
database ``ARCATURE_BENCH_DB_NAME``, default ``arcature_worker_bench``):

* the producer (this process) inserts one row in autocommit, and wakes the consumer:
  on PostgreSQL by a ``NOTIFY`` in the same transaction (one simple-query round
  trip: ``INSERT …; NOTIFY …``), elsewhere by one datagram on a Unix socket sent
  once the commit has returned (the way the worker's same-host hints do);
* the consumer (a child process) waits for that wake-up and claims the row with
  the fewest statements the database allows: one ``UPDATE … RETURNING`` on
  PostgreSQL and SQLite; ``START TRANSACTION``, ``SELECT … FOR UPDATE SKIP LOCKED``,
  ``UPDATE``, ``COMMIT`` on MariaDB (which has no ``UPDATE … RETURNING``).

Per sample: from the producer's call to the consumer's claim returning (the floor),
the producer's commit, the delivery (commit returned to the consumer woken) and the
claim's round trip. On PostgreSQL the claim runs twice per sample setting, with
``synchronous_commit`` on and off (what ``db/relaxed_claim.py`` does), and a loop of
single-row commits with it on and off says what the WAL flush alone costs (the
database's own latency: ``pg_test_fsync`` measures the disk the same way). Both
processes stamp ``time.time_ns`` (``CLOCK_REALTIME``, one host).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import select
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
CHANNEL = "pickup_floor"


def _connect(url: str, autocommit: bool = True) -> Any:
    parts = urlsplit(url)
    if parts.scheme.startswith("postgres"):
        import psycopg

        return psycopg.connect(
            host=parts.hostname,
            port=parts.port,
            user=parts.username,
            password=parts.password,
            dbname=parts.path.lstrip("/"),
            autocommit=autocommit,
        )
    if parts.scheme.startswith("mysql"):
        import MySQLdb

        conn = MySQLdb.connect(
            host=parts.hostname,
            port=parts.port,
            user=parts.username,
            password=parts.password,
            database=parts.path.lstrip("/"),
        )
        conn.autocommit(autocommit)
        return conn
    import sqlite3

    path = ROOT / parts.path.lstrip("/")
    conn = sqlite3.connect(path, isolation_level=None if autocommit else "DEFERRED")
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA busy_timeout=5000")
    conn.execute("PRAGMA synchronous=NORMAL")  # as the settings of tests/dburl.py
    return conn


def _vendor(url: str) -> str:
    scheme = urlsplit(url).scheme
    return "postgres" if scheme.startswith("postgres") else scheme.split("+")[0]


def _execute(conn: Any, sql: str) -> Any:
    """One statement on any of the three drivers; the cursor (rows read by the caller)."""
    cursor = conn.cursor()
    cursor.execute(sql)
    return cursor


def create_table(url: str) -> None:
    conn = _connect(url)
    vendor = _vendor(url)
    _execute(conn, "DROP TABLE IF EXISTS pickup_floor")
    if vendor == "postgres":
        _execute(conn, "CREATE TABLE pickup_floor (id bigserial PRIMARY KEY, status text NOT NULL)")
    elif vendor == "mysql":
        _execute(
            conn,
            "CREATE TABLE pickup_floor (id bigint AUTO_INCREMENT PRIMARY KEY, "
            "status varchar(16) NOT NULL, KEY (status, id)) ENGINE=InnoDB",
        )
    else:
        _execute(conn, "CREATE TABLE pickup_floor (id integer PRIMARY KEY, status text NOT NULL)")
    if vendor != "mysql":
        _execute(conn, "CREATE INDEX pickup_floor_status ON pickup_floor (status, id)")
    conn.close()


def _claim(conn: Any, vendor: str) -> Any:
    if vendor == "mysql":
        cursor = conn.cursor()
        cursor.execute("START TRANSACTION")
        cursor.execute(
            "SELECT id FROM pickup_floor WHERE status = 'pending' ORDER BY id LIMIT 1 "
            "FOR UPDATE SKIP LOCKED"
        )
        row = cursor.fetchone()
        if row is not None:
            cursor.execute("UPDATE pickup_floor SET status = 'running' WHERE id = %s", row)
        cursor.execute("COMMIT")
        return row
    lock = " FOR UPDATE SKIP LOCKED" if vendor == "postgres" else ""
    cursor = _execute(
        conn,
        "UPDATE pickup_floor SET status = 'running' WHERE id = (SELECT id FROM pickup_floor "
        f"WHERE status = 'pending' ORDER BY id LIMIT 1{lock}) RETURNING id",
    )
    return cursor.fetchone()


def consumer(url: str, sock_path: str, relaxed: bool) -> None:
    """Wait for each wake-up, claim, print one JSON line per claim (the child process)."""
    vendor = _vendor(url)
    claimer = _connect(url)
    if vendor == "postgres" and relaxed:
        _execute(claimer, "SET synchronous_commit = off")
    if vendor == "postgres":
        listener = _connect(url)
        _execute(listener, f"LISTEN {CHANNEL}")
        wait_on = listener.pgconn.socket
        receiver = None
    else:
        receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        receiver.bind(sock_path)
        wait_on = receiver.fileno()
    print("READY", flush=True)
    while True:
        ready, _, _ = select.select([wait_on, sys.stdin], [], [], 30)
        woke = time.time_ns()
        if sys.stdin in ready or not ready:
            return
        if receiver is not None:
            receiver.recv(64)
        else:
            listener.pgconn.consume_input()
            while listener.pgconn.notifies() is not None:
                pass
        sent = time.time_ns()
        row = _claim(claimer, vendor)
        back = time.time_ns()
        print(json.dumps({"woke": woke, "sent": sent, "back": back, "row": row}), flush=True)


def _producer_statement(vendor: str) -> str:
    if vendor == "postgres":
        return f"INSERT INTO pickup_floor (status) VALUES ('pending'); NOTIFY {CHANNEL}"
    return "INSERT INTO pickup_floor (status) VALUES ('pending')"


def floor_run(url: str, samples: int, relaxed: bool) -> dict[str, float]:
    vendor = _vendor(url)
    folder = tempfile.mkdtemp(prefix="pickup-floor-")
    sock_path = os.path.join(folder, "wake.sock")
    child = subprocess.Popen(
        [sys.executable, __file__, "--consumer", url, sock_path, "1" if relaxed else "0"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    assert child.stdin is not None
    if child.stdout.readline().strip() != "READY":
        raise SystemExit("the floor's consumer did not start")
    producer = _connect(url)
    hint = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    statement = _producer_statement(vendor)
    rows: list[dict[str, float]] = []
    try:
        time.sleep(0.5)
        for _ in range(samples):
            time.sleep(random.uniform(0.2, 0.4))
            call = time.time_ns()
            _execute(producer, statement)
            committed = time.time_ns()
            if vendor != "postgres":
                hint.sendto(b"x", sock_path)
            line = json.loads(child.stdout.readline())
            if line["row"] is None:  # woken before the row was visible: not a sample
                continue
            rows.append(
                {
                    "floor": (line["back"] - call) / 1e6,
                    "commit": (committed - call) / 1e6,
                    "delivery": (line["woke"] - committed) / 1e6,
                    "claim_round_trip": (line["back"] - line["sent"]) / 1e6,
                }
            )
    finally:
        child.stdin.close()
        child.wait(10)
        producer.close()
        hint.close()
        Path(sock_path).unlink(missing_ok=True)
        os.rmdir(folder)
    return {key: statistics.median(r[key] for r in rows) for key in rows[0]} | {
        "samples": len(rows)
    }


def commit_cost(url: str, count: int) -> dict[str, float]:
    """Median ms of a one-row INSERT's commit, with the WAL flush and (PostgreSQL) without."""
    vendor = _vendor(url)
    conn = _connect(url)
    out = {}
    settings = ("on", "off") if vendor == "postgres" else ("on",)
    for setting in settings:
        if vendor == "postgres":
            _execute(conn, f"SET synchronous_commit = {setting}")
        times = []
        for _ in range(count):
            started = time.perf_counter_ns()
            _execute(conn, "INSERT INTO pickup_floor (status) VALUES ('done')")
            times.append((time.perf_counter_ns() - started) / 1e6)
            time.sleep(0.01)
        out[f"insert_commit_sync_{setting}_ms"] = statistics.median(times)
    times = []
    for _ in range(count):
        started = time.perf_counter_ns()
        _execute(conn, "SELECT 1").fetchall()
        times.append((time.perf_counter_ns() - started) / 1e6)
    out["select_1_ms"] = statistics.median(times)
    conn.close()
    return out


def measure(url: str, samples: int) -> dict[str, float]:
    """One floor measurement, flat (for ``benchmarks/pickup.py --floor``), in milliseconds.

    ``pickup_ms`` and its steps are the floor with the claim committed as ours is (relaxed on
    PostgreSQL, where ``pickup_sync_claim_ms`` is the floor with the claim's WAL flush);
    ``commit_*`` the one-row commit alone; ``select_1_ms`` a bare round trip.
    """
    relaxed = _vendor(url) == "postgres"
    run = floor_run(url, samples, relaxed=relaxed)
    names = {"floor": "pickup", "commit": "commit", "delivery": "delivery"}
    flat = {f"{names.get(key, key)}_ms": value for key, value in run.items() if key != "samples"}
    if relaxed:
        flat["pickup_sync_claim_ms"] = floor_run(url, samples, relaxed=False)["floor"]
    for key, value in commit_cost(url, samples).items():
        flat[key] = value
    return flat


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", default="postgres,mysql,sqlite", help="comma-separated list")
    parser.add_argument("--samples", type=int, default=60, help="pickups per setting")
    parser.add_argument("--consumer", nargs=3, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.consumer:
        url, sock_path, relaxed = options.consumer
        consumer(url, sock_path, relaxed == "1")
        return
    from benchmarks.run import URLS, ensure_database, load_average

    for db in options.db.split(","):
        url = URLS[db]
        ensure_database(url)
        create_table(url)
        result: dict[str, Any] = {"db": db, "load_before": load_average()}
        result["commit"] = commit_cost(url, options.samples)
        result["floor_claim_sync"] = floor_run(url, options.samples, relaxed=False)
        if _vendor(url) == "postgres":
            result["floor_claim_relaxed"] = floor_run(url, options.samples, relaxed=True)
        result["load_after"] = load_average()
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()

"""What an idle PostgreSQL claim spends above the floor's one-statement claim, layer by layer.

    ARCATURE_BENCH_DB_NAME=arc_pickup_bench .venv/bin/python benchmarks/pickup_claim.py

The pickup break-down (``benchmarks/pickup.py --floor``) showed our claim's round trip
at 1.05 ms against the floor's 0.36 ms on an idle machine. This script takes one
committed pending job at a time and claims it in each of these ways, the ways taken
in turn for every sample (so each pair of figures is measured under the same load):

* ``gate``: what the worker's main thread calls, ``QueueGate.claim`` (pause flags,
  the manager, the driver, the rows decoded into ``ClaimedJob``);
* ``gate_prepared``: the same on a connection whose alias sets
  ``OPTIONS["server_side_binding"] = True`` and ``"prepare_threshold": 1`` (psycopg
  prepares the claim on the server, and PostgreSQL keeps its generic plan after five);
* ``manager``: ``Job.objects.claim`` for the worker's queue;
* ``django``: the driver's SQL text and parameters through Django's cursor, rows fetched;
* ``raw``: the same text and parameters on the psycopg connection beneath it;
* ``raw_sync``: the same statement without the relaxed commit (its WAL flush awaited);
* ``floor``: ``benchmarks/pickup_floor.py``'s ``UPDATE … RETURNING id`` of a two-column
  table, on the same connection, relaxed the same way.

Per claim: wall time (``perf_counter``), this thread's CPU (``thread_time``), and the
CPU of the server process serving the connection (``/proc/<pid>/schedstat``, so only
with the server on this host): on a shared machine the two CPU figures hold still
where the wall time does not. Then ``EXPLAIN (ANALYZE)`` of ours and the floor's,
for the server's planning and execution times. Medians, microseconds.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
QUEUE = "pickup-claim"
WORKER = "pickup-claim-bench"
LEASE = 300


def _schedstat(pid: int) -> int:
    """Nanoseconds of CPU the process ``pid`` (a PostgreSQL backend) has used so far."""
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])


def _floor_sql(relaxed: str) -> str:
    return (
        f"UPDATE pickup_floor SET status = 'running' FROM {relaxed} "
        "WHERE id = (SELECT id FROM pickup_floor WHERE status = 'pending' ORDER BY id "
        "LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id"
    )


def run(samples: int) -> dict[str, Any]:
    from django.db import connection, connections

    from benchmarks import pickup_floor
    from benchmarks.run import URLS, load_average
    from django_arcature.db import single_statement
    from django_arcature.db.relaxed_claim import RELAX_COMMIT_FROM
    from django_arcature.models import Job
    from django_arcature.queues.gate import QueueGate

    pickup_floor.create_table(URLS["postgres"])
    manager = Job.objects.db_manager("default")
    manager.filter(queue=QUEUE).delete()
    gate = QueueGate("default", queues=[QUEUE])
    prepared_alias = _preparing_alias(connections)
    prepared_manager = Job.objects.db_manager(prepared_alias)
    prepared_gate = QueueGate(prepared_alias, queues=[QUEUE])
    connection.ensure_connection()
    raw = connection.connection
    backends = {alias: _backend_pid(connections[alias]) for alias in ("default", prepared_alias)}

    # The driver's own text and parameters for this claim (one queue, one job).
    manager.enqueue("bench.noop", queue=QUEUE)
    captured: list[tuple[str, Any]] = []

    def capture(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        captured.append((sql, params))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(capture):
        manager.claim(WORKER, LEASE, 1, [QUEUE])
    sql, params = next((s, p) for s, p in captured if "RETURNING" in s)
    sync = sql.replace(f"FROM {RELAX_COMMIT_FROM} ", "")
    assert sync != sql, "the claim is not relaxed: run it in autocommit"
    floor = _floor_sql(RELAX_COMMIT_FROM)

    def raw_statement(text: str) -> Callable[[], Any]:
        def claim() -> Any:
            with raw.cursor() as cursor:
                cursor.execute(text, params)
                return cursor.fetchall()

        return claim

    def django_statement() -> Any:
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return cursor.fetchall()

    def floor_claim() -> Any:
        with raw.cursor() as cursor:
            cursor.execute(floor)
            return cursor.fetchall()

    ways: dict[str, Callable[[], Any]] = {
        "gate": lambda: gate.claim(manager, WORKER, LEASE, 1),
        "gate_prepared": lambda: prepared_gate.claim(prepared_manager, WORKER, LEASE, 1),
        "manager": lambda: manager.claim(WORKER, LEASE, 1, [QUEUE]),
        "django": django_statement,
        "raw": raw_statement(sql),
        "raw_sync": raw_statement(sync),
        "floor": floor_claim,
    }
    found: dict[str, dict[str, list[float]]] = {
        name: {"wall": [], "thread_cpu": [], "server_cpu": []} for name in ways
    }
    load_before = load_average()
    names = list(ways)
    for sample in range(samples):
        # Each way in turn, starting one further along each sample.
        shift = sample % len(names)
        for name in names[shift:] + names[:shift]:
            # Each claim's job is enqueued on the claim's own connection: claimed from
            # another session, the same claim took 1.7x as long at load 20 (prepared
            # or not), which would charge one way with a difference of the set-up.
            if name == "floor":
                with raw.cursor() as cursor:
                    cursor.execute("INSERT INTO pickup_floor (status) VALUES ('pending')")
            elif name == "gate_prepared":
                prepared_manager.enqueue("bench.noop", queue=QUEUE)
            else:
                manager.enqueue("bench.noop", queue=QUEUE)
            time.sleep(0.002)
            backend = backends[prepared_alias if name == "gate_prepared" else "default"]
            server = _schedstat(backend)
            cpu = time.thread_time_ns()
            wall = time.perf_counter_ns()
            got = ways[name]()
            wall = time.perf_counter_ns() - wall
            cpu = time.thread_time_ns() - cpu
            server = _schedstat(backend) - server
            if len(got) != 1:
                raise SystemExit(f"{name} claimed {len(got)} rows, not 1")
            found[name]["wall"].append(wall / 1e3)
            found[name]["thread_cpu"].append(cpu / 1e3)
            found[name]["server_cpu"].append(server / 1e3)
    result: dict[str, Any] = {
        "samples": samples,
        "load_before": load_before,
        "load_after": load_average(),
        "us_p50": {
            name: {what: round(statistics.median(v), 1) for what, v in figures.items()}
            for name, figures in found.items()
        },
    }
    result["explain_ms_p50"] = {
        "ours": _explain(connection, manager, sql, params, samples // 4 or 1, "ours"),
        "floor": _explain(connection, manager, floor, None, samples // 4 or 1, "floor"),
    }
    manager.filter(queue=QUEUE).delete()
    single_statement._STATEMENTS.clear()
    return result


def _preparing_alias(connections: Any) -> str:
    """A second alias of the benchmark's database whose statements psycopg prepares."""
    alias = "prepared"
    if alias not in connections.settings:
        entry = copy.deepcopy(connections.settings["default"])
        entry["OPTIONS"] = {
            **entry.get("OPTIONS", {}),
            "server_side_binding": True,
            "prepare_threshold": 1,
        }
        connections.settings[alias] = entry
    return alias


def _backend_pid(connection: Any) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return int(cursor.fetchone()[0])


def _explain(
    connection: Any, manager: Any, sql: str, params: Any, count: int, kind: str
) -> dict[str, float]:
    """Median planning and execution milliseconds the server reports for ``sql``."""
    planning, execution = [], []
    for _ in range(count):
        with connection.cursor() as cursor:
            if kind == "floor":
                cursor.execute("INSERT INTO pickup_floor (status) VALUES ('pending')")
            else:
                manager.enqueue("bench.noop", queue=QUEUE)
            cursor.execute("EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) " + sql, params)
            plan = cursor.fetchone()[0]
        plan = json.loads(plan) if isinstance(plan, str) else plan
        planning.append(plan[0]["Planning Time"])
        execution.append(plan[0]["Execution Time"])
    return {
        "planning": round(statistics.median(planning), 3),
        "execution": round(statistics.median(execution), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=100, help="claims per way")
    options = parser.parse_args()
    from benchmarks.run import URLS, ensure_database

    os.environ["DATABASE_URL"] = URLS["postgres"]
    os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.settings"
    ensure_database(URLS["postgres"])
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    print(json.dumps(run(options.samples)), flush=True)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()

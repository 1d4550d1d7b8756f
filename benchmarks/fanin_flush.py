"""Where a wide fan-in's middle node costs: each statement of a worker's flush, timed.

    .venv/bin/python benchmarks/fanin_flush.py --nodes 10000 --flush 50

Why: the drain benchmark (``workflows.py``) gives the workers' CPU per fan-in node,
not which statement of the completion transaction it goes to, nor the server's
share. This builds one 1 → ``nodes`` → 1 workflow, completes its root, then claims
and completes the middle nodes ``--flush`` at a time on one connection (the CPU of
its server process is read from ``/proc``: the server's share per node), as the
worker's flush does (``write_completions(plain_alone=True)``), with every
statement timed from the client (``--separate``: each sent on its own, the
one-round-trip batching off): wall time per statement kind and per node, the client CPU of
the whole write per node, and with ``--explain`` EXPLAIN (ANALYZE, BUFFERS, WAL)
of each statement of the flush half-way through; ``--plain``: as many plain
jobs, claimed and completed the same way, for comparison (in a savepoint rolled back,
then the statement itself). PostgreSQL; ``--url`` for another database.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_URL = "postgres://arcature:arcature@127.0.0.1:5432/" + os.environ.get(
    "ARCATURE_BENCH_DB_NAME", "arcature_fanin_flush"
)


def kind_of(sql: str) -> str:
    """A short name for a statement: its verb and table."""
    words = sql.replace('"', "").split()
    verb = words[0].upper()
    table = ""
    for marker in ("UPDATE", "FROM", "INTO"):
        if marker in (w.upper() for w in words):
            index = [w.upper() for w in words].index(marker)
            table = words[index + 1] if index + 1 < len(words) else ""
            break
    lock = " FOR UPDATE" if "FOR UPDATE" in sql.upper() else ""
    probe = " EXISTS" if "EXISTS(" in sql.upper() else ""
    return f"{verb} {table.replace('django_arcature_', '')}{lock}{probe}"


def _process_cpu(pid: int | None) -> float:
    """User + system seconds of a process on this host (0 if unknown)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError, TypeError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _shape(node: dict[str, Any]) -> str:
    """A plan node and its children, one line: type, index, conditions, time."""
    parts = [node["Node Type"]]
    for key in ("Relation Name", "Index Name", "Index Cond", "Recheck Cond", "Filter"):
        if key in node:
            parts.append(f"{key}={str(node[key])[:80]}")
    parts.append(f"{node.get('Actual Total Time', 0):.3f}ms x{node.get('Actual Loops', 1)}")
    children = [_shape(child) for child in node.get("Plans", [])]
    return " ".join(parts) + (" [" + "; ".join(children) + "]" if children else "")


def measure(
    nodes: int, flush: int, explain: bool, profile: bool, separate: bool, plain: bool = False
) -> dict[str, Any]:
    from django.db import connection, transaction

    from benchmarks.benchapp.jobs import noop
    from django_arcature import Workflow, registry
    from django_arcature.db.claimed import ClaimedJob
    from django_arcature.manager import dependencies
    from django_arcature.models import Job
    from django_arcature.transitions import Completion

    registry.autodiscover()
    if separate:
        dependencies._one_round_trip = lambda connection: False
    tables = [
        "django_arcature_workflowedge",
        "django_arcature_workflownode",
        "django_arcature_workflowcounter",
        "django_arcature_workflowrun",
        "django_arcature_job",
    ]
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE TABLE " + ", ".join(tables))
    if plain:
        noop.enqueue_many([[]] * (nodes + 2))
    else:
        flow = Workflow("fan-in flush")
        root = flow.add(noop)
        middle = [flow.add(noop, after=[root]) for _ in range(nodes)]
        flow.add(noop, after=middle)
        flow.enqueue()
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")

    def complete(claimed: list[ClaimedJob]) -> None:
        Job.objects.write_completions(
            [
                Completion(
                    job.id,
                    job.claim_token,
                    "succeeded",
                    attempt_log=[*job.attempt_log, {"worker": "w", "error": None}],
                )
                for job in claimed
            ],
            plain_alone=True,
        )

    wall: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    plans: list[dict[str, Any]] = []
    state = {"explain": False}

    def timed(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        explainable = sql.lstrip().upper().startswith(("SELECT", "UPDATE", "WITH"))
        if state["explain"] and explainable and "; " not in sql:
            with transaction.atomic(), connection.cursor() as cursor:
                sid = transaction.savepoint()
                cursor.execute("EXPLAIN (ANALYZE, BUFFERS, WAL, FORMAT JSON) " + sql, params)
                plan = cursor.fetchone()[0]
                transaction.savepoint_rollback(sid)
            top = plan[0]
            plans.append(
                {
                    "statement": kind_of(sql),
                    "ms": top["Execution Time"],
                    "planning_ms": top["Planning Time"],
                    "wal_records": top["Plan"].get("WAL Records"),
                    "shared_hit": top["Plan"].get("Shared Hit Blocks"),
                    "shared_dirtied": top["Plan"].get("Shared Dirtied Blocks"),
                    "plan": _shape(top["Plan"]),
                }
            )
        began = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            name = kind_of(sql)
            wall[name] += time.perf_counter() - began
            count[name] += 1

    claimed = Job.objects.claim("fanin-flush", 30, 1, queues=["default"])
    started = time.perf_counter()
    with connection.execute_wrapper(timed):
        complete(claimed)
    root_seconds = time.perf_counter() - started
    root_ms = {k: round(v * 1e3, 1) for k, v in sorted(wall.items(), key=lambda i: -i[1])}
    wall.clear()
    count.clear()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend = cursor.fetchone()[0] if connection.vendor == "postgresql" else None
    server_before = _process_cpu(backend)
    cpu = 0.0
    done = 0
    flushes = 0
    profiler = cProfile.Profile() if profile else None
    with connection.execute_wrapper(timed):
        while True:
            claimed = Job.objects.claim("fanin-flush", 30, flush, queues=["default"])
            if not claimed:
                break
            middle_flush = flushes == (nodes // flush) // 2
            state["explain"] = explain and middle_flush
            began = time.process_time()
            if profiler is not None and middle_flush:
                profiler.enable()
            complete(claimed)
            if profiler is not None and middle_flush:
                profiler.disable()
            cpu += time.process_time() - began
            state["explain"] = False
            done += len(claimed)
            flushes += 1
    server_seconds = _process_cpu(backend) - server_before
    profile_text = ""
    if profiler is not None:
        out = io.StringIO()
        pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(25)
        profile_text = out.getvalue()
    return {
        "nodes": nodes,
        "flush": flush,
        "root_seconds": round(root_seconds, 3),
        "root_statements_ms": root_ms,
        "jobs_completed_after_root": done,
        "completion_cpu_us_per_node": round(cpu * 1e6 / max(done, 1), 1),
        # The connection's server process (same host), claims and completions both.
        "server_cpu_us_per_node": round(server_seconds * 1e6 / max(done, 1), 1),
        "statements_us_per_node": {
            k: round(v * 1e6 / max(done, 1), 1)
            for k, v in sorted(wall.items(), key=lambda i: -i[1])
        },
        "statements_per_flush": {k: round(count[k] / max(flushes, 1), 2) for k in sorted(count)},
        "explain": plans,
        "profile": profile_text,
        "load": " ".join(Path("/proc/loadavg").read_text().split()[:3]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--flush", type=int, default=50, help="completions per write")
    parser.add_argument("--explain", action="store_true")
    parser.add_argument("--profile", action="store_true", help="cProfile one flush")
    parser.add_argument("--separate", action="store_true", help="each statement its own round trip")
    parser.add_argument("--plain", action="store_true", help="plain jobs, claimed the same way")
    parser.add_argument("--url", default=DEFAULT_URL, help="the benchmark's database")
    options = parser.parse_args()
    from benchmarks.run import boot

    boot(options.url, "benchmarks.workflow_settings")
    result = measure(
        options.nodes,
        options.flush,
        options.explain,
        options.profile,
        options.separate,
        options.plain,
    )
    text = result.pop("profile")
    print(json.dumps(result, indent=1), flush=True)
    if text:
        print(text)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()

"""What a per-dependent counter would save a wide fan-in's flush, measured in SQL alone.

    .venv/bin/python benchmarks/fanin_counter_ab.py --nodes 10000 --flush 200 --rounds 2

Why: a fan-in node's extra cost over a plain job is its edge row (one non-HOT
``UPDATE`` per node, about six WAL records, since ``state`` is in
``arcature_edge_down_idx``, which the dependent's probe needs). The alternative is
the batch's shape: count each dependent's open upstreams and take the flush's
share off that count in one row per dependent, the edges left as they were. Before
that redesign is written, this measures what it would buy with the statements
alone, none of the library's completion code: one 1 → ``nodes`` → 1 workflow is
enqueued (the library's own ``Workflow.enqueue``), then its middle nodes are
"completed" ``--flush`` at a time on one connection, each flush its own
transaction committed with the WAL flush, either way:

* ``edges`` (today's statements, as ``manager/dependencies.py`` sends them for a
  flush of fan-in nodes): the edge ``UPDATE`` with ``RETURNING`` and the read of
  sole edges in one round trip, then the dependent's lock and its probe;
* ``counter``: one read of the flush's edges grouped by dependent, then one
  ``UPDATE`` of those dependents' counts with ``RETURNING`` (a count that reaches
  zero is the release), on a column this script adds to the node table for the
  run and drops after it.

The job rows themselves are not written by either way (both would write them
alike). The ways alternate (ABBA over ``--rounds``), each on a freshly enqueued
workflow. PostgreSQL only; the database is the benchmark's own (its tables are
emptied).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_URL = "postgres://arcature:arcature@127.0.0.1:5432/" + os.environ.get(
    "ARCATURE_BENCH_DB_NAME", "arcature_fanin_counter"
)
TABLES = (
    "django_arcature_workflowedge, django_arcature_workflownode, "
    "django_arcature_workflowcounter, django_arcature_workflowrun, django_arcature_job"
)
#: Accepted by a ``succeeded`` outcome: what ``MET_BY["succeeded"]`` holds.
MET_WHEN = "('succeeded', 'always')"


def build(nodes: int) -> tuple[list[str], str]:
    """A fresh 1 → nodes → 1 workflow: the middle nodes' ids and the sink's."""
    from django.db import connection

    from benchmarks.benchapp.jobs import noop
    from django_arcature import Workflow

    with connection.cursor() as cursor:
        cursor.execute(f"TRUNCATE {TABLES}")
        cursor.execute(
            "ALTER TABLE django_arcature_workflownode "
            "ADD COLUMN IF NOT EXISTS bench_open_upstreams integer NOT NULL DEFAULT 0"
        )
    flow = Workflow("fan-in counter A/B")
    root = flow.add(noop)
    middle = [flow.add(noop, after=[root]) for _ in range(nodes)]
    sink = flow.add(noop, after=middle)
    flow.enqueue()
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE django_arcature_workflownode SET bench_open_upstreams = %s WHERE job_id = %s",
            [nodes, sink.job_id],
        )
        cursor.execute("ANALYZE")
    return [str(node.job_id) for node in middle], str(sink.job_id)


def by_edges(cursor: Any, ups: list[str], sink: str) -> None:
    cursor.execute(
        'UPDATE django_arcature_workflowedge SET state = CASE WHEN "when" IN '
        f"{MET_WHEN} THEN 'met' ELSE 'unmet' END WHERE upstream_id = ANY(%s::uuid[]) "
        f"AND state = 'open' AND NOT (sole AND \"when\" IN {MET_WHEN}) "
        "RETURNING downstream_id, workflow_id, sole, state; "
        "SELECT downstream_id, workflow_id, sole, state FROM django_arcature_workflowedge "
        "WHERE upstream_id = ANY(%s::uuid[]) AND state = 'open' "
        f'AND sole AND "when" IN {MET_WHEN}',
        [ups, ups],
    )
    cursor.fetchall()
    cursor.nextset()
    cursor.fetchall()
    probe = (
        "SELECT 1 FROM django_arcature_workflowedge e WHERE e.downstream_id = j.id AND e.state = %s"
    )
    cursor.execute(
        "SELECT id FROM django_arcature_job WHERE id = ANY(%s::uuid[]) AND status = 'waiting' "
        f"ORDER BY id FOR UPDATE; SELECT j.id, EXISTS({probe}), EXISTS({probe}) "
        "FROM django_arcature_job j WHERE j.id = ANY(%s::uuid[]) AND j.status = 'waiting'",
        [[sink], "open", "unmet", [sink]],
    )
    cursor.fetchall()
    cursor.nextset()
    cursor.fetchall()


def by_counter(cursor: Any, ups: list[str], sink: str) -> None:
    cursor.execute(
        "SELECT downstream_id, sole, count(*) FROM django_arcature_workflowedge "
        "WHERE upstream_id = ANY(%s::uuid[]) GROUP BY downstream_id, sole",
        [ups],
    )
    shared = [(str(down), count) for down, sole, count in cursor.fetchall() if not sole]
    cursor.execute(
        "UPDATE django_arcature_workflownode n "
        "SET bench_open_upstreams = n.bench_open_upstreams - d.k "
        "FROM unnest(%s::uuid[], %s::int[]) AS d(id, k) WHERE n.job_id = d.id "
        "RETURNING n.job_id, n.bench_open_upstreams",
        [[down for down, _ in shared], [count for _, count in shared]],
    )
    cursor.fetchall()


WAYS: dict[str, Callable[[Any, list[str], str], None]] = {
    "edges": by_edges,
    "counter": by_counter,
}


def measure(nodes: int, flush: int, rounds: int) -> dict[str, Any]:
    from django.db import connection

    found: dict[str, list[dict[str, float]]] = {way: [] for way in WAYS}
    order = list(WAYS)
    try:
        for number in range(rounds):
            for way in order if number % 2 == 0 else order[::-1]:
                middle, sink = build(nodes)
                flushes = []
                with connection.cursor() as cursor:
                    for start in range(0, nodes, flush):
                        began = time.perf_counter()
                        cursor.execute("BEGIN")
                        WAYS[way](cursor, middle[start : start + flush], sink)
                        cursor.execute("COMMIT")
                        flushes.append(time.perf_counter() - began)
                found[way].append(
                    {
                        "us_per_node": sum(flushes) / nodes * 1e6,
                        "flush_ms_p50": statistics.median(flushes) * 1e3,
                    }
                )
                print(f"round {number + 1} {way}: {found[way][-1]}", file=sys.stderr, flush=True)
    finally:
        with connection.cursor() as cursor:
            cursor.execute(
                "ALTER TABLE django_arcature_workflownode "
                "DROP COLUMN IF EXISTS bench_open_upstreams"
            )
    return {
        "nodes": nodes,
        "flush": flush,
        "rounds": found,
        "load": " ".join(Path("/proc/loadavg").read_text().split()[:3]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--flush", type=int, default=200, help="completions per transaction")
    parser.add_argument("--rounds", type=int, default=2, help="each way once per round")
    parser.add_argument("--url", default=DEFAULT_URL, help="the benchmark's database")
    options = parser.parse_args()
    from benchmarks.run import boot

    boot(options.url, "benchmarks.workflow_settings")
    print(json.dumps(measure(options.nodes, options.flush, options.rounds), indent=1))


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()

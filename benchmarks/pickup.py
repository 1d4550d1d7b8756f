"""Idle pickup latency and its break-down, measured several times per database.

    .venv/bin/python benchmarks/pickup.py --db postgres,mysql,sqlite --runs 5

Each run is ``django_arcature.bench.measure.Bench.pickup``: one idle worker
(its pickup trace on), jobs enqueued one at a time 0.2 to 0.4 s apart. Per
database it prints the median over the runs of each run's p50 (from the enqueue
call to the claim's ``started_at``, and to the handler thread's start) and of
each step of the break-down, with the load average before and after: on a
shared machine, compare only figures taken under the same load. Like
``benchmarks/run.py``, it uses the database ``ARCATURE_BENCH_DB_NAME``
(default ``arcature_worker_bench``), whose job table it empties.

``--floor`` runs ``benchmarks/pickup_floor.py``'s measurement after each of our
runs, in the same process, so each pair is taken under the same load: the
physical floor (another client's INSERT and wake-up to a one-statement claim,
no queue code) beside our figure, and the commit with and without the WAL flush.

``--server-binding N`` sets ``OPTIONS["server_side_binding"] = True`` and
``"prepare_threshold": N`` on the benchmark's database alias, in this process and
the worker's: psycopg then prepares every statement sent N times, the enqueue's
INSERT and the worker's claim included. ``benchmarks/pickup_claim.py`` takes the
claim itself apart.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def child(
    db: str, runs: int, samples: int, floor: bool = False, server_binding: int | None = None
) -> dict[str, Any]:
    from benchmarks.run import URLS, ensure_database, load_average

    os.environ["DATABASE_URL"] = URLS[db]
    if server_binding is not None:  # read by benchmarks/settings.py, here and in the worker
        os.environ["ARCATURE_BENCH_SERVER_BINDING"] = str(server_binding)
    os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.settings"
    ensure_database(URLS[db])
    import django

    django.setup()
    from django.core.management import call_command

    from benchmarks.run import Bench

    call_command("migrate", verbosity=0)
    load_before = load_average()
    bench = Bench(db, argparse.Namespace()).measure
    results = []
    floors: list[dict[str, Any]] = []
    if floor:
        from benchmarks import pickup_floor

        pickup_floor.create_table(URLS[db])
    for _ in range(runs):
        results.append(bench.pickup(samples))
        if floor:  # right after ours: the same load, interleaved
            floors.append(pickup_floor.measure(URLS[db], samples))
    bench.clear()
    merged: dict[str, Any] = {
        "db": db,
        "runs": runs,
        "samples": samples,
        "load_before": load_before,
        "load_after": load_average(),
        "server_binding": server_binding,
    }
    for key in (
        "pickup_p50_ms",
        "pickup_commit_p50_ms",
        "pickup_handler_p50_ms",
        "pickup_worker_cpu_us",
        "pickup_server_cpu_us",
    ):
        values = [r[key] for r in results if key in r]
        if values:
            merged[key] = statistics.median(values)
            merged[key + "_runs"] = [round(v, 3) for v in values]
    steps: dict[str, list[float]] = {}
    for r in results:
        for name, ms in r.get("pickup_breakdown", {}).get("steps_p50_ms", {}).items():
            steps.setdefault(name, []).append(ms)
    merged["steps_p50_ms"] = {name: statistics.median(v) for name, v in steps.items()}
    merged["woken"] = [r.get("pickup_breakdown", {}).get("woken") for r in results]
    merged["empty_claims_per_job"] = [r.get("pickup_empty_claims_per_job") for r in results]
    started = [
        r["pickup_breakdown"]["claim_started_db_p50_ms"]
        for r in results
        if "claim_started_db_p50_ms" in r.get("pickup_breakdown", {})
    ]
    if started:
        merged["claim_started_db_p50_ms"] = statistics.median(started)
    if floors:
        merged["floor"] = {
            key: statistics.median(f[key] for f in floors) for key in floors[0] if key != "runs"
        }
        merged["floor"]["runs"] = floors
    return merged


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", default="postgres,mysql,sqlite", help="comma-separated list")
    parser.add_argument("--runs", type=int, default=5, help="pickup runs per database")
    parser.add_argument("--samples", type=int, default=40, help="jobs per run")
    parser.add_argument(
        "--floor",
        action="store_true",
        help="after each run, the physical floor without the queue (benchmarks/pickup_floor.py)",
    )
    parser.add_argument(
        "--server-binding",
        type=int,
        metavar="N",
        help="PostgreSQL: server-side binding, statements prepared after N uses (the claim too)",
    )
    parser.add_argument("--one", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.one:
        result = child(
            options.one, options.runs, options.samples, options.floor, options.server_binding
        )
        print("RESULT " + json.dumps(result), flush=True)
        return
    for db in options.db.split(","):
        argv = [sys.executable, __file__, "--one", db, *sys.argv[1:]]
        out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
        lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
        if out.returncode or not lines:
            sys.stderr.write(out.stdout + out.stderr)
            raise SystemExit(f"pickup benchmark on {db} failed")
        print(lines[-1].removeprefix("RESULT "), flush=True)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()

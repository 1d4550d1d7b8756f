"""What Prometheus metrics and OpenTelemetry tracing cost a worker's drain rate.

    PYTHONPATH=. .venv/bin/python benchmarks/observability.py --db postgres --jobs 10000

One run, four variants interleaved (plain, --metrics-port, tracing, both),
``--repeat`` rounds, median per variant: the machine's load drifts less between
the variants than between separate runs. Drain with one worker process, no-op
jobs, the rate timed on the database's clock (django_arcature.bench.measure).
With tracing on, jobs are enqueued under tracing too, so each attempt has a
producer context to continue; spans go through the SDK's BatchSpanProcessor to
an exporter that drops them (the cost of exporting depends on the backend).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.run import URLS, ensure_database  # noqa: E402

VARIANTS = ("plain", "metrics", "tracing", "metrics+tracing")


def free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def measure(db: str, jobs: int, repeat: int) -> dict[str, Any]:
    os.environ["DATABASE_URL"] = URLS[db]
    os.environ["DJANGO_SETTINGS_MODULE"] = "benchmarks.settings"
    ensure_database(URLS[db])
    import django

    django.setup()
    from django.core.management import call_command

    from django_arcature.bench.jobs import TASK
    from django_arcature.bench.measure import Bench
    from django_arcature.bench.worker import enable_tracing
    from django_arcature.contrib import otel

    call_command("migrate", verbosity=0)
    rates: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    cpu: dict[str, list[float]] = {variant: [] for variant in VARIANTS}
    for _ in range(repeat):
        for variant in VARIANTS:
            command = [sys.executable, "-m", "django_arcature.bench.worker"]
            env = {"PYTHONPATH": str(ROOT), "ARCATURE_BENCH_TRACING": "0"}
            if "metrics" in variant:
                command += ["--metrics-port", str(free_port())]
            if "tracing" in variant:
                env["ARCATURE_BENCH_TRACING"] = "1"
                enable_tracing()  # the producer side, so jobs carry a trace context
            else:
                otel.uninstall()
            bench = Bench(task=TASK, worker_command=command, env=env, cwd=ROOT)
            bench.check_scratch()
            rates[variant].append(bench.drain(jobs, 1))
            if bench.cpu_us_per_job is not None:
                cpu[variant].append(bench.cpu_us_per_job)
            bench.clear()
    otel.uninstall()
    medians = {variant: statistics.median(values) for variant, values in rates.items()}
    cpu_medians = {variant: statistics.median(values) for variant, values in cpu.items() if values}
    return {
        "db": db,
        "jobs": jobs,
        "repeat": repeat,
        "rates": rates,
        "median": medians,
        "cpu_us_per_job": cpu,
        "cpu_median": cpu_medians,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", default="postgres", choices=sorted(URLS))
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    options = parser.parse_args()
    result = measure(options.db, options.jobs, options.repeat)
    plain = result["median"]["plain"]
    plain_cpu = result["cpu_median"].get("plain")
    print(json.dumps(result))
    print(
        f"| variant | drain (1 process, {options.db}) | vs plain | worker CPU per job | vs plain |"
    )
    print("|---|---|---|---|---|")
    for variant, rate in result["median"].items():
        cpu = result["cpu_median"].get(variant)
        cpu_text = f"{cpu:,.0f} µs" if cpu is not None else "-"
        cpu_delta = f"{(cpu / plain_cpu - 1) * 100:+.1f}%" if cpu and plain_cpu else "-"
        print(
            f"| {variant} | {rate:,.0f} jobs/s | {(rate / plain - 1) * 100:+.1f}% "
            f"| {cpu_text} | {cpu_delta} |"
        )


if __name__ == "__main__":
    main()

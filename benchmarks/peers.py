"""django-arcature beside the other Python job queues, in one run, written to peers.md.

    .venv/bin/python benchmarks/peers.py                 # every contender, 3 rounds
    .venv/bin/python benchmarks/peers.py --peers arcature,pgqueuer --rounds 1

Contenders: ours, pgqueuer, Oban for Python, procrastinate, django-tasks-db (each on
PostgreSQL, in a database of its own) and Huey on a Redis server this script starts
on a private port. Each runs in its own interpreter process, so their imports never
meet; the peers are installed into a virtualenv of their own (``var/peers-venv``),
never into the project's (``--skip-install`` uses it as it is).

The same no-op job everywhere (one integer argument, its key), whose handler's first
act is to append its key and a CLOCK_REALTIME stamp to a file of its process
(``benchmarks/peerkit/stamp.py``). Per contender and round:

* **bulk enqueue**: ``--jobs`` jobs with the queue's bulk call, in batches of 1,000
  and of 10,000 (where a queue has no bulk call, its documented enqueue in a loop,
  said in its caveats);
* **enqueue one by one**: ``--single`` jobs, each its own transaction (autocommit);
* **drain**: ``--jobs`` jobs enqueued in batches of 1,000 into 2 idle worker
  processes, from the first handler stamp to the last, and the workers' CPU per job;
* **idle pickup**: one idle worker, ``--samples`` jobs one at a time spaced
  0.2-0.4 s apart, from the enqueue call to the handler's stamp (p50, p95); before
  them, the load the idle worker puts on its server (PostgreSQL transactions/s in its
  database, or Redis commands/s) over ``--idle-seconds``.

Every worker runs at its documented defaults; a worker is ready when it has run a
probe job (the same test for all), so no figure includes a start-up. Each figure is
the median of ``--rounds``. For ours also: what an enqueue adds to a request's own
transaction (p50/p99) and the physical limit of bulk enqueue (``COPY`` of the same
rows into our table from ``psql``). A contender that fails to install or to run is
reported with its error; the others still run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import traceback
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / "var" / "peers-venv"
OUT = ROOT / "benchmarks" / "peers.md"

#: contender -> (adapter module in benchmarks/peerkit, the pip requirements it needs)
CONTENDERS: dict[str, tuple[str, list[str]]] = {
    "arcature": ("arcature", []),
    "pgqueuer": ("pgqueuer_peer", ["pgqueuer[asyncpg]", "typer<0.29"]),
    "oban": ("oban_peer", ["oban"]),
    "procrastinate": ("procrastinate_peer", ["procrastinate"]),
    "django-tasks-db": ("tasks_db", ["django-tasks-db"]),
    "huey": ("huey_peer", ["huey", "redis"]),
}
#: Every peer's child imports psycopg (to create its database and read its load).
COMMON_REQUIREMENTS = ["psycopg[binary]"]
FIGURES = [
    ("bulk_1000", "bulk enqueue, batches of 1,000", "rate"),
    ("bulk_10000", "bulk enqueue, batches of 10,000", "rate"),
    ("pickup_p50_ms", "idle pickup p50 (enqueue call → handler starts)", "ms"),
    ("single", "enqueue one by one (autocommit)", "rate"),
    ("drain_2", "drain, 2 worker processes", "rate"),
]
POSTGRES_PEERS = {"pgqueuer", "oban", "procrastinate", "django-tasks-db"}


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


# --- in the child: one contender ----------------------------------------------------------


def child(name: str, options: argparse.Namespace) -> dict[str, Any]:
    import importlib

    from benchmarks.peerkit.harness import Harness

    module = importlib.import_module(f"benchmarks.peerkit.{CONTENDERS[name][0]}")
    peer = module.ADAPTER()
    harness = Harness(peer, options)
    try:
        peer.setup()
        return harness.run()
    finally:
        harness.close()
        peer.close()


# --- in the parent ----------------------------------------------------------------------


def install(names: list[str]) -> dict[str, str]:
    """Create the peers' virtualenv and install what ``names`` need; -> name: error."""
    failed: dict[str, str] = {}
    peers = [name for name in names if name != "arcature"]
    if "huey" in peers and shutil.which("redis-server") is None:
        apt = subprocess.run(
            ["apt-get", "install", "-y", "-q", "redis-server"], capture_output=True, text=True
        )
        if apt.returncode:
            failed["huey"] = "redis-server is missing and apt-get failed:\n" + apt.stderr[-2000:]
    if not peers:
        return failed
    if not (VENV / "bin" / "python").exists():
        # The project's own interpreter, so the peers run on the same Python as ours.
        base = getattr(sys, "_base_executable", sys.executable)
        made = subprocess.run([base, "-m", "venv", str(VENV)], capture_output=True, text=True)
        if made.returncode:
            return dict.fromkeys(peers, f"python -m venv failed:\n{made.stderr[-2000:]}")
    pip = [str(VENV / "bin" / "python"), "-m", "pip", "install", "-q", "--upgrade"]
    everything = COMMON_REQUIREMENTS + [req for name in peers for req in CONTENDERS[name][1]]
    if subprocess.run([*pip, *everything], capture_output=True).returncode == 0:
        return failed
    for name in peers:  # one at a time, to say which one does not install
        done = subprocess.run(
            [*pip, *COMMON_REQUIREMENTS, *CONTENDERS[name][1]], capture_output=True, text=True
        )
        if done.returncode:
            failed[name] = (
                f"pip install {' '.join(CONTENDERS[name][1])} failed:\n" + (done.stderr[-2000:])
            )
    return failed


def run_contender(name: str, python: str, argv: list[str], timeout: float) -> dict[str, Any]:
    command = [python, str(Path(__file__).resolve()), "--one", name, *argv]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    try:
        out = subprocess.run(
            command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as expired:
        tail = (expired.stderr or b"")[-2000:]
        return {"name": name, "error": f"timed out after {timeout:g}s:\n{tail!r}"}
    sys.stderr.write(out.stderr)
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    if out.returncode or not lines:
        return {
            "name": name,
            "error": (out.stdout + out.stderr)[-3000:] or f"exit {out.returncode}",
        }
    result: dict[str, Any] = json.loads(lines[-1].removeprefix("RESULT "))
    return result


def fmt(figure: str, value: float | None) -> str:
    if value is None:
        return "—"
    if figure.endswith("_ms"):
        return f"{value:.1f} ms"
    return f"{value:,.0f}/s"


def best_peer(results: list[dict[str, Any]], figure: str) -> tuple[str, float] | None:
    """The best other contender on ``figure`` (lowest for a latency, highest for a rate)."""
    others = [
        (r["label"], r[figure])
        for r in results
        if r["name"] != "arcature" and "error" not in r and r.get(figure) is not None
    ]
    if not others:
        return None
    pick = min if figure.endswith("_ms") else max
    return pick(others, key=lambda item: item[1])


def ratio(figure: str, ours: float, theirs: float) -> float:
    """How many times better ours is: >1 is ahead (for latency, theirs / ours)."""
    return theirs / ours if figure.endswith("_ms") else ours / theirs


def ours_only(ours: dict[str, Any], options: argparse.Namespace) -> list[str]:
    """The figures only ours has: the physical limit of bulk, the in-transaction cost."""
    copy = ours["copy_rate"]
    lines = [
        "## Ours only",
        "",
        "| figure | value |",
        "|---|---|",
        f"| physical limit: `COPY ... FROM STDIN` of the same {options.jobs:,} rows into our "
        f"table (its indexes and trigger), from `psql` | {copy:,.0f}/s |",
    ]
    for batch in ("1000", "10000"):
        if ours.get(f"bulk_{batch}"):
            lines.append(
                f"| our bulk enqueue (batches of {int(batch):,}) against that limit "
                f"| {ours[f'bulk_{batch}'] / copy:.0%} |"
            )
    lines += [
        f"| enqueue call inside a request's open transaction, p50 / p99 "
        f"| {ours['in_tx_call_p50_us']:.0f} µs / {ours['in_tx_call_p99_us']:.0f} µs |",
        f"| time an enqueue adds to the request's transaction, commit included, p50 / p99 "
        f"| {ours['in_tx_added_p50_us']:.0f} µs / {ours['in_tx_added_p99_us']:.0f} µs |",
    ]
    return lines


def goals(ours: dict[str, Any], results: list[dict[str, Any]]) -> list[str]:
    """Issue 21's targets, each against this run's own numbers."""
    postgres = [r for r in results if r["name"] in POSTGRES_PEERS]
    huey = next((r for r in results if r["name"] == "huey" and "error" not in r), None)
    rows: list[tuple[str, str, bool | None]] = []

    def against(figure: str, pool: list[dict[str, Any]], target: float, what: str) -> None:
        best = best_peer(pool, figure)
        mine = ours.get(figure)
        if best is None or mine is None:
            rows.append((what, "not measured", None))
            return
        got = ratio(figure, mine, best[1])
        rows.append((what, f"{got:.2f}x ({best[0]} {fmt(figure, best[1])})", got >= target))

    against("bulk_1000", postgres, 1.5, "bulk enqueue >= 1.5x the fastest PostgreSQL peer")
    if ours.get("copy_rate") and ours.get("bulk_1000"):
        share = ours["bulk_1000"] / ours["copy_rate"]
        rows.append(("bulk enqueue within 70 % of COPY", f"{share:.0%} of COPY", share >= 0.7))
    pickup = ours.get("pickup_p50_ms")
    if pickup is not None:
        rows.append(("idle pickup p50 <= 1.5 ms", f"{pickup:.1f} ms", pickup <= 1.5))
    against("single", results, 1.25, "one-by-one enqueue >= 1.25x the fastest peer")
    against("single", postgres, 1.25, "one-by-one enqueue >= 1.25x the fastest PostgreSQL peer")
    added = ours.get("in_tx_added_p50_us")
    if added is not None:
        rows.append(("in-transaction enqueue p50 <= 150 µs", f"{added:.0f} µs", added <= 150))
    against("drain_2", [huey] if huey else [], 2.5, "drain >= 2.5x Huey on Redis")
    against("drain_2", postgres, 2.0, "drain >= 2x the fastest PostgreSQL peer")
    lines = ["| goal (issue 21) | this run | met |", "|---|---|---|"]
    for what, value, met in rows:
        lines.append(f"| {what} | {value} | {'—' if met is None else 'yes' if met else 'no'} |")
    return lines


def busy_warning(loads: list[str]) -> list[str]:
    """A run on a machine busier than its cores says so above its numbers."""
    cores = os.cpu_count() or 1
    peak = max(float(value) for load in loads for value in load.split())
    if peak <= cores:
        return []
    return [
        f"**Busy machine**: a load average up to {peak:.1f} on {cores} cores (other work "
        "ran beside this one). Every figure is depressed and the ratios are noisy; rerun "
        "the command above on an idle machine for numbers to quote.",
        "",
    ]


def report(record: dict[str, Any]) -> str:
    results: list[dict[str, Any]] = record["results"]
    options = argparse.Namespace(**record["options"])
    loads = record["loads"]
    good = [r for r in results if "error" not in r]
    lines = [
        "# django-arcature beside other Python job queues",
        "",
        f"Measured {record['date']} by `benchmarks/peers.py`: {record['machine']}; load "
        f"average before {loads[0]}, after {loads[1]} (1, 5 and 15 minutes).",
        "",
        f"    {record['command']}",
        "",
        *busy_warning(loads),
        *[f"**Note**: {note}\n" for note in record.get("notes", [])],
        f"{options.jobs:,} jobs per bulk and drain run, {options.single:,} one by one, "
        f"{options.samples} pickup samples, median of {options.rounds} round(s). The job is "
        "the same no-op everywhere (one integer argument) whose handler stamps its "
        "start (CLOCK_REALTIME) into a file; pickup and drain are read from those stamps "
        "for every contender alike. Each queue at its documented defaults: see the "
        "caveats below each table.",
        "",
        "| contender | bulk, batches of 1,000 | bulk, batches of 10,000 | idle pickup "
        "p50 / p95 | one by one | drain, 2 processes | worker CPU per job (drain) "
        "| idle load (1 worker) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in good:
        idle = r.get("idle_load")
        lines.append(
            f"| {r['label']} | {fmt('bulk_1000', r.get('bulk_1000'))} "
            f"| {fmt('bulk_10000', r.get('bulk_10000'))} "
            f"| {fmt('p_ms', r.get('pickup_p50_ms'))} / {fmt('p_ms', r.get('pickup_p95_ms'))} "
            f"| {fmt('single', r.get('single'))} | {fmt('drain_2', r.get('drain_2'))} "
            f"| {r['drain_cpu_us']:.0f} µs "
            f"| {'—' if idle is None else f'{idle:.1f} {r["idle_unit"]}'} |"
        )
    ours = next((r for r in good if r["name"] == "arcature"), None)
    if ours is not None:
        lines += [
            "",
            "## Ours against the best other contender, per figure",
            "",
            "| figure | ours | best other | ratio (>1: ours ahead) | best PostgreSQL peer "
            "| ratio |",
            "|---|---|---|---|---|---|",
        ]
        for figure, title, _ in FIGURES:
            mine = ours.get(figure)
            best = best_peer(results, figure)
            pg = best_peer(
                [r for r in results if r["name"] in POSTGRES_PEERS | {"arcature"}], figure
            )
            cells = [title, fmt(figure, mine)]
            for pick in (best, pg):
                if pick is None or mine is None:
                    cells += ["—", "—"]
                else:
                    cells += [
                        f"{pick[0]} {fmt(figure, pick[1])}",
                        f"{ratio(figure, mine, pick[1]):.2f}x",
                    ]
            lines.append("| " + " | ".join(cells) + " |")
        if "copy_rate" in ours:
            lines += ["", *ours_only(ours, options)]
        lines += ["", "## Goals", "", *goals(ours, results)]
    lines += ["", "## Versions and fairness caveats", ""]
    for r in good:
        versions = ", ".join(f"{k} {v}" for k, v in r["versions"].items())
        lines.append(f"**{r['label']}** ({versions})")
        lines.append("")
        if "loads" in r:
            lines.append(
                f"- load average when it started {r['loads'][0]}, at its end {r['loads'][1]}"
            )
        for key, text in r["caveats"].items():
            lines.append(f"- {key}: {text}")
        lines.append("")
    failed = [r for r in results if "error" in r]
    if failed:
        lines += ["## Contenders that did not run", ""]
        for r in failed:
            lines += [f"**{r['name']}**:", "", "```", r["error"].strip(), "```", ""]
    lines += [
        "## How each figure is taken",
        "",
        "- Bulk and one by one: wall time of the enqueue calls in the benchmark's process, "
        "the queue's tables emptied (TRUNCATE, or FLUSH on Redis) before each run.",
        "- Drain: 2 worker processes started and proven ready (each has run a probe job), "
        "then the jobs enqueued in batches of 1,000; the rate is jobs / (last handler "
        "stamp - first). Worker CPU is user + system of the worker processes and their "
        "children over the drain (from /proc).",
        "- Idle pickup: 1 ready worker, 1 s to settle, the idle window, then one job at a "
        "time 0.2-0.4 s apart: the handler's stamp minus the time just before the enqueue "
        "call. The idle load is `xact_commit + xact_rollback` of the contender's database "
        "in `pg_stat_database` (statistics reach it within about a second, so it is "
        "approximate) or Redis's `total_commands_processed`.",
        "- Ours, in a request's transaction: pairs of transactions, alternating, each an "
        "UPDATE of one row of the request's own table and the commit, with and without one "
        "`enqueue()` inside; `--tx-pairs` pairs per round.",
        f"- Physical limit: the rows our `enqueue_many` wrote for {options.jobs:,} jobs, "
        "copied out "
        "and back in with `COPY ... FROM STDIN` through `psql` (the COPY's elapsed time "
        "as `\\timing` reports it, without psql's start-up and connection), into the "
        "same table with its indexes and NOTIFY trigger.",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--peers", default=",".join(CONTENDERS), help="comma-separated subset")
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs per bulk and drain run")
    parser.add_argument("--single", type=int, default=2_000, help="jobs enqueued one by one")
    parser.add_argument("--samples", type=int, default=60, help="idle pickup samples")
    parser.add_argument("--rounds", type=int, default=3, help="rounds (median of them)")
    parser.add_argument("--idle-seconds", type=float, default=10.0, help="idle load window")
    parser.add_argument(
        "--tx-pairs", type=int, default=1_000, help="ours: transaction pairs per round"
    )
    parser.add_argument(
        "--skip-install", action="store_true", help="use the peers' virtualenv as it is"
    )
    parser.add_argument(
        "--peers-python",
        default=str(VENV / "bin" / "python"),
        help="interpreter of the peers (default: var/peers-venv, which this script creates)",
    )
    parser.add_argument(
        "--out", default=str(OUT), help="where the Markdown goes (the raw results beside it, .json)"
    )
    parser.add_argument(
        "--render", metavar="JSON", help="only rewrite the Markdown from a run's saved results"
    )
    parser.add_argument("--timeout", type=float, default=3600, help="per contender, seconds")
    parser.add_argument("--one", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.one:
        print("RESULT " + json.dumps(child(options.one, options)), flush=True)
        return
    if options.render:
        record = json.loads(Path(options.render).read_text())
        Path(options.out).write_text(report(record))
        return
    names = [name.strip() for name in options.peers.split(",") if name.strip()]
    unknown = sorted(set(names) - set(CONTENDERS))
    if unknown:
        parser.error(f"unknown contender(s) {unknown}; known: {', '.join(CONTENDERS)}")
    failed = {} if options.skip_install else install(names)
    command = shlex.join(
        [os.path.relpath(sys.executable, ROOT), "benchmarks/peers.py", *sys.argv[1:]]
    )
    loads = [load_average()]
    began = datetime.now(UTC).strftime("%Y-%m-%d %H:%M")
    passed = [arg for arg in sys.argv[1:] if arg != "--skip-install"]
    results: list[dict[str, Any]] = []
    for name in names:
        if name in failed:
            results.append({"name": name, "error": failed[name]})
            continue
        python = sys.executable if name == "arcature" else options.peers_python
        print(f"--- {name}", file=sys.stderr, flush=True)
        started_load = load_average()
        try:
            result = run_contender(name, python, passed, options.timeout)
        except Exception:  # the child could not even start: say so, go on
            result = {"name": name, "error": traceback.format_exc()[-3000:]}
        result["loads"] = [started_load, load_average()]
        print(json.dumps(result), flush=True)
        results.append(result)
    loads.append(load_average())
    record = {
        "date": f"{began} to {datetime.now(UTC).strftime('%H:%M UTC')}",
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()} "
        f"{platform.release()}, Python {platform.python_version()}",
        "command": command,
        "loads": loads,
        "options": {key: getattr(options, key) for key in ("jobs", "single", "samples", "rounds")},
        "results": results,
    }
    out = Path(options.out)
    out.with_suffix(".json").write_text(json.dumps(record, indent=1) + "\n")
    text = report(record)
    out.write_text(text)
    print(text)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()

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
  database, or Redis commands/s) over ``--idle-seconds``. A worker that only polls
  (django-tasks-db, every 1 s) gets ``--poller-samples`` jobs spaced 0.2 s plus up to
  one interval, so they fall at every phase of its cycle.

A drain that has not started every job ``--drain-timeout`` seconds after its last
batch went in is measured on the jobs it ran (said next to its figure), so one slow
queue cannot hold up the run; ``--timeout`` bounds a contender as a whole. Before it
starts the script logs an estimate of each contender's time and of the total (from
the rates of an idle run on a 2-core machine), and each contender's real time after.

Every worker runs at its documented defaults; a worker is ready when it has run a
probe job (the same test for all), so no figure includes a start-up. Each figure is
the median of ``--rounds``. For ours also: what an enqueue adds to a request's own
transaction (p50/p99) and the physical limit of bulk enqueue (``COPY`` of the same
rows into our table from ``psql``). A contender that fails to install or to run is
reported with its error; the others still run.

``--readme`` also rewrites the peer table of the top-level README.md (between its
``peers:begin``/``peers:end`` markers) from the same results, so its figures are
this run's; ``--render JSON --readme`` does it from saved results.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
import traceback
from collections import deque
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
VENV = ROOT / "var" / "peers-venv"
OUT = ROOT / "benchmarks" / "peers.md"
README = ROOT / "README.md"
README_BEGIN = "<!-- peers:begin -->"
README_END = "<!-- peers:end -->"

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
#: What the README calls each contender, and the package whose version it shows.
README_LABELS: dict[str, tuple[str, str | None]] = {
    "arcature": ("django-arcature", None),
    "pgqueuer": ("pgqueuer {}", "pgqueuer"),
    "oban": ("Oban for Python {}", "oban"),
    "procrastinate": ("procrastinate {}", "procrastinate"),
    "django-tasks-db": ("django-tasks-db {}", "django-tasks-db"),
    "huey": ("Huey {} on Redis", "huey"),
}


class Expected:
    """Rough speeds of one contender, for the time estimate only (never reported):
    from the idle run of 2026-12-02 on a 2-core machine (django-tasks-db's from
    small runs the same afternoon); a slower machine takes longer."""

    def __init__(
        self,
        bulk: float,
        single: float,
        drain: float,
        start: float,
        poll: float = 0.0,
        pickup: float = 0.005,
        extras: float = 0.0,
    ) -> None:
        self.bulk = bulk  # jobs/s, bulk enqueue
        self.single = single  # jobs/s, one by one
        self.drain = drain  # jobs/s, 2 workers
        self.start = start  # seconds until a worker process has run its probe job
        self.poll = poll  # the worker's poll interval, 0 if woken by its server
        self.pickup = pickup  # seconds, idle pickup
        self.extras = extras  # seconds per round of the contender's own extra figures


EXPECTED: dict[str, Expected] = {
    "arcature": Expected(29_000, 920, 4_200, 1.5, extras=12.0),
    "pgqueuer": Expected(30_000, 1_830, 4_800, 1.5),
    "oban": Expected(4_800, 1_830, 1_700, 2.0),
    "procrastinate": Expected(10_700, 840, 270, 1.5),
    "django-tasks-db": Expected(1_300, 650, 80, 2.0, poll=1.0, pickup=0.5),
    "huey": Expected(7_300, 6_300, 2_300, 1.0),
}


def estimate(name: str, options: argparse.Namespace) -> float:
    """Seconds ``name`` should take with ``options`` on an idle 2-core machine."""
    e = EXPECTED[name]
    samples = min(options.samples, options.poller_samples) if e.poll else options.samples
    spacing = 0.2 + e.poll / 2 if e.poll else 0.3
    bulk = sum(options.jobs / e.bulk for batch in (1_000, 10_000) if batch <= options.jobs)
    drain = 2 * e.start + options.jobs / e.bulk + min(options.jobs / e.drain, options.drain_timeout)
    pickup = e.start + 1.0 + options.idle_seconds + samples * (spacing + e.pickup)
    one_round = bulk + options.single / e.single + drain + pickup + e.extras + 2.0  # 2 stops
    warm_up = min(100, options.single) / e.single + min(1_000, options.jobs) / e.bulk
    return float(5.0 + warm_up + options.rounds * one_round)  # 5 s: imports, schema, versions


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


# --- in the child: one contender ----------------------------------------------------------


def child(name: str, options: argparse.Namespace) -> dict[str, Any]:
    import importlib

    from benchmarks.peerkit.harness import Harness

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(f"stopped by signal {signum}")  # so the finally below runs

    signal.signal(signal.SIGTERM, stop)

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


def ensure_redis_server() -> str | None:
    """Install Debian's ``redis-server`` if it is not on PATH; -> why not, or None.

    Huey's contender starts its own server on a private port, so only the binary
    is needed. On a fresh machine the package lists may be empty: ``apt-get
    update`` once, then the install again. Through ``sudo -n`` when not root."""
    if shutil.which("redis-server"):
        return None
    if shutil.which("apt-get") is None:
        return "redis-server is missing and there is no apt-get to install it"
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = [*sudo, "apt-get", "install", "-y", "-q", "redis-server"]
    done = subprocess.run(install, capture_output=True, text=True, env=env)
    if done.returncode:
        subprocess.run([*sudo, "apt-get", "update", "-q"], capture_output=True, env=env)
        done = subprocess.run(install, capture_output=True, text=True, env=env)
    if done.returncode or shutil.which("redis-server") is None:
        return (
            "redis-server is missing and apt-get failed:\n" + (done.stderr or done.stdout)[-2000:]
        )
    return None


def install(names: list[str]) -> dict[str, str]:
    """Create the peers' virtualenv and install what ``names`` need; -> name: error."""
    failed: dict[str, str] = {}
    peers = [name for name in names if name != "arcature"]
    if "huey" in peers:
        missing = ensure_redis_server()
        if missing:
            failed["huey"] = missing
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
    """Run one contender's child; its stderr (the per-step log) is passed through as it
    comes. Past ``timeout`` the child gets SIGTERM, which it turns into an exit that
    stops its workers and servers (they run in sessions of their own, which killing
    the child alone would leave running), then SIGKILL 60 s later."""
    command = [python, str(Path(__file__).resolve()), "--one", name, *argv]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    tail: deque[str] = deque(maxlen=60)
    chunks: list[str] = []
    with subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:

        def relay() -> None:
            assert proc.stderr is not None
            for line in proc.stderr:
                sys.stderr.write(line)
                sys.stderr.flush()
                tail.append(line)

        def collect() -> None:
            assert proc.stdout is not None
            chunks.append(proc.stdout.read())

        readers = [threading.Thread(target=job, daemon=True) for job in (relay, collect)]
        for reader in readers:
            reader.start()
        try:
            proc.wait(timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            timed_out = True
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for reader in readers:
            reader.join(30)
    if timed_out:
        return {
            "name": name,
            "error": f"did not finish in {timeout:g} s (--timeout); its last lines:\n"
            + "".join(tail)[-2000:],
        }
    stdout = "".join(chunks)
    lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode or not lines:
        return {
            "name": name,
            "error": (stdout + "".join(tail))[-3000:] or f"exit {proc.returncode}",
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
    """Issue 21's targets, each against this run's own numbers and, where the run
    measured one, the physical limit of the same figure on this machine: a goal that
    even the limit misses is out of reach here, whatever the queue's code does."""
    postgres = [r for r in results if r["name"] in POSTGRES_PEERS]
    huey = next((r for r in results if r["name"] == "huey" and "error" not in r), None)
    rows: list[tuple[str, str, str, bool | None, bool]] = []

    def against(
        figure: str,
        pool: list[dict[str, Any]],
        target: float,
        what: str,
        limit: tuple[str, float] | None = None,
    ) -> None:
        """``limit``: the limit's description and its value, in ``figure``'s unit."""
        best = best_peer(pool, figure)
        mine = ours.get(figure)
        if best is None or mine is None:
            rows.append((what, "not measured", "", None, False))
            return
        got = ratio(figure, mine, best[1])
        shown, reachable = "", True
        if limit is not None:
            most = ratio(figure, limit[1], best[1])
            shown = f"{limit[0]} {fmt(figure, limit[1])}: {most:.2f}x"
            reachable = most >= target
        rows.append(
            (what, f"{got:.2f}x ({best[0]} {fmt(figure, best[1])})", shown, got >= target,
             not reachable)
        )  # fmt: skip

    def floor(key: str, text: str) -> tuple[str, float] | None:
        return (text, ours[key]) if ours.get(key) else None

    copy = floor("copy_rate", "`COPY` of the same rows")
    against("bulk_1000", postgres, 1.5, "bulk enqueue >= 1.5x the fastest PostgreSQL peer", copy)
    if ours.get("copy_rate") and ours.get("bulk_1000"):
        share = ours["bulk_1000"] / ours["copy_rate"]
        rows.append(
            ("bulk enqueue within 70 % of COPY", f"{share:.0%} of COPY",
             f"`COPY` {ours['copy_rate']:,.0f}/s", share >= 0.7, False)
        )  # fmt: skip
    pickup = ours.get("pickup_p50_ms")
    if pickup is not None:
        limit = ours.get("floor_pickup_ms")
        shown = ""
        if limit is not None:
            shown = (
                f"INSERT + NOTIFY, LISTEN, one-statement claim: {limit:.2f} ms (commit "
                f"{ours['floor_pickup_commit_ms']:.2f}, delivery "
                f"{ours['floor_pickup_delivery_ms']:.2f}, claim "
                f"{ours['floor_pickup_claim_ms']:.2f}); ours {pickup - limit:.1f} ms above it"
            )
        rows.append(
            ("idle pickup p50 <= 1.5 ms", f"{pickup:.1f} ms", shown, pickup <= 1.5,
             limit is not None and limit > 1.5)
        )  # fmt: skip
    lean = floor("floor_single_any", "a two-column row, bare INSERT")
    bare = floor("floor_single", "our row, bare INSERT")
    against("single", results, 1.25, "one-by-one enqueue >= 1.25x the fastest peer", lean)
    against(
        "single", postgres, 1.25, "one-by-one enqueue >= 1.25x the fastest PostgreSQL peer", bare
    )
    added = ours.get("in_tx_added_p50_us")
    if added is not None:
        limit = ours.get("floor_in_tx_added_p50_us")
        shown = "" if limit is None else f"our row's bare INSERT adds {limit:.0f} µs"
        rows.append(
            ("in-transaction enqueue p50 <= 150 µs", f"{added:.0f} µs", shown, added <= 150,
             limit is not None and limit > 150)
        )  # fmt: skip
    against("drain_2", [huey] if huey else [], 2.5, "drain >= 2.5x Huey on Redis")
    against("drain_2", postgres, 2.0, "drain >= 2x the fastest PostgreSQL peer")
    lines = [
        "| goal (issue 21) | this run | physical limit on this machine, this run | met |",
        "|---|---|---|---|",
    ]
    for what, value, limit_text, met, out_of_reach in rows:
        verdict = "—" if met is None else "yes" if met else "no"
        if met is False and out_of_reach:
            verdict = "no: out of reach (the limit misses it too)"
        lines.append(f"| {what} | {value} | {limit_text or '—'} | {verdict} |")
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


def partial_drain(result: dict[str, Any], jobs: int) -> bool:
    """Whether a round of this contender's drain timed out (``--drain-timeout``)."""
    return bool(result.get("drain_done") is not None and result["drain_done"] < jobs)


def readme_table(record: dict[str, Any]) -> str:
    """The README's peer table and its summary, from one run's saved results."""
    results = [r for r in record["results"] if "error" not in r]
    jobs = record["options"]["jobs"]
    day = record["date"].split()[0]
    times = "\N{MULTIPLICATION SIGN}"
    ours = next((r for r in results if r["name"] == "arcature"), None)
    server = (ours or {}).get("versions", {}).get("PostgreSQL", "")
    postgres_label = f"PostgreSQL {server.split('.')[0]}" if server else "PostgreSQL"
    intro = (
        f"Beside other Python queues on {postgres_label} and Huey on Redis, each at its "
        f"documented defaults, the same no-op job, one run of `benchmarks/peers.py` on {day} "
        "(this table is written by its `--readme` from the results of the same run as "
        "[benchmarks/peers.md](benchmarks/peers.md), which has the machine, versions, "
        "caveats, load average and physical limits):"
    )
    lines = [
        README_BEGIN,
        textwrap.fill(intro, 88, break_on_hyphens=False, break_long_words=False),
        "",
        "| contender | bulk enqueue (batches of 1,000) | enqueue one by one "
        "| drain, 2 processes | idle pickup p50 |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        label, package = README_LABELS.get(r["name"], (r["label"], None))
        if package:
            version = r["versions"].get(package, "")
            label = label.format(".".join(version.split(".")[:2]))
        drained = fmt("drain_2", r.get("drain_2"))
        if partial_drain(r, jobs):
            drained += f" ({r['drain_done']:,.0f} of {jobs:,} run in time)"
        lines.append(
            f"| {label} | {fmt('bulk_1000', r.get('bulk_1000'))} "
            f"| {fmt('single', r.get('single'))} | {drained} "
            f"| {fmt('p_ms', r.get('pickup_p50_ms'))} |"
        )
    postgres = [r for r in results if r["name"] in POSTGRES_PEERS]
    huey = [r for r in results if r["name"] == "huey"]
    said: list[str] = []
    if ours is not None:
        drains = []
        for pool in (huey, postgres):
            best = best_peer(pool, "drain_2")
            if best is not None and ours.get("drain_2"):
                peer = next(r for r in pool if r["label"] == best[0])
                kept = peer.get("caveats", {}).get("finished jobs", "")
                why = " (which deletes finished jobs; we keep them)" if "delete" in kept else ""
                drains.append(
                    f"{ratio('drain_2', ours['drain_2'], best[1]):.2f}{times} as fast as "
                    f"{best[0]}{why}"
                )
        if drains:
            said.append("drained " + " and ".join(drains))
        bulk = []
        best = best_peer(postgres, "bulk_1000")
        if best is not None and ours.get("bulk_1000"):
            bulk.append(f"{ratio('bulk_1000', ours['bulk_1000'], best[1]):.2f}{times} {best[0]}")
        if ours.get("copy_rate") and ours.get("bulk_1000"):
            share = ours["bulk_1000"] / ours["copy_rate"]
            bulk.append(f"{share:.0%} of a `COPY` of the same rows into our table")
        if bulk:
            said.append("bulk-enqueued at " + " and ".join(bulk))
    if said:
        summary = f"In that run we {', and '.join(said)}."
        lines += ["", textwrap.fill(summary, 88, break_on_hyphens=False, break_long_words=False)]
    lines.append(README_END)
    return "\n".join(lines)


def write_readme(path: Path, record: dict[str, Any]) -> None:
    """Replace the peer table between the markers of ``path`` (README.md)."""
    text = path.read_text()
    if README_BEGIN not in text or README_END not in text:
        raise SystemExit(f"{path} has no {README_BEGIN} ... {README_END} block to rewrite")
    head, rest = text.split(README_BEGIN, 1)
    _, tail = rest.split(README_END, 1)
    path.write_text(head + readme_table(record) + tail)


def report(record: dict[str, Any]) -> str:
    results: list[dict[str, Any]] = record["results"]
    options = argparse.Namespace(**{"poller_samples": None, **record["options"]})
    loads = record["loads"]
    good = [r for r in results if "error" not in r]
    took = f" ({record['seconds'] / 60:.1f} min)" if "seconds" in record else ""
    lines = [
        "# django-arcature beside other Python job queues",
        "",
        f"Measured {record['date']}{took} by `benchmarks/peers.py`: {record['machine']}; "
        f"load average before {loads[0]}, after {loads[1]} (1, 5 and 15 minutes).",
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
        drained = fmt("drain_2", r.get("drain_2"))
        if partial_drain(r, options.jobs):
            drained += f" ({r['drain_done']:,.0f} of {options.jobs:,} run in time)"
        lines.append(
            f"| {r['label']} | {fmt('bulk_1000', r.get('bulk_1000'))} "
            f"| {fmt('bulk_10000', r.get('bulk_10000'))} "
            f"| {fmt('p_ms', r.get('pickup_p50_ms'))} / {fmt('p_ms', r.get('pickup_p95_ms'))} "
            f"| {fmt('single', r.get('single'))} | {drained} "
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
            took = f" ({r['seconds'] / 60:.1f} min)" if "seconds" in r else ""
            lines.append(
                f"- load average when it started {r['loads'][0]}, at its end {r['loads'][1]}{took}"
            )
        for key, text in r["caveats"].items():
            lines.append(f"- {key}: {text}")
        if r.get("samples", options.samples) != options.samples:
            lines.append(
                f"- pickup samples: {r['samples']} per round (its worker polls: each sample "
                "waits up to one poll interval), spaced over a whole interval"
            )
        if partial_drain(r, options.jobs):
            lines.append(
                f"- drain: not every job had started {r['drain_timeout']:g} s after the "
                f"last batch (`--drain-timeout`); its rate is that of the "
                f"{r['drain_done']:,.0f} or more it ran in each round, over their own span"
            )
        lines.append("")
    failed = [r for r in results if "error" in r]
    if failed:
        lines += ["## Contenders that did not run", ""]
        for r in failed:
            lines += [f"**{r['name']}**:", "", "```", r["error"].strip(), "```", ""]
    drain_timeout = record["options"].get("drain_timeout")
    timed_out = (
        f" A queue that has not started every job {drain_timeout:g} s after the last "
        "batch (`--drain-timeout`) is measured on the jobs it started, and says so."
        if drain_timeout is not None
        else ""
    )
    lines += [
        "## How each figure is taken",
        "",
        "- Bulk and one by one: wall time of the enqueue calls in the benchmark's process, "
        "the queue's tables emptied (TRUNCATE, or FLUSH on Redis) before each run.",
        "- Drain: 2 worker processes started and proven ready (each has run a probe job), "
        "then the jobs enqueued in batches of 1,000; the rate is jobs / (last handler "
        f"stamp - first).{timed_out} Worker CPU is user + system of the worker "
        "processes and their children over the drain (from /proc), per job run.",
        "- Idle pickup: 1 ready worker, 1 s to settle, the idle window, then one job at a "
        "time 0.2-0.4 s apart (a worker that polls: 0.2 s plus up to one poll interval, "
        "so the samples fall at every phase of its cycle): the handler's stamp minus the "
        "time just before the enqueue call. The idle load is "
        "`xact_commit + xact_rollback` of the contender's database "
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
        "- The other physical limits (the Goals table), measured in ours' run on the same "
        "database with none of our code or Django's in the way: *one by one*, the very "
        "INSERT our `enqueue()` sends (its parameters merged, a fresh id each time) and "
        "a two-column row into a table of two indexes, each on a psycopg connection of "
        "its own in autocommit, `--single` rows per round; *in a transaction*, that "
        "INSERT through Django's cursor in place of the `enqueue()` call, paired as "
        "ours is; *idle pickup*, `benchmarks/pickup_floor.py`: one process inserts a "
        "row and NOTIFYs in one round trip, another LISTENs and claims the row with "
        "one `UPDATE ... RETURNING` (its commit relaxed, as ours is), `--samples` "
        "times, the median. A goal the limit itself misses is out of reach on this "
        "machine.",
        "",
    ]
    return "\n".join(lines)


#: ``--quick``: a check that everything runs, in about a third of the time (one round,
#: fewer pickup and one-by-one jobs) but the same 10,000-job bulk and drain runs.
QUICK = {"rounds": 1, "samples": 30, "single": 1_000, "idle_seconds": 5.0, "tx_pairs": 300}


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--peers", default=",".join(CONTENDERS), help="comma-separated subset")
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs per bulk and drain run")
    parser.add_argument("--single", type=int, default=2_000, help="jobs enqueued one by one")
    parser.add_argument("--samples", type=int, default=60, help="idle pickup samples")
    parser.add_argument(
        "--poller-samples",
        type=int,
        default=20,
        help="idle pickup samples at most for a worker that polls (each costs ~1 interval)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds (median of them)")
    parser.add_argument("--idle-seconds", type=float, default=10.0, help="idle load window")
    parser.add_argument(
        "--drain-timeout",
        type=float,
        default=60.0,
        help="seconds after the last batch before a drain is measured on the jobs it ran",
    )
    parser.add_argument(
        "--tx-pairs", type=int, default=1_000, help="ours: transaction pairs per round"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="one round, fewer samples and one-by-one jobs, same bulk and drain "
        f"(sets {', '.join(f'--{k.replace("_", "-")} {v}' for k, v in QUICK.items())} "
        "unless given)",
    )
    parser.add_argument(
        "--skip-install", action="store_true", help="use the peers' virtualenv as it is"
    )
    parser.add_argument(
        "--install-only",
        action="store_true",
        help="create or update the peers' virtualenv (and redis-server), run nothing",
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
    parser.add_argument(
        "--readme",
        nargs="?",
        const=str(README),
        metavar="PATH",
        help="also rewrite the peer table of README.md (or PATH) from the same results",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        help="per contender, seconds (default: 3 times its estimate plus 5 minutes)",
    )
    parser.add_argument("--one", help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.quick:
        given = {arg.split("=")[0] for arg in argv}
        for key, value in QUICK.items():
            if f"--{key.replace('_', '-')}" not in given:
                setattr(options, key, value)
    return options


def minutes(seconds: float) -> str:
    return f"{seconds / 60:.1f} min"


def main() -> None:
    options = parse(sys.argv[1:])
    if options.one:
        print("RESULT " + json.dumps(child(options.one, options)), flush=True)
        return
    if options.render:
        record = json.loads(Path(options.render).read_text())
        Path(options.out).write_text(report(record))
        if options.readme:
            write_readme(Path(options.readme), record)
        return
    names = [name.strip() for name in options.peers.split(",") if name.strip()]
    unknown = sorted(set(names) - set(CONTENDERS))
    if unknown:
        sys.exit(f"unknown contender(s) {unknown}; known: {', '.join(CONTENDERS)}")
    if options.install_only:
        failed = install(names)
        for name, why in failed.items():
            print(f"{name}: {why}", file=sys.stderr)
        sys.exit(1 if failed else 0)
    expected = {name: estimate(name, options) for name in names}
    print(
        "estimate (idle 2-core machine): "
        + ", ".join(f"{name} {minutes(seconds)}" for name, seconds in expected.items())
        + f"; total {minutes(sum(expected.values()))} plus the install",
        file=sys.stderr,
        flush=True,
    )
    failed = {} if options.skip_install else install(names)
    command = shlex.join(
        [os.path.relpath(sys.executable, ROOT), "benchmarks/peers.py", *sys.argv[1:]]
    )
    loads = [load_average()]
    began = datetime.now(UTC).strftime("%Y-%m-%d %H:%M")
    started = time.monotonic()
    passed = [arg for arg in sys.argv[1:] if arg != "--skip-install"]
    results: list[dict[str, Any]] = []
    for index, name in enumerate(names):
        if name in failed:
            results.append({"name": name, "error": failed[name]})
            continue
        python = sys.executable if name == "arcature" else options.peers_python
        timeout = options.timeout or 3 * expected[name] + 300
        print(
            f"--- {name} (estimate {minutes(expected[name])}, limit {minutes(timeout)})",
            file=sys.stderr,
            flush=True,
        )
        started_load = load_average()
        began_one = time.monotonic()
        try:
            result = run_contender(name, python, passed, timeout)
        except Exception:  # the child could not even start: say so, go on
            result = {"name": name, "error": traceback.format_exc()[-3000:]}
        took = time.monotonic() - began_one
        result["loads"] = [started_load, load_average()]
        result["seconds"] = round(took, 1)
        left = sum(expected[other] for other in names[index + 1 :] if other not in failed)
        print(
            f"--- {name} took {minutes(took)} (estimate {minutes(expected[name])}); "
            f"{minutes(time.monotonic() - started)} so far, about {minutes(left)} to go",
            file=sys.stderr,
            flush=True,
        )
        print(json.dumps(result), flush=True)
        results.append(result)
    loads.append(load_average())
    record = {
        "date": f"{began} to {datetime.now(UTC).strftime('%H:%M UTC')}",
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()} "
        f"{platform.release()}, Python {platform.python_version()}",
        "command": command,
        "loads": loads,
        "seconds": round(time.monotonic() - started, 1),
        "options": {
            key: getattr(options, key)
            for key in ("jobs", "single", "samples", "poller_samples", "rounds", "drain_timeout")
        },
        "results": results,
    }
    out = Path(options.out)
    out.with_suffix(".json").write_text(json.dumps(record, indent=1) + "\n")
    text = report(record)
    out.write_text(text)
    if options.readme:
        write_readme(Path(options.readme), record)
    print(text)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()

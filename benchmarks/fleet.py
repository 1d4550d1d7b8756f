"""Many worker hosts against one PostgreSQL: drain throughput and claim latency by fleet size.

    sudo .venv/bin/python benchmarks/fleet.py                       # writes benchmarks/scale.md
    sudo .venv/bin/python benchmarks/fleet.py --workers 1,4 --rtt 0 --no-write   # a quick try

Needs root: each simulated host is a Linux network namespace (``arc-h1`` …
``arc-hN``) joined to the root namespace by a veth pair (10.77.i.1 outside,
10.77.i.2 inside). The kernel here has no ``sch_netem``, so latency comes from
``benchmarks/delay_proxy.py``: one proxy process per host listens on 10.77.i.1:6543
and forwards to PostgreSQL on 127.0.0.1:5432, holding every chunk ``rtt/2`` in each
direction. PostgreSQL's own configuration is untouched. "No latency" runs the same
proxies with a delay of 0, so every row pays the same proxying cost; rows marked
"direct" connect to 127.0.0.1:5432 with no proxy and no namespace, to show that cost.

Workers are real ``arcature_worker`` processes (``benchmarks/fleet_worker.py`` adds
a timer around the claim), run with ``ip netns exec arc-hI`` and spread round-robin
over the hosts, with default options (4 threads, batch 50). Same-host wake-up hints
are off (the namespaces share one filesystem; real hosts would not). For each fleet
size K and round trip:

* **pickup**: K idle workers; jobs enqueued one at a time (from the root namespace,
  directly), 0.15 to 0.3 s apart; latency is the claim's ``started_at`` (database clock)
  minus the moment just before ``enqueue()``. Every idle worker LISTENs, so each job
  wakes all K of them: the claims per job and the empty ones are counted.
* **drain**: ``--jobs`` no-op jobs enqueued in one ``COPY`` while the K workers idle;
  throughput is jobs / (last ``finished_at`` minus first ``started_at``), both on the
  database's clock. During it: each claim's round trip as the worker timed it
  (p50/p95), claims that came back empty or short, PostgreSQL sessions by wait event
  (sampled every 100 ms from ``pg_stat_activity``), ungranted locks (``pg_locks``),
  transactions per job (``pg_stat_database``) and CPU seconds spent by the workers,
  their PostgreSQL backends and the proxies (from ``/proc``).

Namespaces, veths and proxies are removed on exit, and any left over from an earlier
run are removed before starting. The database is ``arc_fleet_bench`` (``--database``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PG = ("127.0.0.1", 5432)
CREDENTIALS = "arcature:arcature"
PROXY_PORT = 6543
NS_PREFIX = "arc-h"
VETH_PREFIX = "arcv"  # root side; the namespace side is arcp<i>
SETTINGS = "benchmarks.fleet_settings"
CLK_TCK = os.sysconf("SC_CLK_TCK")


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, check=check, capture_output=True, text=True)


# --- the simulated hosts ------------------------------------------------------------


class Network:
    """``hosts`` namespaces, each with a veth pair to the root namespace."""

    def __init__(self, hosts: int) -> None:
        self.hosts = hosts

    @staticmethod
    def teardown() -> None:
        """Remove every namespace and veth this script creates (idempotent)."""
        for name in sh("ip", "netns", "list", check=False).stdout.split("\n"):
            name = name.split(" ")[0]
            if name.startswith(NS_PREFIX):
                sh("ip", "netns", "del", name, check=False)
        for line in sh("ip", "-o", "link", "show", check=False).stdout.splitlines():
            ifname = line.split(":")[1].strip().split("@")[0]
            if ifname.startswith(VETH_PREFIX):
                sh("ip", "link", "del", ifname, check=False)

    def setup(self) -> None:
        self.teardown()
        for i in range(1, self.hosts + 1):
            ns, outer, inner = f"{NS_PREFIX}{i}", f"{VETH_PREFIX}{i}", f"arcp{i}"
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
            sh("ip", "link", "set", inner, "netns", ns)
            sh("ip", "addr", "add", f"10.77.{i}.1/24", "dev", outer)
            sh("ip", "link", "set", outer, "up")
            sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"10.77.{i}.2/24", "dev", inner)
            sh("ip", "netns", "exec", ns, "ip", "link", "set", inner, "up")
            sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")

    @staticmethod
    def gateway(host: int) -> str:
        return f"10.77.{host}.1"


class Proxies:
    """One delay proxy process per host, in the root namespace."""

    def __init__(self, hosts: int, rtt_ms: float) -> None:
        self.procs: list[subprocess.Popen[str]] = []
        for i in range(1, hosts + 1):
            proc = subprocess.Popen(
                [
                    sys.executable,
                    str(ROOT / "benchmarks" / "delay_proxy.py"),
                    "--listen",
                    f"{Network.gateway(i)}:{PROXY_PORT}",
                    "--target",
                    f"{PG[0]}:{PG[1]}",
                    "--rtt-ms",
                    str(rtt_ms),
                ],
                stdout=subprocess.PIPE,
                text=True,
            )
            self.procs.append(proc)
        for proc in self.procs:
            assert proc.stdout is not None
            if "listening" not in proc.stdout.readline():
                self.stop()
                raise SystemExit("a delay proxy did not start")

    def pids(self) -> list[int]:
        return [proc.pid for proc in self.procs]

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs = []


# --- measuring ------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def backend_pids(database: str) -> list[int]:
    """PostgreSQL backends connected to ``database`` (their process titles name it)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            title = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if title.startswith(b"postgres: ") and f" {database} ".encode() in title:
            pids.append(int(entry.name))
    return pids


def machine_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    idle = values[3] + values[4]
    return (sum(values) - idle) / CLK_TCK, sum(values) / CLK_TCK


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def percentile(ordered: Sequence[float], pct: float) -> float:
    if not ordered:
        return float("nan")
    return ordered[max(0, round(len(ordered) * pct / 100) - 1)]


class Sampler(threading.Thread):
    """Samples ``pg_stat_activity`` and ``pg_locks`` for one database every ``every`` seconds."""

    def __init__(self, dsn: str, database: str, every: float = 0.1) -> None:
        super().__init__(daemon=True)
        self.dsn, self.database, self.every = dsn, database, every
        self.events: Counter[str] = Counter()
        self.samples = 0
        self.waiting_locks = 0
        self._finish = threading.Event()

    def run(self) -> None:
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self._finish.is_set():
                rows = conn.execute(
                    "SELECT state, wait_event_type, wait_event FROM pg_stat_activity "
                    "WHERE datname = %s AND pid <> pg_backend_pid()",
                    [self.database],
                ).fetchall()
                locks = conn.execute(
                    "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database "
                    "WHERE NOT l.granted AND d.datname = %s",
                    [self.database],
                ).fetchone()
                self.samples += 1
                self.waiting_locks += int(locks[0]) if locks else 0
                for state, kind, event in rows:
                    if state == "active":
                        label = f"{kind}:{event}" if kind else "CPU"
                    elif state == "idle in transaction":
                        label = "idle in transaction"
                    else:
                        continue  # idle sessions: waiting for the next command
                    self.events[label] += 1
                self._finish.wait(self.every)

    def stop(self) -> None:
        self._finish.set()
        self.join()

    def summary(self) -> dict[str, Any]:
        n = max(self.samples, 1)
        return {
            "samples": self.samples,
            "sessions_per_sample": {k: v / n for k, v in self.events.most_common()},
            "waiting_locks_per_sample": self.waiting_locks / n,
        }


@dataclass
class Worker:
    proc: subprocess.Popen[bytes]
    log: Path
    stats: Path
    host: int | None

    def records(self) -> dict[str, Any]:
        try:
            data: dict[str, Any] = json.loads(self.stats.read_text())
        except (OSError, ValueError):
            return {"claims": [], "flag_reads": []}
        return data


@dataclass
class Fleet:
    """K worker processes spread round-robin over the hosts (or all direct)."""

    count: int
    hosts: int
    database: str
    direct: bool
    env: dict[str, str] = field(default_factory=dict)
    workers: list[Worker] = field(default_factory=list)

    def url(self, host: int | None) -> str:
        where = f"{PG[0]}:{PG[1]}" if host is None else f"{Network.gateway(host)}:{PROXY_PORT}"
        return f"postgres://{CREDENTIALS}@{where}/{self.database}"

    def start(self, timeout: float = 120) -> None:
        for n in range(self.count):
            host = None if self.direct else n % self.hosts + 1
            log = Path(tempfile.mkstemp(prefix="arc-fleet-", suffix=".log")[1])
            stats = log.with_suffix(".json")
            env = {
                **os.environ,
                "PYTHONPATH": str(ROOT),
                "DJANGO_SETTINGS_MODULE": SETTINGS,
                "DATABASE_URL": self.url(host),
                "ARCATURE_FLEET_STATS": str(stats),
                **self.env,
            }
            argv = [
                sys.executable,
                "-m",
                "benchmarks.fleet_worker",
                "--queue",
                "default",
                "-v",
                "1",
            ]
            if host is not None:
                argv = ["ip", "netns", "exec", f"{NS_PREFIX}{host}", *argv]
            with open(log, "w") as out:
                proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=out)
            self.workers.append(Worker(proc, log, stats, host))
        deadline = time.monotonic() + timeout
        for worker in self.workers:
            while " started" not in worker.log.read_text():
                if time.monotonic() > deadline or worker.proc.poll() is not None:
                    output = worker.log.read_text()
                    self.stop()
                    raise SystemExit(f"a worker did not start:\n{output}")
                time.sleep(0.05)

    def pids(self) -> list[int]:
        return [worker.proc.pid for worker in self.workers]

    def stop(self) -> tuple[list[tuple[float, float, int, int]], list[float]]:
        """Stop the workers; every claim they timed and every flag read, in time order."""
        for worker in self.workers:
            if worker.proc.poll() is None:
                worker.proc.terminate()
        claims: list[tuple[float, float, int, int]] = []
        flag_reads: list[float] = []
        for worker in self.workers:
            try:
                worker.proc.wait(60)
            except subprocess.TimeoutExpired:
                worker.proc.kill()
                worker.proc.wait()
            records = worker.records()
            claims += [(c[0], c[1], c[2], c[3]) for c in records["claims"]]
            flag_reads += records["flag_reads"]
            worker.log.unlink(missing_ok=True)
            worker.stats.unlink(missing_ok=True)
        self.workers = []
        return sorted(claims), sorted(flag_reads)


def claim_summary(claims: Sequence[tuple[float, float, int, int]]) -> dict[str, Any]:
    durations = sorted(c[1] * 1000 for c in claims)
    return {
        "claims": len(claims),
        "claim_p50_ms": statistics.median(durations) if durations else float("nan"),
        "claim_p95_ms": percentile(durations, 95),
        "empty_claims": sum(1 for c in claims if c[3] == 0),
        "short_claims": sum(1 for c in claims if 0 < c[3] < c[2]),
    }


class Bench:
    """The measurements, from the root namespace, on the benchmark database."""

    def __init__(self, options: argparse.Namespace) -> None:
        self.options = options
        self.database = options.database
        self.admin_dsn = f"postgresql://{CREDENTIALS}@{PG[0]}:{PG[1]}/postgres"

    def prepare(self) -> None:
        import psycopg

        with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
            if not conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", [self.database]
            ).fetchone():
                conn.execute(f'CREATE DATABASE "{self.database}"')
        os.environ["DATABASE_URL"] = f"postgres://{CREDENTIALS}@{PG[0]}:{PG[1]}/{self.database}"
        os.environ["DJANGO_SETTINGS_MODULE"] = SETTINGS
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)

    def clear(self) -> None:
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute("TRUNCATE TABLE django_arcature_job")

    def active(self) -> int:
        from django.db import connection

        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*) FROM django_arcature_job WHERE status IN ('pending', 'running')"
            )
            return int(cursor.fetchone()[0])

    def wait_drained(self, timeout: float = 900) -> int:
        """Poll until no job is pending or running; returns how many polls it took."""
        deadline = time.monotonic() + timeout
        polls = 1
        while self.active():
            if time.monotonic() > deadline:
                raise SystemExit(f"jobs did not drain in {timeout:g}s")
            time.sleep(0.05)
            polls += 1
        return polls

    def xact_commits(self) -> int:
        import psycopg

        with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
            conn.execute("SELECT pg_stat_clear_snapshot()")
            row = conn.execute(
                "SELECT xact_commit FROM pg_stat_database WHERE datname = %s", [self.database]
            ).fetchone()
        return int(row[0]) if row else 0

    def pickup(self) -> tuple[dict[str, Any], float, float]:
        """Idle pickup latency; returns (figures, window start, window end)."""
        from django.db import connection

        from benchmarks.benchapp.jobs import noop

        self.clear()
        time.sleep(1.5)  # the workers settle into their idle wait (LISTEN probed)
        start = time.time()
        sent: list[tuple[Any, float]] = []
        for _ in range(self.options.samples):
            time.sleep(random.uniform(0.15, 0.3))
            before = time.time()
            sent.append((noop.enqueue().id, before))
        self.wait_drained()
        end = time.time()
        with connection.cursor() as cursor:
            cursor.execute("SELECT id, started_at FROM django_arcature_job")
            started = {pk: moment.timestamp() for pk, moment in cursor.fetchall()}
        latency = sorted((started[pk] - t0) * 1000 for pk, t0 in sent)
        return (
            {
                "pickup_p50_ms": statistics.median(latency),
                "pickup_p95_ms": percentile(latency, 95),
            },
            start,
            end,
        )

    def drain(self, fleet: Fleet, proxies: Proxies | None) -> tuple[dict[str, Any], float, float]:
        from django.db import connection

        from benchmarks.benchapp.jobs import noop

        jobs = self.options.jobs
        self.clear()
        time.sleep(1.0)
        backends = backend_pids(self.database)
        workers_pids = fleet.pids()
        proxy_pids = proxies.pids() if proxies else []
        cpu_before = {pid: cpu_seconds(pid) for pid in [*backends, *workers_pids, *proxy_pids]}
        commits_before = self.xact_commits()
        busy_before = machine_busy()
        sampler = Sampler(self.admin_dsn, self.database)
        sampler.start()
        start = time.time()
        noop.enqueue_many([[]] * jobs)
        polls = self.wait_drained()
        end = time.time()
        sampler.stop()
        busy_after = machine_busy()
        backends = sorted(set(backends) | set(backend_pids(self.database)))
        cpu = {pid: cpu_seconds(pid) - cpu_before.get(pid, 0.0) for pid in backends}
        worker_cpu = sum(cpu_seconds(pid) - cpu_before[pid] for pid in workers_pids)
        proxy_cpu = sum(cpu_seconds(pid) - cpu_before[pid] for pid in proxy_pids)
        time.sleep(1.2)  # pg_stat_database is flushed at most once a second per backend
        commits = self.xact_commits() - commits_before - polls - 1  # our enqueue and polls
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT count(*), min(started_at), max(finished_at) FROM django_arcature_job "
                "WHERE status = 'succeeded'"
            )
            done, first, last = cursor.fetchone()
        if done != jobs:
            raise SystemExit(f"only {done} of {jobs} jobs succeeded")
        seconds = max((last - first).total_seconds(), 1e-6)
        wall = busy_after[1] - busy_before[1]
        return (
            {
                "drain_per_s": jobs / seconds,
                "drain_seconds": seconds,
                "xacts_per_job": commits / jobs,
                "cpu_workers_s": worker_cpu,
                "cpu_postgres_s": sum(cpu.values()),
                "cpu_proxies_s": proxy_cpu,
                "machine_busy": (busy_after[0] - busy_before[0]) / wall if wall else float("nan"),
                **sampler.summary(),
            },
            start,
            end,
        )

    def measure(self, count: int, proxies: Proxies | None, direct: bool) -> dict[str, Any]:
        fleet = Fleet(count, self.options.hosts, self.database, direct)
        load = load_average()
        fleet.start()
        try:
            pickup, p_start, p_end = self.pickup()
            drain, d_start, d_end = self.drain(fleet, proxies)
        finally:
            claims, _ = fleet.stop()
        in_pickup = [c for c in claims if p_start <= c[0] <= p_end]
        in_drain = [c for c in claims if d_start <= c[0] <= d_end]
        pickup_claims = claim_summary(in_pickup)
        return {
            "workers": count,
            "load": load,
            **pickup,
            "pickup_claims_per_job": pickup_claims["claims"] / self.options.samples,
            "pickup_empty_per_job": pickup_claims["empty_claims"] / self.options.samples,
            "pickup_claim_p50_ms": pickup_claims["claim_p50_ms"],
            **drain,
            **claim_summary(in_drain),
        }

    def wake_ab(self, count: int, old: bool) -> dict[str, Any]:
        """Pickup only, with the wake-up as it is or as it was (pause flags re-read)."""
        env = {"ARCATURE_FLEET_REREAD_PAUSES": "1"} if old else {}
        fleet = Fleet(count, self.options.hosts, self.database, False, env)
        load = load_average()
        fleet.start()
        try:
            pickup, p_start, p_end = self.pickup()
        finally:
            claims, flag_reads = fleet.stop()
        in_pickup = claim_summary([c for c in claims if p_start <= c[0] <= p_end])
        reads = sum(1 for t in flag_reads if p_start <= t <= p_end)
        samples = self.options.samples
        return {
            "workers": count,
            "variant": "before (flags re-read)" if old else "after",
            "load": load,
            **pickup,
            "claims_per_job": in_pickup["claims"] / samples,
            "flag_reads_per_job": reads / samples,
            "claim_p50_ms": in_pickup["claim_p50_ms"],
        }


# --- the run ---------------------------------------------------------------------------


@contextlib.contextmanager
def maybe_proxies(hosts: int, rtt: float | None) -> Iterator[Proxies | None]:
    if rtt is None:
        yield None
        return
    proxies = Proxies(hosts, rtt)
    try:
        yield proxies
    finally:
        proxies.stop()


def run(options: argparse.Namespace) -> list[dict[str, Any]]:
    bench = Bench(options)
    bench.prepare()
    network = Network(options.hosts)
    results: list[dict[str, Any]] = []
    try:
        network.setup()
        for round_ in range(options.rounds):
            for rtt in [*options.rtt, *([None] if options.direct else [])]:
                with maybe_proxies(options.hosts, rtt) as proxies:
                    counts = options.workers if rtt is not None else options.direct
                    for count in counts:
                        result = bench.measure(count, proxies, direct=rtt is None)
                        result["rtt"] = "direct" if rtt is None else f"{rtt:g} ms"
                        result["round"] = round_
                        print(json.dumps(result), flush=True)
                        results.append(result)
    finally:
        network.teardown()
    return results


def run_wake_ab(options: argparse.Namespace) -> list[dict[str, Any]]:
    """Pickup before/after the wake-up change, taking turns (the order flips each round)."""
    bench = Bench(options)
    bench.prepare()
    network = Network(options.hosts)
    results: list[dict[str, Any]] = []
    try:
        network.setup()
        for round_ in range(options.rounds):
            for rtt in options.rtt:
                with maybe_proxies(options.hosts, rtt) as proxies:
                    assert proxies is not None
                    for count in options.wake_ab:
                        order = (False, True) if (round_ + count) % 2 else (True, False)
                        for old in order:
                            result = bench.wake_ab(count, old)
                            result["rtt"] = f"{rtt:g} ms"
                            print(json.dumps(result), flush=True)
                            results.append(result)
    finally:
        network.teardown()
    return results


def wake_table(results: list[dict[str, Any]]) -> str:
    groups: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
    for r in results:
        groups.setdefault((r["rtt"], r["workers"], r["variant"]), []).append(r)
    lines = [
        "| added RTT | idle worker procs | wake-up | pickup p50 / p95 (ms) | claim call p50 (ms) "
        "| claims per job | pause-flag reads per job | rounds |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (rtt, workers, variant), runs in groups.items():
        med = {
            key: statistics.median(r[key] for r in runs)
            for key in (
                "pickup_p50_ms",
                "pickup_p95_ms",
                "claim_p50_ms",
                "claims_per_job",
                "flag_reads_per_job",
            )
        }
        lines.append(
            f"| {rtt} | {workers} | {variant} | {med['pickup_p50_ms']:.1f} / "
            f"{med['pickup_p95_ms']:.1f} | {med['claim_p50_ms']:.1f} "
            f"| {med['claims_per_job']:.1f} | {med['flag_reads_per_job']:.1f} | {len(runs)} |"
        )
    return "\n".join(lines)


def replace_block(name: str, body: str) -> None:
    path = ROOT / "benchmarks" / "scale.md"
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    text = path.read_text()
    block = f"{begin}\n{body}\n{end}"
    if begin in text and end in text:
        text = text[: text.index(begin)] + block + text[text.index(end) + len(end) :]
    elif "<!-- fleet:end -->" in text:
        at = text.index("<!-- fleet:end -->")
        text = text[:at] + block + "\n\n" + text[at:]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    path.write_text(text)


def median_rows(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (rtt, workers): the median of each number over the rounds."""
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in results:
        groups.setdefault((r["rtt"], r["workers"]), []).append(r)
    rows = []
    for (rtt, workers), runs in groups.items():
        row: dict[str, Any] = {"rtt": rtt, "workers": workers, "rounds": len(runs)}
        for key, value in runs[0].items():
            if isinstance(value, int | float) and key not in ("workers", "round"):
                row[key] = statistics.median(r[key] for r in runs)
        waits: Counter[str] = Counter()
        for r in runs:
            waits.update(r["sessions_per_sample"])
        row["waits"] = {k: v / len(runs) for k, v in waits.most_common()}
        row["loads"] = [r["load"] for r in runs]
        rows.append(row)
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| added RTT | worker procs | drain jobs/s | vs 1 proc | claim p50 / p95 (ms) "
        "| empty / short claims | txns per job | CPU s: workers / PG / proxies "
        "| machine busy | PG sessions active (CPU / waiting) | pickup p50 / p95 (ms) "
        "| claims per picked-up job |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    base: dict[str, float] = {}
    for row in rows:
        if row["workers"] == 1:
            base[row["rtt"]] = row["drain_per_s"]
    for row in rows:
        ratio = row["drain_per_s"] / base[row["rtt"]] if row["rtt"] in base else float("nan")
        waits = row["waits"]
        on_cpu = waits.get("CPU", 0.0)
        waiting = sum(v for k, v in waits.items() if k != "CPU")
        lines.append(
            f"| {row['rtt']} | {row['workers']} | {row['drain_per_s']:,.0f} | {ratio:.2f} "
            f"| {row['claim_p50_ms']:.1f} / {row['claim_p95_ms']:.1f} "
            f"| {row['empty_claims']:.0f} / {row['short_claims']:.0f} of {row['claims']:.0f} "
            f"| {row['xacts_per_job']:.3f} "
            f"| {row['cpu_workers_s']:.1f} / {row['cpu_postgres_s']:.1f} / "
            f"{row['cpu_proxies_s']:.1f} "
            f"| {row['machine_busy'] * 100:.0f} % | {on_cpu:.1f} / {waiting:.1f} "
            f"| {row['pickup_p50_ms']:.1f} / {row['pickup_p95_ms']:.1f} "
            f"| {row['pickup_claims_per_job']:.1f} ({row['pickup_empty_per_job']:.1f} empty) |"
        )
    return "\n".join(lines)


def wait_table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| added RTT | worker procs | sessions per sample, by state or wait event |",
        "|---|---|---|",
    ]
    for row in rows:
        waits = ", ".join(f"{k} {v:.2f}" for k, v in row["waits"].items() if v >= 0.01) or "—"
        lines.append(
            f"| {row['rtt']} | {row['workers']} | {waits}; ungranted locks "
            f"{row['waiting_locks_per_sample']:.2f} |"
        )
    return "\n".join(lines)


def write_scale(rows: list[dict[str, Any]], options: argparse.Namespace, load: str) -> None:
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    loads = "; ".join(f"{r['rtt']} x {r['workers']}: {', '.join(r['loads'])}" for r in rows)
    replace_block(
        "fleet:results",
        f"Measured {stamp} on {platform.machine()} ({os.cpu_count()} cores); "
        f"load average before the run: {load}. {options.hosts} simulated hosts, "
        f"{options.jobs:,} no-op jobs per drain, {options.samples} pickup samples, "
        f"median of {options.rounds} round(s) taken in turn.\n\n"
        f"```console\n$ {options.command}\n```\n\n{table(rows)}\n\n"
        f"PostgreSQL sessions of the benchmark database during the drain, averaged over "
        f"the 100 ms samples (idle sessions not counted):\n\n{wait_table(rows)}\n\n"
        f"Load average (1, 5, 15 min) before each measurement: {loads}.",
    )


def write_wake(results: list[dict[str, Any]], options: argparse.Namespace, load: str) -> None:
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    loads = ", ".join(sorted({r["load"].split()[0] for r in results}))
    replace_block(
        "fleet:wake",
        f"Measured {stamp}; load average before the run: {load} (1-minute load before each "
        f"measurement: {loads}). {options.samples} pickup samples per row, median of "
        f"{options.rounds} round(s); before and after take turns.\n\n"
        f"```console\n$ {options.command}\n```\n\n{wake_table(results)}",
    )


def numbers(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Needs root (network namespaces). See the module docstring for what is measured.",
    )
    parser.add_argument("--workers", type=numbers, default=[1, 2, 4, 8, 16], help="e.g. 1,2,4")
    parser.add_argument(
        "--rtt",
        type=lambda s: [float(x) for x in s.split(",")],
        default=[0.0, 2.0, 5.0],
        help="added round trips in ms, through the proxies (0 = proxy without delay)",
    )
    parser.add_argument(
        "--direct", type=numbers, default=[1, 16], help="worker counts run with no proxy"
    )
    parser.add_argument("--hosts", type=int, default=4, help="simulated hosts (namespaces)")
    parser.add_argument("--jobs", type=int, default=20_000, help="jobs per drain")
    parser.add_argument("--samples", type=int, default=30, help="pickup samples per fleet")
    parser.add_argument("--rounds", type=int, default=1, help="rounds, taken in turn (median)")
    parser.add_argument("--database", default="arc_fleet_bench")
    parser.add_argument("--no-write", action="store_true", help="print only")
    parser.add_argument("--cleanup", action="store_true", help="remove leftovers and exit")
    parser.add_argument(
        "--wake-ab",
        type=numbers,
        default=None,
        help="instead: idle pickup before/after the wake-up change, for these worker counts",
    )
    options = parser.parse_args()
    options.command = "sudo .venv/bin/python benchmarks/fleet.py " + " ".join(sys.argv[1:])
    if options.cleanup:
        Network.teardown()
        return
    if os.geteuid() != 0:
        raise SystemExit("benchmarks/fleet.py needs root (it creates network namespaces)")
    load = load_average()
    if options.wake_ab:
        results = run_wake_ab(options)
        print(wake_table(results))
        if not options.no_write:
            write_wake(results, options, load)
        return
    results = run(options)
    rows = median_rows(results)
    print(table(rows))
    if not options.no_write:
        write_scale(rows, options, load)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()

"""The four figures, measured the same way for every queue through its :class:`Peer`.

An adapter says only how its queue does each thing the documented way (enqueue one
job, enqueue a batch, start one worker process, empty its tables); the timing, the
waiting and the stamps are here, shared. Every job is the same no-op with one
integer argument, its key, that the handler stamps (:mod:`.stamp`).
"""

from __future__ import annotations

import os
import platform
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .stamp import StampReader

ROOT = Path(__file__).resolve().parent.parent.parent
BATCHES = (1_000, 10_000)


class PeerFailed(RuntimeError):
    """The queue did not do what was asked in time (a worker died, jobs never ran)."""


def percentile(ordered: list[float], pct: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    return ordered[max(0, round(len(ordered) * pct / 100) - 1)]


def pg_dsn(name: str) -> str:
    """The libpq URL of this contender's own database (each queue gets one of its own)."""
    user = os.environ.get("PEERS_PG_USER", "arcature")
    password = os.environ.get("PEERS_PG_PASSWORD", "arcature")
    host = os.environ.get("PEERS_PG_HOST", "127.0.0.1")
    port = os.environ.get("PEERS_PG_PORT", "5432")
    return f"postgresql://{user}:{password}@{host}:{port}/{name}"


def database_name(peer: str) -> str:
    base = os.environ.get("PEERS_DB_PREFIX", "arc_peers")
    return f"{base}_{peer.replace('-', '_')}"


def ensure_pg_database(name: str) -> None:
    """Create the database if missing, through psycopg (in every venv the script builds)."""
    import psycopg

    with psycopg.connect(pg_dsn("postgres"), autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')


def pg_transactions(name: str) -> int:
    """Commits plus rollbacks PostgreSQL has counted in database ``name``, read from
    another database so the reading itself is not counted."""
    import psycopg

    with psycopg.connect(pg_dsn("postgres"), autocommit=True) as conn:
        row = conn.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s", [name]
        ).fetchone()
    return int(row[0]) if row else 0


def pg_server_version() -> str:
    import psycopg

    with psycopg.connect(pg_dsn("postgres"), autocommit=True) as conn:
        row = conn.execute("SHOW server_version").fetchone()
    return str(row[0]) if row else "?"


def package_version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


class Peer:
    """One queue. Subclasses fill in the documented way of doing each step."""

    name = ""
    label = ""
    #: The fairness caveats printed next to the numbers.
    caveats: dict[str, str] = {}

    def versions(self) -> dict[str, str]:
        raise NotImplementedError

    def setup(self) -> None:
        """Create the database and install the queue's schema (idempotent)."""

    def clear(self) -> None:
        """Empty the queue's tables, finished jobs included."""
        raise NotImplementedError

    def enqueue_one(self, key: int) -> None:
        """One job, its own transaction (autocommit), as a request handler would."""
        raise NotImplementedError

    def enqueue_batch(self, keys: list[int]) -> None:
        """``len(keys)`` jobs with the queue's bulk call (or its documented substitute)."""
        raise NotImplementedError

    def worker_argv(self) -> list[str]:
        """The command line of one worker process, at its defaults."""
        raise NotImplementedError

    def worker_env(self) -> dict[str, str]:
        return {}

    def idle_counter(self) -> float | None:
        """A counter of the requests this queue's server has served (for the idle load)."""
        return None

    idle_unit = "transactions/s"
    #: Seconds between an idle worker's polls at its defaults, for a queue whose
    #: worker finds new jobs only by polling (0: the server wakes it). Its pickup
    #: samples are spaced over a whole interval, so they land at every phase of the
    #: poll cycle, and fewer are taken (``--poller-samples``): each costs about
    #: 0.2 s plus one interval.
    poll_interval = 0.0

    def extras(self, options: Any) -> dict[str, Any]:
        """Figures only this contender has (ours: in-transaction overhead, COPY)."""
        return {}

    def close(self) -> None:
        """Release connections and anything the adapter started."""


class Harness:
    def __init__(self, peer: Peer, options: Any) -> None:
        self.peer = peer
        self.options = options
        self.key = 0
        self.stamp_dir = Path(tempfile.mkdtemp(prefix="peers-stamps-"))
        self.reader = StampReader(self.stamp_dir)
        self.workers: list[tuple[subprocess.Popen[bytes], Path]] = []

    def keys(self, count: int) -> list[int]:
        first = self.key
        self.key += count
        return list(range(first, first + count))

    # -- workers ---------------------------------------------------------------------

    def start_workers(self, count: int, timeout: float = 90.0) -> None:
        """Start ``count`` worker processes and wait until each has run a probe job.

        Readiness is the same for every queue: probe jobs are enqueued until stamps
        from ``count`` distinct processes have come back (the stamp files are per
        process), so no figure includes a worker's start-up.
        """
        env = {
            **os.environ,
            "PEERS_STAMP_DIR": str(self.stamp_dir),
            "PYTHONPATH": str(ROOT),
            **self.peer.worker_env(),
        }
        for _ in range(count):
            log = Path(tempfile.mkstemp(prefix=f"peers-{self.peer.name}-", suffix=".log")[1])
            with open(log, "wb") as out:
                proc = subprocess.Popen(
                    self.peer.worker_argv(),
                    cwd=ROOT,
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # its own process group: stopped whole
                )
            self.workers.append((proc, log))
        deadline = time.monotonic() + timeout
        before = set(self.reader.poll())
        while True:
            for proc, log in self.workers:
                if proc.poll() is not None:
                    output = log.read_text(errors="replace")[-3000:]
                    self.stop_workers()
                    raise PeerFailed(f"a worker exited with status {proc.returncode}:\n{output}")
            seen = self.reader.poll()
            pids = {pid for key, (_, pid) in seen.items() if key not in before}
            if len(pids) >= count:
                return
            if time.monotonic() > deadline:
                output = self.workers[0][1].read_text(errors="replace")[-3000:]
                self.stop_workers()
                raise PeerFailed(f"workers not running after {timeout:g}s:\n{output}")
            self.peer.enqueue_one(self.keys(1)[0])
            time.sleep(0.2)

    def stop_workers(self) -> None:
        for proc, _ in self.workers:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc, log in self.workers:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            log.unlink(missing_ok=True)
        self.workers = []

    def workers_cpu(self) -> float:
        """User + system CPU seconds of the worker processes and their children."""
        ticks = os.sysconf("SC_CLK_TCK")
        total = 0.0
        for proc, _ in self.workers:
            for pid in [proc.pid, *_children(proc.pid)]:
                try:
                    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                total += (int(fields[11]) + int(fields[12])) / ticks
        return total

    def wait_stamped(
        self, keys: list[int], timeout: float, partial: bool = False
    ) -> dict[int, tuple[float, int]]:
        """The stamps of ``keys`` once all have one; after ``timeout`` seconds, those in
        hand if ``partial`` (a slow queue's drain is then measured on the jobs it ran
        in that time, instead of waiting for the rest), else :class:`PeerFailed`."""
        wanted = set(keys)
        deadline = time.monotonic() + timeout
        while True:
            seen = self.reader.poll()
            if wanted.issubset(seen):
                return {key: seen[key] for key in keys}
            if time.monotonic() > deadline:
                done = {key: seen[key] for key in keys if key in seen}
                if partial and len(done) >= 2:
                    return done
                missing = len(wanted) - len(done)
                raise PeerFailed(f"{missing} of {len(keys)} jobs had not started in {timeout:g}s")
            for proc, log in self.workers:
                if proc.poll() is not None:
                    raise PeerFailed(
                        f"a worker died (status {proc.returncode}):\n"
                        + log.read_text(errors="replace")[-3000:]
                    )
            time.sleep(0.01)

    # -- the figures -------------------------------------------------------------------

    def bulk(self, jobs: int, batch: int) -> float:
        self.peer.clear()
        keys = self.keys(jobs)
        started = time.perf_counter()
        for first in range(0, jobs, batch):
            self.peer.enqueue_batch(keys[first : first + batch])
        return jobs / (time.perf_counter() - started)

    def one_by_one(self, count: int) -> float:
        self.peer.clear()
        keys = self.keys(count)
        started = time.perf_counter()
        for key in keys:
            self.peer.enqueue_one(key)
        return count / (time.perf_counter() - started)

    def drain(self, jobs: int, processes: int, timeout: float) -> dict[str, float]:
        """Jobs/s from the first handler start to the last, ``processes`` idle workers
        already running; the jobs are enqueued in batches of 1,000 as they would be.

        A queue that has not started every job ``timeout`` seconds after the last
        batch went in is measured on the jobs it did start (their count over the
        span of their stamps, the CPU over them), and ``done`` says how many: one
        slow queue costs a bounded time instead of holding up the whole run."""
        self.peer.clear()
        self.start_workers(processes)
        try:
            keys = self.keys(jobs)
            cpu = self.workers_cpu()
            for first in range(0, jobs, 1_000):
                self.peer.enqueue_batch(keys[first : first + 1_000])
            stamps = self.wait_stamped(keys, timeout=timeout, partial=True)
            cpu = self.workers_cpu() - cpu
        finally:
            self.stop_workers()
        done = len(stamps)
        moments = [moment for moment, _ in stamps.values()]
        span = max(max(moments) - min(moments), 1e-6)
        return {"rate": done / span, "cpu_us": cpu * 1e6 / done, "done": float(done)}

    def pickup(self, samples: int) -> dict[str, float | None]:
        """Enqueue call to handler start, one job at a time into one idle worker.

        The jobs are spaced 0.2-0.4 s apart; for a polling worker, 0.2 s plus a
        uniform fraction of its whole interval, so that its figure is its latency
        at a random moment (about half an interval) rather than at the one phase
        of its cycle a fixed spacing would keep hitting."""
        poll = self.peer.poll_interval
        spacing = (0.2, 0.2 + poll) if poll else (0.2, 0.4)
        self.peer.clear()
        self.start_workers(1)
        latencies: list[float] = []
        idle: float | None = None
        try:
            time.sleep(1.0)  # let the worker settle into its idle wait
            before = self.peer.idle_counter()
            if before is not None:
                window = self.options.idle_seconds
                time.sleep(window)
                after = self.peer.idle_counter()
                idle = (after - before) / window if after is not None else None
            for _ in range(samples):
                time.sleep(random.uniform(*spacing))
                key = self.keys(1)[0]
                called = time.time()
                self.peer.enqueue_one(key)
                moment, _ = self.wait_stamped([key], timeout=30 + 3 * poll)[key]
                latencies.append((moment - called) * 1000)
        finally:
            self.stop_workers()
        latencies.sort()
        return {
            "p50_ms": statistics.median(latencies),
            "p95_ms": percentile(latencies, 95),
            "idle_load": idle,
        }

    def samples(self) -> int:
        """Pickup samples for this contender: ``--poller-samples`` at most for a poller."""
        if self.peer.poll_interval:
            return int(min(self.options.samples, self.options.poller_samples))
        return int(self.options.samples)

    def run(self) -> dict[str, Any]:
        options = self.options
        peer = self.peer
        result: dict[str, Any] = {"name": peer.name, "label": peer.label}
        result["versions"] = {**peer.versions(), "Python": platform.python_version()}
        result["caveats"] = peer.caveats
        result["idle_unit"] = peer.idle_unit
        result["samples"] = self.samples()
        result["drain_timeout"] = options.drain_timeout
        # How long each step took, per round: where a run's time goes (a log line
        # each as it happens, and in peers.json), to check peers.py's EXPECTED speeds
        # that its time estimate comes from.
        durations: list[dict[str, float]] = []
        spent: dict[str, float] = {}

        def step(what: str, began: float) -> None:
            spent[what] = round(time.monotonic() - began, 1)
            print(f"{peer.name}: {what} {spent[what]:.1f} s", file=sys.stderr, flush=True)

        # Warm-up: connections, first-call imports and caches, outside every timing.
        began = time.monotonic()
        self.one_by_one(min(100, options.single))
        self.bulk(min(1_000, options.jobs), 1_000)
        step("warm-up", began)
        result["warm_up_s"] = spent.pop("warm-up")
        rounds: list[dict[str, Any]] = []
        for index in range(options.rounds):
            measured: dict[str, Any] = {}
            for batch in BATCHES:
                if batch <= options.jobs:
                    began = time.monotonic()
                    measured[f"bulk_{batch}"] = self.bulk(options.jobs, batch)
                    step(f"bulk_{batch}", began)
            began = time.monotonic()
            measured["single"] = self.one_by_one(options.single)
            step("single", began)
            began = time.monotonic()
            drained = self.drain(options.jobs, 2, options.drain_timeout)
            step("drain", began)
            measured["drain_2"] = drained["rate"]
            measured["drain_cpu_us"] = drained["cpu_us"]
            measured["drain_done"] = drained["done"]
            began = time.monotonic()
            picked = self.pickup(self.samples())
            step("pickup", began)
            measured["pickup_p50_ms"] = picked["p50_ms"]
            measured["pickup_p95_ms"] = picked["p95_ms"]
            measured["idle_load"] = picked["idle_load"]
            rounds.append(measured)
            durations.append(spent)
            spent = {}
            print(f"{peer.name} round {index + 1}: {measured}", file=sys.stderr, flush=True)
        result["rounds"] = rounds
        for figure in rounds[0]:
            values = [r[figure] for r in rounds if r[figure] is not None]
            result[figure] = statistics.median(values) if values else None
        # The fewest jobs any round's drain ran: below --jobs, a drain timed out.
        result["drain_done"] = min(r["drain_done"] for r in rounds)
        began = time.monotonic()
        result.update(peer.extras(options))
        if time.monotonic() - began > 0.5:
            step("extras", began)
            result["extras_s"] = spent.pop("extras")
        result["durations"] = durations
        peer.clear()
        return result

    def close(self) -> None:
        self.stop_workers()
        shutil.rmtree(self.stamp_dir, ignore_errors=True)


def _children(pid: int) -> list[int]:
    """All descendants of ``pid`` (a worker that forks its job runners)."""
    found: list[int] = []
    queue = [pid]
    while queue:
        parent = queue.pop()
        try:
            tasks = Path(f"/proc/{parent}/task").iterdir()
            kids = [
                int(child) for task in tasks for child in (task / "children").read_text().split()
            ]
        except OSError:
            continue
        found.extend(kids)
        queue.extend(kids)
    return found

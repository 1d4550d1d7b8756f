"""The worker loop: claim a batch, run it on a thread pool, write the outcomes fenced.

One main thread owns every write the worker makes (claims, heartbeats,
completions, sweeps, releases) through one persistent database connection,
so the per-job cost is a share of a batched round trip rather than a connect.
Handler threads only run handlers; they hand each finished job back to the
main thread through a queue, and close their own connections between jobs the
way Django does between requests.

Nothing here can lose a job: a claimed job leaves this process only as a
fenced completion, a fenced release, or — if the process dies — an expired
lease that any worker's sweep turns back into ``pending``.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import queue
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import TYPE_CHECKING, Any, TypeVar

from django.db import DEFAULT_DB_ALIAS, DatabaseError, InterfaceError
from django.db import connections as db_connections

from django_arcature import registry
from django_arcature.conf import configured, get_settings
from django_arcature.context import JobContext
from django_arcature.db import ClaimedJob
from django_arcature.hints import HintReceiver
from django_arcature.queues.gate import QueueGate
from django_arcature.queues.occupancy import (
    Held,
    extend_holds,
    hold_slots,
    purge_expired,
    release_holds,
)
from django_arcature.transitions import ClaimTransition, Completion, smallest_completion
from django_arcature.worker.duties import Duties
from django_arcature.worker.recycling import Drain, Recycler, pending_left

from .handlers import EXIT_TOO_MANY_ABANDONED_THREADS, HandlerThreads
from .pickup_trace import HINT, LISTEN, PickupTrace
from .wakeup import Listener, WakePairs

if TYPE_CHECKING:
    from .health import HealthFile

logger = logging.getLogger(__name__)

T = TypeVar("T")

__all__ = ["EXIT_TOO_MANY_ABANDONED_THREADS", "Worker", "WorkerStats", "default_worker_id"]

#: Jobs shorter than this (moving average) let the worker claim ahead of its threads.
FAST_JOB_SECONDS = 0.05
#: With ``BATCH_SIZE_MAX`` left at None, a worker whose batch nobody chose (no
#: ``BATCH_SIZE`` setting, no ``batch`` argument) grows its claims up to this many
#: batches under a backlog of short jobs (Worker._grow_claim).
CLAIM_GROWTH = 4
#: Longest pause between tries while the database is unreachable.
MAX_FAULT_PAUSE = 5.0
#: The health file says ``write failing`` once the same write of finished jobs has failed
#: this many times in a row, or kept failing this many seconds.
FLUSH_UNHEALTHY_TRIES = 5
FLUSH_UNHEALTHY_SECONDS = 60.0
#: After this many failed tries of the same write, its completions are cut to their
#: smallest form (a short attempt log and texts) and written so: a row the server
#: refuses by dropping the connection is never retried for ever as it was.
FLUSH_SHRINK_TRIES = 3
#: Longest a finished job waits for others to share its write, while jobs are still running.
FLUSH_DELAY = 0.02
#: Finished jobs are written at once when this many claims' worth (``batch``) have
#: gathered. The write's cost is mostly per statement (a round trip, and about 115 us of
#: Django and driver CPU), so its size is decoupled from the claim's: two claims' worth,
#: bounded in time by ``FLUSH_DELAY`` (far under any lease) and by the handlers going
#: idle. A crash while jobs wait to be written only runs them again (at least once).
FLUSH_CLAIMS = 2
#: How often (seconds) a progress line is logged while jobs flow.
PROGRESS_EVERY = 2.0
#: The longest the main thread steps aside (and how long each step is) after a claim
#: that emptied the queue, so an idle handler thread takes its job before the main
#: thread's next Python work holds the GIL (worker.loop.Worker._let_handlers_take).
HAND_OFF_WAIT = 0.002
HAND_OFF_STEP = 0.00005


def default_worker_id() -> str:
    """``host:pid:random`` — unique per process, and readable in the admin."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclass
class WorkerStats:
    """What this worker has done, by outcome (the write that landed)."""

    claimed: int = 0
    succeeded: int = 0
    retried: int = 0
    dead: int = 0
    lost: int = 0
    released: int = 0

    @property
    def finished(self) -> int:
        return self.succeeded + self.retried + self.dead + self.lost

    def summary(self) -> str:
        return (
            f"{self.finished} processed: {self.succeeded} succeeded, {self.retried} to retry, "
            f"{self.dead} dead, {self.lost} lost claims, {self.released} released"
        )


#: A claim: the job's id and the token of this claim of it. The same job can come back
#: to the same worker under a new claim while its old, lost claim is still in flight, so
#: everything the worker tracks per job is keyed by both.
ClaimKey = tuple[uuid.UUID, uuid.UUID]


#: The listener's word that its LISTEN delivers from now on (see ``Listener.on_listening``).
LISTENING = "listening"


@dataclass(frozen=True)
class _Cancelled:
    """A notification that a running job was cancelled (PostgreSQL, migration 0013)."""

    job_id: str


@dataclass
class _InFlight:
    """A job this worker has claimed and not yet written back."""

    job: ClaimedJob
    context: JobContext
    started: bool = False
    skipped: bool = False
    done: bool = False
    #: A heartbeat found the claim gone (and ``job_claim_lost`` was sent for it then).
    lost: bool = False
    #: The pickup trace's stamps of the claim that took it (``ARCATURE_PICKUP_TRACE``).
    trace: dict[str, int | str] | None = None

    @property
    def key(self) -> ClaimKey:
        return (self.job.id, self.job.claim_token)


@dataclass
class _Done:
    key: ClaimKey
    completion: Completion
    seconds: float


@dataclass
class _Fault:
    """Backoff state while the database is failing."""

    pause: float = 0.0
    until: float = 0.0
    failures: int = 0


class Worker(HandlerThreads):
    """Runs jobs until stopped (SIGTERM/SIGINT, :meth:`stop`, ``burst``, ``max_jobs``).

    Every option defaults to the ``ARCATURE`` setting of the same meaning.
    ``run()`` returns the process exit status (0 after a clean stop).
    """

    def __init__(
        self,
        *,
        queues: Sequence[str] | None = None,
        concurrency: int | None = None,
        batch: int | None = None,
        batch_max: int | None = None,
        lease: int | None = None,
        poll_interval: float | None = None,
        burst: bool = False,
        max_jobs: int | None = None,
        worker_id: str | None = None,
        shutdown_timeout: float | None = None,
        using: str | None = None,
        install_signal_handlers: bool = True,
        listen: bool | None = None,
        exclude_queues: Sequence[str] = (),
        drain: bool = False,
        drain_timeout: float | None = None,
        max_memory_mb: float | None = None,
        max_runtime: float | None = None,
        duties: bool = True,
        health_file: str | os.PathLike[str] | None = None,
    ) -> None:
        conf = get_settings()
        self.conf = conf
        self.queues = list(queues) if queues else None
        self.concurrency = concurrency or conf.concurrency
        self.batch = batch or conf.batch_size
        self.lease = lease or conf.lease_seconds
        self.poll_interval = poll_interval or conf.poll_interval
        self.burst = burst
        self.max_jobs = max_jobs
        self.worker_id = worker_id or default_worker_id()
        self.shutdown_timeout = (
            conf.shutdown_timeout if shutdown_timeout is None else shutdown_timeout
        )
        self.using = using or conf.database or DEFAULT_DB_ALIAS
        self.install_signal_handlers = install_signal_handlers
        self.listen = conf.use_listen_notify if listen is None else listen
        if self.concurrency < 1 or self.batch < 1 or self.lease < 1 or self.poll_interval <= 0:
            raise ValueError("concurrency, batch and lease must be at least 1; poll above 0")
        if batch_max is not None and batch_max < 1:
            raise ValueError("batch_max must be at least 1")
        chosen = bool(batch) or configured("BATCH_SIZE")
        self.batch_max = self._largest_claim(batch_max, chosen=chosen)
        if self.max_jobs is not None and self.max_jobs < 1:
            raise ValueError("max_jobs must be at least 1")

        # Queue control, periodic duties and recycling live in their own modules.
        self.exclude_queues = list(exclude_queues)
        self._gate = QueueGate(
            self.using,
            queues=self.queues,
            exclude=self.exclude_queues,
            refresh_seconds=self.poll_interval,
        )
        self._duties = Duties(self.using) if duties else None
        self._recycler = Recycler(max_memory_mb=max_memory_mb, max_runtime=max_runtime)
        self._drain = Drain(drain_timeout) if drain else None

        self.stats = WorkerStats()
        self._inflight: dict[ClaimKey, _InFlight] = {}
        self._lock = threading.Lock()  # guards started/skipped between main and pool threads
        self._todo: queue.SimpleQueue[_InFlight | None] = queue.SimpleQueue()
        # Everything that should wake the main loop goes through this queue:
        # finished jobs, notifications, signals (SimpleQueue.put is reentrant).
        self._events: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._finished: list[_Done] = []
        self._init_handler_threads()
        self._listener: Listener | None = None
        self._hints: HintReceiver | None = None
        self._wake_pairs: WakePairs | None = None
        self._trace = PickupTrace.from_environment()
        self._fault = _Fault()
        self._stop_requested = 0
        # External signals only: a stop the worker asks of itself (recycling, the
        # abandoned-thread limit) or a call to stop() must not make the supervisor's
        # first SIGTERM count as a second one.
        self._signals_received = 0
        # Slot holds of this worker's handlers that run on after their rows left
        # `running` (cancelled, written off, handed back): queues/occupancy.py.
        self._held: dict[ClaimKey, Held] = {}
        self._loop_done = False
        self._stopping_since: float | None = None
        self._idle_wait = self._min_poll
        self._avg_job_seconds: float | None = None
        self._next_heartbeat = 0.0
        self._next_sweep = 0.0
        self._next_progress = 0.0
        self._last_progress = 0
        self._last_request = 0
        self._last_claim_empty = False
        #: The next claim's size: ``batch``, doubled after each full claim of short jobs
        #: up to ``batch_max``, back to ``batch`` after a claim that came back short.
        self._claim_size = self.batch
        self._first_finished_at = 0.0
        self._flush_failures = 0
        self._flush_failing_since = 0.0
        self._last_fault = ""
        self._health = self._open_health_file(health_file)

    def _largest_claim(self, batch_max: int | None, *, chosen: bool) -> int:
        """The most one claim may take once grown (at least ``batch``; see _grow_claim).

        ``batch_max``, else ``BATCH_SIZE_MAX``; when neither is given, ``CLAIM_GROWTH``
        batches unless the batch was ``chosen``, else the batch itself. A batch set by
        ``ARCATURE["BATCH_SIZE"]`` or ``batch``/``--batch`` is a ceiling, even when its
        value is the default's: the project asked for that size, and a claim four
        times larger holds four times the jobs (and leases) it planned for.
        """
        from django_arcature.conf import MAX_BATCH_SIZE

        largest = batch_max if batch_max is not None else self.conf.batch_size_max
        if largest is None:
            growth = 1 if chosen else CLAIM_GROWTH
            largest = min(self.batch * growth, MAX_BATCH_SIZE)
        return max(largest, self.batch)

    # --- public ------------------------------------------------------------------

    def stop(self) -> None:
        """Ask for a graceful stop (thread-safe; what SIGTERM does)."""
        self._stop_requested += 1
        self._events.put("stop")

    def run(self) -> int:
        """Run until stopped; returns the exit status."""
        registry.autodiscover()  # handlers (and their receivers) are known before the first job
        previous = self._install_signals()
        self._start_threads()
        if self._duties is not None:
            self._duties.start()
        logger.info(
            "worker %s started: queues %s, %d threads, batch %d%s, lease %ds%s",
            self.worker_id,
            ", ".join(self.queues) if self.queues else "all",
            self.concurrency,
            self.batch,
            f" (up to {self.batch_max})" if self.batch_max > self.batch else "",
            self.lease,
            ", burst" if self.burst else "",
        )
        try:
            self._loop_until_done()
        finally:
            # Every job is written or released: a signal has nothing left to force.
            self._loop_done = True
            if self._duties is not None:
                self._duties.stop()
            self._shutdown_threads()
            self._reconcile_holds(extend=False)  # the handlers that ended free their slots
            self._restore_signals(previous)
            if self._health is not None:
                self._health.stopped(self._exit_status, jobs_finished=self.stats.finished)
            logger.info("worker %s stopped: %s", self.worker_id, self.stats.summary())
        return self._exit_status

    # --- the loop ------------------------------------------------------------------

    def _loop_until_done(self) -> None:
        while True:
            self._collect()
            self._maybe_recycle()
            if self._stop_requested and self._stopping_since is None:
                self._begin_shutdown()
            if self._health is not None:
                self._report_health(self._health)
            if self._database_usable():
                self._maybe_heartbeat()
                self._reconcile_holds(extend=False)
                self._flush()
                self._maybe_sweep()
                if self._finish_shutdown_if_due():
                    return
                claimed = self._maybe_claim()
                if self._drained(claimed):
                    self._flush()
                    return
                if claimed and claimed == self._last_request:
                    continue  # more is probably waiting: claim again at once
            elif self._stopping_since is not None and self._shutdown_overdue():
                self._abandon_on_fault()
                return
            self._report_progress()
            self._wait()

    def _wait(self) -> None:
        now = time.monotonic()
        wake_at = self._next_heartbeat
        if self._stopping_since is None:  # no sweep while stopping: an overdue one would spin
            wake_at = min(wake_at, self._next_sweep)
        timeout = wake_at - now
        if self._fault.until > now:
            # Nothing to do but wait for the database: an overdue sweep or heartbeat
            # cannot run before then either, and waiting for it would spin.
            timeout = self._fault.until - now
        else:
            timeout = min(timeout, self._idle_timeout())
            flush_at = self._flush_deadline()
            if flush_at is not None:
                timeout = min(timeout, flush_at - now)
        if self._stopping_since is not None:
            timeout = min(timeout, 0.1)
        if self._trace is not None:
            self._trace.waiting()
        try:
            item = self._events.get(timeout=max(timeout, 0.0))
        except queue.Empty:
            return
        self._take(item)

    def _idle_timeout(self) -> float:
        if self._listener is not None and self._listener.listening:
            return self.poll_interval  # a notification wakes us sooner
        return self._idle_wait

    @property
    def _min_poll(self) -> float:
        return min(0.02, self.poll_interval)

    def _collect(self) -> None:
        while True:
            try:
                item = self._events.get_nowait()
            except queue.Empty:
                return
            self._take(item)

    def _take(self, item: object) -> None:
        if isinstance(item, _Done):
            if not self._finished:
                self._first_finished_at = time.monotonic()
            self._finished.append(item)
        elif isinstance(item, _Cancelled):
            # One of ours? Then heartbeat now: the fenced heartbeat finds the claim
            # gone and raises cancel_requested, as it would at the next beat.
            if any(str(key[0]) == item.job_id for key in self._inflight):
                self._next_heartbeat = 0.0
        elif item == LISTENING:
            # The LISTEN was deaf until now (the worker's start, a reconnect): a cancel
            # of a job already running may have gone unheard, so heartbeat now.
            if self._inflight:
                self._next_heartbeat = 0.0
        elif item in ("notify", "enqueued"):
            if self._trace is not None:
                self._trace.taken()
            self._idle_wait = self._min_poll
            # "enqueued" (a job NOTIFY) cannot mean a pause or resume: those send their
            # own notification ("notify", like a hint), so only then re-read the flags.
            self._gate.invalidate(pauses=item == "notify")

    # --- database steps, each guarded -----------------------------------------------

    def _guarded(self, step: str, operation: Callable[[], T]) -> T | None:
        """Run one database step; on a database fault log it, back off and return None."""
        try:
            result = operation()
        except (DatabaseError, InterfaceError) as exc:
            self._on_fault(step, exc)
            return None
        if self._fault.failures:
            logger.warning(
                "database reachable again after %d failed tries; carrying on",
                self._fault.failures,
            )
            self._fault = _Fault()
            self._next_heartbeat = 0.0  # re-extend leases first thing
        return result

    def _on_fault(self, step: str, exc: BaseException) -> None:
        fault = self._fault
        fault.failures += 1
        fault.pause = min(max(fault.pause * 2, 0.1), MAX_FAULT_PAUSE)
        fault.until = time.monotonic() + fault.pause
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        self._last_fault = f"{type(exc).__name__}: {first_line}"[:500]
        logger.warning(
            "database error during %s (%s: %s); retrying in %.1fs",
            step,
            type(exc).__name__,
            str(exc).strip().splitlines()[0] if str(exc).strip() else "",
            fault.pause,
        )
        connection = db_connections[self.using]
        try:
            if connection.in_atomic_block:  # pragma: no cover - the manager exits its blocks
                connection.needs_rollback = True
            connection.close()
        except Exception:  # the connection is already broken; Django reconnects on next use
            logger.debug("closing the broken connection failed", exc_info=True)

    def _database_usable(self) -> bool:
        return time.monotonic() >= self._fault.until

    def _maybe_claim(self) -> int:
        self._last_request = 0
        if self._stopping_since is not None:
            return 0
        fast = self._avg_job_seconds is not None and self._avg_job_seconds < FAST_JOB_SECONDS
        size = self._claim_size if fast else self.batch
        limit = self.concurrency
        if fast:
            # Short jobs: keep up to two claims ready so threads never wait, and
            # claim whole ones, since a round trip costs more than many jobs.
            limit += 2 * size
        # Finished jobs waiting for their write hold no thread: they do not count.
        free = limit - max(len(self._inflight) - len(self._finished), 0)
        if fast and free < size:
            queued = sum(1 for entry in self._inflight.values() if not entry.started)
            if queued >= self.concurrency:
                return 0
        want = min(size, free)
        if self.max_jobs is not None:
            want = min(want, self.max_jobs - self.stats.claimed)
        if want <= 0:
            return 0
        from django_arcature.models import Job

        manager = Job.objects.db_manager(self.using)
        trace = self._trace
        if trace is not None:
            trace.claim_sent()
        jobs = self._guarded(
            "claim", lambda: self._gate.claim(manager, self.worker_id, self.lease, want)
        )
        if jobs is None:
            return 0
        stamps = None if trace is None else trace.claimed(len(jobs))
        self._last_request = want
        self._grow_claim(fast=fast, full=len(jobs) == want)
        if not jobs:
            self._idle_wait = min(self._idle_wait * 2, self.poll_interval)
            self._last_claim_empty = True
            return 0
        self._idle_wait = self._min_poll
        self._last_claim_empty = False
        self.stats.claimed += len(jobs)
        # Counted before this claim's jobs join the in-flight ones; only a claim that
        # emptied the queue may wait for the hand-off, so a full one skips the scan.
        idle_threads = self._idle_threads() if len(jobs) < want else 0
        entry = None
        for job in jobs:
            entry = _InFlight(job, self._context_for(job), trace=stamps)
            self._inflight[entry.key] = entry
            self._todo.put(entry)
        if entry is not None and len(jobs) < want and len(jobs) <= idle_threads:
            self._let_handlers_take(entry)
        return len(jobs)

    def _grow_claim(self, *, fast: bool, full: bool) -> None:
        """Size the next claim: double it after a full claim of short jobs, else reset it.

        Under a backlog most of the database's work per job is per statement (the
        claim's index walk past rows other workers hold, its plan, its commit), so
        fewer, larger claims cost less per job (PostgreSQL backend CPU per job fell
        by about a fifth with 200 instead of 50; benchmarks/README.md). The growth
        stops at ``batch_max``, and any claim that came back short (the backlog is
        gone) or slow jobs bring it back to ``batch`` at once, so an idle or lightly
        loaded worker claims exactly as before. Jobs held waiting for a thread stay
        safe: every heartbeat extends them with the running ones, and with jobs
        under ``FAST_JOB_SECONDS`` two claims' worth is seconds of work at most.
        """
        if fast and full:
            self._claim_size = min(self._claim_size * 2, self.batch_max)
        else:
            self._claim_size = self.batch

    def _idle_threads(self) -> int:
        """Handler threads with nothing to run: none if any claimed job still waits for one."""
        busy = 0
        for entry in self._inflight.values():
            if not entry.started:
                return 0
            if not entry.done:
                busy += 1
        return max(self.concurrency - busy, 0)

    def _let_handlers_take(self, last: _InFlight) -> None:
        """Sleep in short steps until an idle handler thread has started ``last``.

        Called after a claim that emptied the queue, when idle threads can take all
        it claimed. Without it the main thread went straight on (most often to the
        claim that the enqueue's second wake-up asks for: its NOTIFY and its
        same-host hint), holding the GIL for its Python work while the woken
        handler thread waited for it: the hand-off took 0.48 ms at the median on
        PostgreSQL, 0.12 ms with this wait (benchmarks/pickup.py, load 4). A sleep
        releases the GIL, so the handler starts first. ``SimpleQueue.empty()``
        cannot tell: it is already true once a waiting thread has been handed the
        item, before that thread runs. Bounded by ``HAND_OFF_WAIT``, in case no
        thread takes the job after all; a full claim never waits (jobs are still
        queued, the next claim should go at once).
        """
        deadline = time.monotonic() + HAND_OFF_WAIT
        while not last.started and time.monotonic() < deadline:
            time.sleep(HAND_OFF_STEP)

    def _context_for(self, job: ClaimedJob) -> JobContext:
        return JobContext(
            job_id=job.id,
            task_name=job.task_name,
            queue=job.queue,
            attempt=job.attempts,
            max_attempts=job.max_attempts,
            worker_id=self.worker_id,
            claim_token=job.claim_token,
        )

    def _flush_deadline(self) -> float | None:
        """When the finished jobs must be written: now, or a little later to batch more.

        A write costs a round trip and a commit whatever its size, so while other
        jobs are still running, finished ones wait up to ``FLUSH_DELAY`` for
        company (or until ``FLUSH_CLAIMS`` batches' worth have gathered, or every
        job in flight has finished).
        """
        if not self._finished:
            return None
        if (
            self._stopping_since is not None
            or len(self._finished) >= FLUSH_CLAIMS * self.batch
            or len(self._finished) >= len(self._inflight)
        ):
            return 0.0
        return self._first_finished_at + FLUSH_DELAY

    def _flush(self, force: bool = False) -> None:
        """Write finished jobs back, fenced row by row, in one transaction.

        A job whose claim a heartbeat already found lost is not written: its
        write could only be fenced out, and its ``job_claim_lost`` was sent then.
        If the database fails during the write, the batch is kept and written
        again later; the manager tells a write that had landed before the
        failure (its acknowledgement lost) from one fenced out, so neither the
        outcome nor its event depends on when the connection broke.
        """
        deadline = self._flush_deadline()
        if deadline is None or (not force and deadline > time.monotonic()):
            return
        from django_arcature.models import Job

        batch = []
        for done in self._finished:
            entry = self._inflight.get(done.key)
            if entry is not None and entry.lost:
                self._inflight.pop(done.key, None)
                self._track_hold(entry.job)  # a cancel's hold, if any: its handler has ended
                self.stats.lost += 1
                logger.warning(
                    "job %s (%s): its claim was lost while it ran, so its %s was not "
                    "written; the result was discarded",
                    entry.job.id,
                    entry.job.task_name,
                    done.completion.kind,
                )
                continue
            batch.append(done)
        self._finished = batch
        if not batch:
            return
        if not self._hold_written_off(batch):
            # Kept; the holds and then the write are tried again. Counted as a failed
            # write: nothing of the batch lands until the hold does.
            self._note_flush_failure()
            return
        if self._flush_failures >= FLUSH_SHRINK_TRIES:
            batch = [self._shrunk(done) for done in batch]
            self._finished = batch
        manager = Job.objects.db_manager(self.using)
        written = self._guarded(
            "completion",
            lambda: manager.write_completions(
                [done.completion for done in batch], plain_alone=True
            ),
        )
        if written is None:
            self._note_flush_failure()
            return  # kept; written once the database answers again
        self._flush_failures = 0
        self._finished = []
        for done, landed in zip(batch, written, strict=True):
            entry = self._inflight.pop(done.key, None)
            completion = landed.completion
            if landed.outcome is ClaimTransition.LOST:
                if entry is not None:
                    self._track_hold(entry.job)  # cancelled after its handler ended
                self.stats.lost += 1
                logger.warning(
                    "job %s (%s): claim lost before its %s was written (cancelled, or the "
                    "lease expired); the result was discarded",
                    completion.job_id,
                    entry.job.task_name if entry else "?",
                    completion.kind,
                    extra=entry.job.log_extra() if entry else {"job_id": str(completion.job_id)},
                )
                continue
            if completion.kind == "succeeded":
                self.stats.succeeded += 1
            elif completion.kind == "retry":
                self.stats.retried += 1
            else:
                self.stats.dead += 1
            if completion is not done.completion:
                logger.error(
                    "job %s (%s): the database refused its %s; stored as dead instead: %s",
                    completion.job_id,
                    entry.job.task_name if entry else "?",
                    done.completion.kind,
                    completion.message,
                )
            self._log_landed(
                completion, entry, done.seconds, replaced=completion is not done.completion
            )

    def _log_landed(
        self, completion: Completion, entry: _InFlight | None, seconds: float, *, replaced: bool
    ) -> None:
        """One line per landed outcome; only here, so a fenced-out write logs nothing.

        A dead job is a WARNING (seen at the default verbosity, named by task and id);
        the others are DEBUG (``-v 2``), with the run time and a retry's wait apart.
        """
        if completion.kind != "dead" and not logger.isEnabledFor(logging.DEBUG):
            return  # the usual case: nothing to log, so nothing to build for it
        task = entry.job.task_name if entry else "?"
        extra = entry.job.log_extra() if entry else {"job_id": str(completion.job_id)}
        if completion.kind == "dead":
            if not replaced:  # the refused-data line above already named it
                logger.warning(
                    "job %s (%s) went dead (%s): %s",
                    completion.job_id,
                    task,
                    completion.error_kind,
                    completion.message,
                    extra=extra,
                )
            return
        outcome = completion.kind
        if completion.kind == "retry":
            outcome = "retry" + (
                f" in {completion.retry_delay:.1f}s" if completion.retry_delay is not None else ""
            )
        logger.debug(
            "job %s (%s) ran %.1f ms; %s%s",
            completion.job_id,
            task,
            seconds * 1000,
            outcome,
            f": {completion.message}" if completion.message else "",
            extra=extra,
        )

    def _shrunk(self, done: _Done) -> _Done:
        """``done`` with its completion cut to its smallest form (same claim, same fence)."""
        smaller = smallest_completion(done.completion)
        if smaller == done.completion:
            return done
        logger.error(
            "job %s: its %s failed to be written %d times; writing it with a shortened "
            "attempt log and error texts",
            done.completion.job_id,
            done.completion.kind,
            self._flush_failures,
        )
        return dataclasses.replace(done, completion=smaller)

    def _note_flush_failure(self) -> None:
        """Count failures of the same write: heartbeats and claims may still work, so the
        database fault counter (reset by any success) cannot tell a write that never lands."""
        if not self._flush_failures:
            self._flush_failing_since = time.monotonic()
        self._flush_failures += 1
        if self._flush_failures == FLUSH_UNHEALTHY_TRIES:
            logger.error(
                "worker %s: writing %d finished job(s) failed %d times in a row (%s); "
                "the health file now says 'write failing'",
                self.worker_id,
                len(self._finished),
                self._flush_failures,
                self._last_fault,
            )

    def _failing_write(self) -> str:
        """The reason for the health file while the same write keeps failing, else ''."""
        if not self._flush_failures:
            return ""
        failing_for = time.monotonic() - self._flush_failing_since
        if self._flush_failures < FLUSH_UNHEALTHY_TRIES and failing_for < FLUSH_UNHEALTHY_SECONDS:
            return ""
        return self._last_fault or "the write of finished jobs keeps failing"

    def _maybe_heartbeat(self) -> None:
        now = time.monotonic()
        if now < self._next_heartbeat:
            return
        # Only jobs still running: a finished one is written within moments, and after a
        # failed write its claim may already be gone by our own landed write.
        claims = [key for key, entry in self._inflight.items() if not (entry.done or entry.lost)]
        if claims:
            from django_arcature.models import Job

            manager = Job.objects.db_manager(self.using)
            lost = self._guarded("heartbeat", lambda: manager.heartbeat_many(claims, self.lease))
            if lost is None:
                return
            self._hold_lost([self._inflight[key] for key in lost if key in self._inflight])
            for key in lost:
                self._on_lost(key)
        self._reconcile_holds(extend=True)
        self._next_heartbeat = time.monotonic() + self.lease / 3

    def _on_lost(self, key: ClaimKey) -> None:
        entry = self._inflight.get(key)
        if entry is None:
            return
        entry.lost = True
        entry.context.cancel("lost")
        with self._lock:
            if not entry.started:
                entry.skipped = True
        logger.warning(
            "job %s (%s): claim lost while running (cancelled, or the lease was swept); "
            "the handler was told to stop and its result will be discarded",
            entry.job.id,
            entry.job.task_name,
            extra=entry.job.log_extra(),
        )
        if entry.skipped:
            self._inflight.pop(key, None)
            self.stats.lost += 1

    def _maybe_sweep(self) -> None:
        now = time.monotonic()
        if now < self._next_sweep or self._stopping_since is not None:
            return
        from django_arcature.models import Job

        manager = Job.objects.db_manager(self.using)
        swept = self._guarded("sweep", manager.sweep_expired_leases)
        if swept is None:
            return
        if swept:
            logger.warning("recovered %d job(s) whose lease had expired", swept)
            self._idle_wait = self._min_poll
        if self._gate.limits:
            self._guarded("slot holds", functools.partial(purge_expired, self.using))
        self._next_sweep = time.monotonic() + self.conf.sweep_interval

    def _drained(self, claimed: int) -> bool:
        if self._inflight or self._finished or claimed:
            return False
        if self.max_jobs is not None and self.stats.claimed >= self.max_jobs:
            return True
        if self._drain is not None:
            return self._drain_finished()
        return self.burst and self._last_claim_empty

    def _drain_finished(self) -> bool:
        """--drain: done when nothing served is pending or running; exit 1 on timeout."""
        assert self._drain is not None
        if not self._last_claim_empty:
            return False
        left = self._guarded(
            "drain check",
            lambda: pending_left(self.using, self.queues, set(self.exclude_queues)),
        )
        if left == 0:
            return True
        if self._drain.timed_out():
            logger.warning("drain timed out with %s job(s) still pending or running", left)
            if not self._exit_status:
                self._exit_status = 1
            return True
        return False

    def _maybe_recycle(self) -> None:
        if self._stop_requested:
            return
        reason = self._recycler.reason()
        if reason is not None:
            logger.warning("worker %s recycling: it %s", self.worker_id, reason)
            self.stop()

    # --- slots held by handlers whose rows left `running` (queues/occupancy.py) ----------

    def _holds_slot(self, job: ClaimedJob) -> bool:
        limit = self._gate.limits.get(job.queue)
        return limit is not None and limit.concurrency is not None

    def _track_hold(self, job: ClaimedJob) -> None:
        """Follow a hold this worker did not write (a cancel's) until its handler ends."""
        if self._holds_slot(job):
            self._held[(job.id, job.claim_token)] = Held(job.claim_token, job.id, job.queue)

    def _hold_slots_of(self, jobs: Sequence[ClaimedJob]) -> bool:
        """Write holds for these claims (idempotent) and follow them; False if the write failed."""
        held = {
            (job.id, job.claim_token): Held(job.claim_token, job.id, job.queue)
            for job in jobs
            if self._holds_slot(job)
        }
        if not held:
            return True
        values = list(held.values())
        written = self._guarded(
            "slot holds",
            lambda: hold_slots(self.using, values, self.worker_id, lease_seconds=self.lease),
        )
        if written is None:
            return False
        self._held.update(held)
        return True

    def _hold_lost(self, entries: Sequence[_InFlight]) -> None:
        """Claims a heartbeat found gone: a handler that runs on keeps its slot.

        Cancelled, the hold is there already; swept (the lease ran out), it is
        written now, so that at least no further claim overlaps this handler.
        """
        self._hold_slots_of([entry.job for entry in entries if entry.started])
        for entry in entries:
            self._track_hold(entry.job)

    def _hold_written_off(self, batch: Sequence[_Done]) -> bool:
        """Before writing the timeout of an abandoned thread still running, hold its slot."""
        if not any(limit.concurrency is not None for limit in self._gate.limits.values()):
            return True  # no queue caps concurrency: no job of the batch can hold a slot
        running = self._handlers_running()
        jobs = [
            entry.job
            for done in batch
            if done.key in running and (entry := self._inflight.get(done.key)) is not None
        ]
        return self._hold_slots_of(jobs)

    def _handlers_running(self) -> set[ClaimKey]:
        """The claims whose handlers are running now, abandoned threads included."""
        with self._lock:
            return {
                slot.entry.key
                for slot in self._slots
                if slot.entry is not None and slot.thread is not None and slot.thread.is_alive()
            }

    def _reconcile_holds(self, *, extend: bool) -> None:
        """Delete the holds whose handlers have ended; ``extend`` the others (a heartbeat)."""
        if not self._held:
            return
        running = self._handlers_running()
        gone = [key for key in self._held if key not in running]
        if gone:
            tokens = [self._held[key].claim_token for key in gone]
            if self._guarded("slot holds", lambda: release_holds(self.using, tokens)) is None:
                return
            for key in gone:
                self._held.pop(key, None)
        if extend and self._held:
            tokens = [held.claim_token for held in self._held.values()]
            self._guarded("slot holds", lambda: extend_holds(self.using, tokens, self.lease))

    # --- shutdown ------------------------------------------------------------------------

    def _begin_shutdown(self) -> None:
        self._stopping_since = time.monotonic()
        if self._duties is not None:  # a stopping worker fires no schedule (issue 19, B16)
            self._duties.request_stop()
        running = [entry for entry in self._inflight.values() if not entry.done]
        # A requested stop is routine: INFO. What goes wrong during it is a WARNING.
        logger.info(
            "worker %s stopping: no new claims; waiting up to %gs for %d job(s)",
            self.worker_id,
            self.shutdown_timeout,
            len(running),
        )
        unstarted = []
        with self._lock:
            for entry in running:
                if not entry.started:
                    entry.skipped = True
                    unstarted.append(entry)
        self._release(unstarted, "not started", level=logging.INFO)

    def _shutdown_overdue(self) -> bool:
        return (
            self._stopping_since is not None
            and time.monotonic() - self._stopping_since >= self.shutdown_timeout
        )

    def _finish_shutdown_if_due(self) -> bool:
        if self._stopping_since is None:
            return False
        if not self._inflight and not self._finished:
            return True
        if not self._shutdown_overdue():
            return False
        running = [entry for entry in self._inflight.values() if not entry.done]
        for entry in running:
            entry.context.cancel("shutdown")
        # Handed back while their handlers may still run: they keep their slots until then.
        self._hold_slots_of([entry.job for entry in running if entry.started])
        self._release(running, f"still running after {self.shutdown_timeout:g}s")
        self._flush()
        if self._finished:  # the database failed again: leases will recover these
            logger.warning("%d finished job(s) could not be written", len(self._finished))
        return True

    def _release(
        self, entries: Sequence[_InFlight], why: str, level: int = logging.WARNING
    ) -> None:
        """Hand jobs back to ``pending`` without using up their attempt (fenced)."""
        from django_arcature.models import Job

        manager = Job.objects.db_manager(self.using)
        for entry in entries:
            job = entry.job
            if entry.lost:  # already gone (and reported): nothing of ours to hand back
                self._inflight.pop(entry.key, None)
                continue
            outcome = self._guarded(
                "release", functools.partial(manager.release, job.id, job.claim_token)
            )
            self._inflight.pop(entry.key, None)
            if outcome is ClaimTransition.UPDATED:
                self.stats.released += 1
                logger.log(
                    level,
                    "job %s (%s) released back to pending (%s)",
                    entry.job.id,
                    entry.job.task_name,
                    why,
                    extra=entry.job.log_extra(),
                )
            elif outcome is None:
                logger.warning(
                    "job %s (%s) could not be released; its lease will expire and a "
                    "worker will run it again",
                    entry.job.id,
                    entry.job.task_name,
                    extra=entry.job.log_extra(),
                )

    def _abandon_on_fault(self) -> None:
        logger.warning(
            "stopping while the database is unreachable: %d job(s) will come back when "
            "their leases expire",
            len(self._inflight),
        )
        for entry in self._inflight.values():
            entry.context.cancel("shutdown")

    # --- threads ------------------------------------------------------------------------------

    def _start_threads(self) -> None:
        self._start_handlers()
        # One enqueue's NOTIFY and its hint wake the loop once between them.
        pairs = self._wake_pairs = WakePairs()
        if self.listen and Listener.supported(self.using):
            self._listener = Listener(
                self.using,
                functools.partial(self._woken, LISTEN),
                on_queues=lambda: self._events.put("notify"),
                on_cancel=lambda job_id: self._events.put(_Cancelled(job_id)),
                pairs=pairs,
                on_listening=lambda: self._events.put(LISTENING),
            )
            self._listener.start()
        if self.conf.wake_hints:
            # A hint is only ever sent for jobs (an enqueue, or dependents released),
            # never for a pause or resume (those notify on PostgreSQL, and are re-read
            # on the poll's schedule elsewhere): so, like a job notification, it does
            # not make the claim it wakes read the pause flags first, a round trip
            # on every pickup's way.
            self._hints = HintReceiver(
                self.using, functools.partial(self._woken, HINT), pairs=pairs
            )
            if not self._hints.start():
                self._hints = None

    def _woken(self, source: str) -> None:
        """A job notification or hint (their threads): wake the main loop to claim."""
        if self._trace is not None:
            self._trace.woke(source)
        self._events.put("enqueued")

    def _shutdown_threads(self) -> None:
        self._stop_handlers()
        if self._listener is not None:
            self._listener.close()
        if self._hints is not None:
            self._hints.close()
        if self._trace is not None:
            self._trace.close()

    def _hand_over(self, entry: _InFlight, completion: Completion, seconds: float) -> None:
        """A handler thread (or the watchdog) passes a finished attempt to the main loop."""
        self._note_duration(seconds)
        self._events.put(_Done(entry.key, completion, seconds))

    def _note_duration(self, seconds: float) -> None:
        average = self._avg_job_seconds
        self._avg_job_seconds = seconds if average is None else average * 0.9 + seconds * 0.1

    # --- signals and progress -------------------------------------------------------------------

    def _install_signals(self) -> dict[int, Any]:
        previous: dict[int, Any] = {}
        if (
            not self.install_signal_handlers
            or threading.current_thread() is not threading.main_thread()
        ):
            return previous
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous[signum] = signal.signal(signum, self._on_signal)
        return previous

    def _restore_signals(self, previous: dict[int, Any]) -> None:
        for signum, handler in previous.items():
            signal.signal(signum, handler)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        """SIGTERM/SIGINT: the first asks for a graceful stop, the second forces the exit.

        Only signals count towards the second: a worker that stopped itself is
        shutting down gracefully already, and its supervisor's first SIGTERM
        (sent because it saw the worker stop) must not end that early.
        """
        if self._loop_done:
            return  # the loop has ended: nothing is left to finish or to force
        self._signals_received += 1
        if self._signals_received > 1:
            os.write(
                2,
                f"second {signal.Signals(signum).name}: exiting now; leases will "
                "bring the running jobs back\n".encode(),
            )
            os._exit(128 + signum)
        self.stop()

    # --- liveness file ------------------------------------------------------------------------

    def _open_health_file(self, path: str | os.PathLike[str] | None) -> HealthFile | None:
        """Write the first record now, so an unwritable path fails before any job is claimed."""
        if path is None:
            return None
        from .health import HealthFile  # here: `python -m ….health` must not find it imported

        # The loop passes at least this often even when idle (see _wait).
        longest_sleep = min(self.poll_interval, self.conf.sweep_interval, self.lease / 3)
        return HealthFile(path, self.worker_id, refresh_within=longest_sleep)

    def _report_health(self, health: HealthFile) -> None:
        """One cheap call per pass; the file is rewritten at most about once a second."""
        health.report(
            stopping=self._stopping_since is not None,
            database_failures=self._fault.failures,
            failing_write=self._failing_write(),
            failing_writes=self._flush_failures,
            jobs_running=len(self._inflight),
            jobs_finished=self.stats.finished,
        )

    def _report_progress(self) -> None:
        now = time.monotonic()
        if now < self._next_progress or self.stats.finished == self._last_progress:
            return
        self._next_progress = now + PROGRESS_EVERY
        self._last_progress = self.stats.finished
        logger.info("worker %s: %s", self.worker_id, self.stats.summary())

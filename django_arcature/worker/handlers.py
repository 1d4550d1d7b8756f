"""The worker's handler threads, and the watchdog that holds every attempt to its deadline.

Handler threads only run handlers: each takes a claimed job from the queue,
runs it through :func:`~django_arcature.worker.dispatch.process` and hands the
completion back to the worker's main thread, which alone writes. Whatever a
handler raises (``KeyboardInterrupt`` and ``SystemExit`` included) is that
attempt's outcome; nothing a handler does ends its thread except never coming
back, and then the watchdog writes the attempt off as timed out, puts a new
thread in its place, and counts the abandoned one. Each thread has its own
event loop for ``async def`` handlers, so one that blocks its loop holds up
only its own thread.
"""

from __future__ import annotations

import asyncio
import logging
import math
import queue
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from django.db import connections as db_connections

from django_arcature.conf import ArcatureSettings
from django_arcature.core.decide import Panic
from django_arcature.transitions import Completion

from .dispatch import (
    AttemptPlan,
    attempt_finished,
    completion_for,
    plan_attempt,
    process,
    timeout_completion,
)

if TYPE_CHECKING:
    from .loop import _InFlight
    from .pickup_trace import PickupTrace

logger = logging.getLogger(__name__)

#: Exit status of a worker that stopped because too many timed-out handler threads
#: were still running (``ARCATURE["MAX_ABANDONED_THREADS"]``): its supervisor should
#: start a fresh process. 75 is EX_TEMPFAIL, "temporary failure, try again".
EXIT_TOO_MANY_ABANDONED_THREADS = 75
#: How long after its deadline an attempt that was told to stop may take to come
#: back (an ``async def`` handler is cancelled at its ``await``; a sync one may check
#: ``current_job().cancelled``) before its thread is abandoned and replaced.
TIMEOUT_GRACE_SECONDS = 1.0
#: Longest the watchdog sleeps without looking (it is woken for earlier deadlines).
WATCHDOG_MAX_SLEEP = 60.0


@dataclass
class _HandlerSlot:
    """One handler thread and the attempt it is running, as the watchdog sees it.

    At ``deadline`` the watchdog marks the attempt ``timed_out`` and tells the
    handler to stop; a handler that comes back within the grace period has its
    timeout written by its own thread, which carries on. At ``cutoff`` the
    thread is ``abandoned``: the watchdog writes the timeout, a new thread takes
    this one's place, and whatever the handler does later is discarded. Every
    field is read and written under the worker's lock.
    """

    thread: threading.Thread | None = None
    entry: _InFlight | None = None
    plan: AttemptPlan | None = None
    started: float = 0.0
    deadline: float = math.inf
    cutoff: float = math.inf
    timed_out: bool = False
    abandoned: bool = False
    #: This thread may hold an open database connection (its last attempt left one
    #: open: ``CONN_MAX_AGE`` above 0). Read and written by the slot's own thread only.
    connection_open: bool = True

    def next_check(self) -> float:
        """When the watchdog must look at this slot again."""
        if self.entry is None or self.abandoned:
            return math.inf
        return self.cutoff if self.timed_out else self.deadline


class HandlerThreads:
    """The handler-thread half of the :class:`~django_arcature.worker.Worker` (a mixin).

    The worker provides the queue of jobs to run, the lock that guards an
    in-flight job's ``started``/``skipped``/``done`` flags, ``stop()`` and
    ``_hand_over()`` (how a finished job reaches the main thread).
    """

    conf: ArcatureSettings
    worker_id: str
    concurrency: int
    _lock: threading.Lock
    _todo: queue.SimpleQueue[_InFlight | None]
    _trace: PickupTrace | None

    def stop(self) -> None:
        raise NotImplementedError  # pragma: no cover - the Worker's

    def _hand_over(self, entry: _InFlight, completion: Completion, seconds: float) -> None:
        raise NotImplementedError  # pragma: no cover - the Worker's

    def _init_handler_threads(self) -> None:
        self._slots: list[_HandlerSlot] = []  # guarded by _lock
        self._watchdog: threading.Thread | None = None
        self._watch = threading.Condition(self._lock)  # wakes the watchdog for a new deadline
        self._watch_until = math.inf  # when the watchdog looks next (under _lock)
        self._threads_stopping = False
        self._handler_count = 0
        #: What ``run()`` returns: 0, or EXIT_TOO_MANY_ABANDONED_THREADS.
        self._exit_status = 0

    # --- start and stop -------------------------------------------------------------------

    def _start_handlers(self) -> None:
        for _ in range(self.concurrency):
            self._start_handler_thread()
        self._watchdog = threading.Thread(
            target=self._watch_deadlines, name="arcature-watchdog", daemon=True
        )
        self._watchdog.start()

    def _start_handler_thread(self) -> None:
        """Start a handler thread (at start, or in place of an abandoned one).

        Started under the lock, so that shutdown and the watchdog only ever see
        slots whose thread runs (the new thread waits on the queue, not the lock).
        """
        slot = _HandlerSlot()
        with self._lock:
            if self._threads_stopping:
                return
            slot.thread = threading.Thread(
                target=self._serve,
                args=(slot,),
                name=f"arcature-handler-{self._handler_count}",
                daemon=True,
            )
            self._handler_count += 1
            self._slots.append(slot)
            slot.thread.start()

    def _stop_handlers(self) -> None:
        """Let the serving threads finish their loop; abandoned ones end with the process."""
        with self._lock:
            self._threads_stopping = True
            serving = [slot for slot in self._slots if not slot.abandoned]
            self._watch.notify()
        for _ in serving:
            self._todo.put(None)
        deadline = time.monotonic() + 1.0
        for slot in serving:
            if slot.thread is not None:
                slot.thread.join(max(deadline - time.monotonic(), 0))
        if self._watchdog is not None:
            self._watchdog.join(max(deadline - time.monotonic(), 0.1))
        abandoned = self._abandoned_alive()
        if abandoned:
            logger.warning(
                "worker %s: %d timed-out handler thread(s) still running; they end with the "
                "process and nothing they do can complete a job",
                self.worker_id,
                abandoned,
            )

    # --- a handler thread -----------------------------------------------------------------

    def _serve(self, slot: _HandlerSlot) -> None:
        """A handler thread: run jobs from the queue until told to stop, or abandoned."""
        loop: asyncio.AbstractEventLoop | None = None
        try:
            while True:
                entry = self._todo.get()
                if entry is None:
                    return
                with self._lock:
                    if entry.skipped:
                        continue
                    entry.started = True
                if self._trace is not None:
                    self._trace.started(entry.job.id, entry.trace)
                loop = self._run_one(slot, entry, loop)
                if slot.abandoned:
                    return  # another thread has taken this one's place
        finally:
            if loop is not None and not loop.is_running():
                loop.close()
            db_connections.close_all()

    def _run_one(
        self,
        slot: _HandlerSlot,
        entry: _InFlight,
        loop: asyncio.AbstractEventLoop | None,
    ) -> asyncio.AbstractEventLoop | None:
        """Run one attempt and hand its completion over; returns the thread's event loop.

        Never raises: a failure of ours around the handler is the attempt's panic.
        """
        if slot.connection_open:
            # Django's between-requests cleanup, before and after. Before is only for a
            # connection kept open since the last attempt (it may have outlived its
            # CONN_MAX_AGE while the thread waited); with none open it has nothing to do.
            _close_old_connections()
        started = time.perf_counter()
        plan: AttemptPlan | None = None
        try:
            plan = plan_attempt(entry.job, self.conf)
            if plan.is_async and loop is None:
                loop = asyncio.new_event_loop()
            self._watch_attempt(slot, entry, plan)
            completion = process(
                entry.job,
                worker_id=self.worker_id,
                context=entry.context,
                loop=loop,
                settings=self.conf,
                timeout=plan.timeout,
                policy=plan.policy,
                supervised=True,
                plan=plan,
            )
        except BaseException as exc:  # a bug of ours while running it: never lose the job
            logger.exception(
                "job %s failed inside the worker", entry.job.id, extra=entry.job.log_extra()
            )
            completion = _panic(entry, exc, self.worker_id)
        finally:
            slot.connection_open = _close_old_connections()
        seconds = time.perf_counter() - started
        timed_out = self._end_attempt(slot, entry)
        if timed_out is None:
            logger.info(
                "job %s (%s) came back after its thread was abandoned; its outcome (%s) "
                "was discarded",
                entry.job.id,
                entry.job.task_name,
                completion.kind,
            )
            return loop
        if timed_out and plan is not None:
            # Back within the grace period, but past the deadline: a timeout.
            completion = self._timeout_completion(entry, plan)
        # From this thread, which sent job_attempt_started (a tracing span's context).
        attempt_finished(entry.job, completion, seconds)
        self._hand_over(entry, completion, seconds)
        return loop

    # --- deadlines ------------------------------------------------------------------------

    def _watch_attempt(self, slot: _HandlerSlot, entry: _InFlight, plan: AttemptPlan) -> None:
        """Tell the watchdog that ``slot`` runs ``entry`` until its deadline."""
        now = time.monotonic()
        deadline = cutoff = math.inf
        if plan.timeout is not None:
            deadline = now + plan.timeout
            cutoff = deadline + TIMEOUT_GRACE_SECONDS
        with self._lock:
            slot.entry, slot.plan, slot.started = entry, plan, now
            slot.deadline, slot.cutoff, slot.timed_out = deadline, cutoff, False
            if deadline < self._watch_until:
                self._watch.notify()

    def _end_attempt(self, slot: _HandlerSlot, entry: _InFlight) -> bool | None:
        """The handler came back: None if the watchdog already wrote its outcome (the
        thread was abandoned), else whether it came back past its deadline (a timeout)."""
        with self._lock:
            if slot.abandoned:
                return None
            timed_out = slot.timed_out
            slot.entry, slot.plan = None, None
            slot.deadline = slot.cutoff = math.inf
            entry.done = True
            return timed_out

    def _watch_deadlines(self) -> None:
        """The watchdog thread: holds every attempt to its deadline, sync or async.

        At the deadline the handler is told to stop (its context is cancelled;
        an ``async def`` handler is also cancelled by its own ``asyncio.timeout``).
        Python cannot stop a thread, so an attempt still running a grace period
        later is written off: its timeout is written like any outcome (fenced,
        retried or dead by the job's policy) and a new handler thread takes the
        place of the one left running it.
        """
        while True:
            with self._lock:
                if self._threads_stopping:
                    return
                now = time.monotonic()
                told: list[_InFlight] = []
                due: list[_HandlerSlot] = []
                for slot in self._slots:
                    if slot.entry is None or slot.abandoned:
                        continue
                    if not slot.timed_out and slot.deadline <= now:
                        slot.timed_out = True
                        told.append(slot.entry)
                    if slot.cutoff <= now:
                        slot.abandoned = True
                        slot.entry.done = True
                        due.append(slot)
                if not told and not due:
                    self._watch_until = min(
                        (slot.next_check() for slot in self._slots), default=math.inf
                    )
                    self._watch.wait(min(self._watch_until - now, WATCHDOG_MAX_SLEEP))
                    self._watch_until = math.inf
                    continue
            for entry in told:
                entry.context.cancel("timeout")
            for slot in due:
                try:
                    self._write_off(slot)
                except Exception:  # the watchdog must outlive any one attempt
                    logger.exception("the deadline watchdog failed on one attempt")

    def _write_off(self, slot: _HandlerSlot) -> None:
        """Hand over the timeout of the attempt on ``slot``, whose thread is now abandoned."""
        entry, plan = slot.entry, slot.plan
        assert entry is not None
        assert plan is not None
        completion = self._timeout_completion(entry, plan)
        abandoned = self._abandoned_alive()
        if abandoned > self.conf.max_abandoned_threads and not self._exit_status:
            # Stop before the timeout is handed over, so that no claim slips in between.
            self._exit_status = EXIT_TOO_MANY_ABANDONED_THREADS
            logger.error(
                "worker %s: %d timed-out handler threads are still running, more than "
                "ARCATURE['MAX_ABANDONED_THREADS'] = %d; it stops claiming, finishes its other "
                "jobs and exits with status %d so that its supervisor starts a fresh process",
                self.worker_id,
                abandoned,
                self.conf.max_abandoned_threads,
                EXIT_TOO_MANY_ABANDONED_THREADS,
            )
            self.stop()
        logger.warning(
            "job %s (%s) passed its %gs timeout and did not stop; its thread is left running "
            "(%d such thread(s) now) and the worker moves on",
            entry.job.id,
            entry.job.task_name,
            plan.timeout,
            abandoned,
            extra=entry.job.log_extra(),
        )
        self._hand_over(entry, completion, time.monotonic() - slot.started)
        if not self._exit_status:
            self._start_handler_thread()

    def _timeout_completion(self, entry: _InFlight, plan: AttemptPlan) -> Completion:
        try:
            return timeout_completion(entry.job, plan, worker_id=self.worker_id)
        except Exception as exc:  # never leave the job without an outcome
            logger.exception("job %s: could not decide its timeout", entry.job.id)
            return _panic(entry, exc, self.worker_id)

    def _abandoned_alive(self) -> int:
        """Handler threads written off at a deadline and still running their handler."""
        with self._lock:
            self._slots = [
                slot
                for slot in self._slots
                if not slot.abandoned or (slot.thread is not None and slot.thread.is_alive())
            ]
            return sum(1 for slot in self._slots if slot.abandoned)


def _panic(entry: _InFlight, exc: BaseException, worker_id: str) -> Completion:
    return completion_for(entry.job, Panic.from_exception(exc), worker_id=worker_id)


def _close_old_connections() -> bool:
    """Django's between-requests cleanup; a database that is down must not end the thread.

    What ``django.db.close_old_connections`` does (each of this thread's connections
    closed if unusable or past its ``CONN_MAX_AGE``), in the same pass telling whether
    one is still open afterwards: True, or when the cleanup failed (the next attempt
    then runs it first).
    """
    still_open = False
    try:
        for conn in db_connections.all(initialized_only=True):
            conn.close_if_unusable_or_obsolete()
            still_open = still_open or conn.connection is not None
    except Exception:
        logger.debug("closing old connections failed", exc_info=True)
        return True
    return still_open

"""Waking an idle worker as soon as a job is enqueued (PostgreSQL LISTEN/NOTIFY).

Migration 0002 makes every INSERT into the job table send ``NOTIFY
arcature_jobs``, delivered when the enqueueing transaction commits. A
listener thread holds its own autocommit connection (never one of Django's:
a connection that LISTENs must stay open and idle outside any transaction)
and turns each notification into a call of ``wake``. When LISTEN cannot be
used the worker simply polls, so a broken listener costs latency, never jobs.

LISTEN can also succeed and then never deliver: behind a transaction-mode
pooler (PgBouncer) the LISTEN lands on a server connection that is handed to
other clients as soon as the statement ends. So after its first LISTEN the
listener sends itself a probe NOTIFY over a second connection, made the way
the worker's enqueues connect; if the probe does not arrive, it says so once
and leaves the worker to its adaptive polling. ``ARCATURE["LISTEN_DATABASE"]``
names a separate alias (PostgreSQL directly, or a session-mode pool) for the
LISTEN connection alone.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any

from django.db import connections

from django_arcature.conf import get_settings

logger = logging.getLogger(__name__)

CHANNEL = "arcature_jobs"
#: The payload of the notification a queue's pause or resume sends (queues/control.py).
#: Job inserts send an empty one; a listener's self-test sends ``probe:<token>``.
QUEUES_PAYLOAD = "queues"
PROBE_PREFIX = "probe:"
#: How :class:`WakePairs` names a NOTIFY's wake-up (a hint's: ``hints.HINT_CHANNEL``).
LISTEN_CHANNEL = "listen"
#: A running job was cancelled (migration 0013): ``cancel:<job id>``.
CANCEL_PREFIX = "cancel:"
#: How long the listener waits for its own probe before concluding LISTEN does not deliver.
PROBE_SECONDS = 2.0
#: How long (seconds) a wake-up waits for its twin from the other channel. The NOTIFY and
#: the same-host hint of one enqueue arrive well under a millisecond apart when idle, a few
#: under load; past this the second one wakes the worker again (a redundant claim, as
#: before pairing), and a window kept short leaves little room for a wrong pairing.
PAIR_SECONDS = 0.05
#: Unpaired wake-ups kept at most (all backends together): an enqueuer without hints, or
#: on another host, leaves its NOTIFYs unpaired; they must not pile up.
PAIR_LIMIT = 1024


class WakePairs:
    """Lets only the first of an enqueue's two wake-ups (its NOTIFY and its hint) through.

    On PostgreSQL a worker on the enqueuer's host hears each enqueue twice: the INSERT
    trigger's NOTIFY and the hint sent once the commit has returned. Each used to wake
    the main loop, and the second, arriving while the claim the first caused was on
    its way, made a second claim that found nothing, on the pickup's way (it held the
    GIL while the handler thread should start) and at the cost of a round trip per job.

    The two are told apart from other wake-ups by the enqueuer's server process: a
    notification carries the PID of the backend that sent it, and the hint carries the
    PID of the connection that committed (``hints.send_hints(..., backend_pid=...)``).
    A wake-up whose twin from the *other* channel, same PID, arrived within
    ``PAIR_SECONDS`` is dropped, and consumes that twin, so each arrival pairs at most
    once. Dropping it loses nothing: its transaction had committed before the twin was
    sent, and the twin has already woken the loop, whose next claim starts after the
    twin's arrival, so sees the job (the loop claims on every wake-up it takes).

    Why a wrong pairing loses no job: one backend runs its transactions one after
    the other, its NOTIFYs arrive in commit order and its hints are read in the order
    sent, and an arrival that woke the loop covers every transaction of that backend
    committed before it. The unpaired arrivals of one PID are all of one channel (an
    arrival of the other would have paired), so a dropped half is paired either with
    an arrival of its own or a later transaction (which woke the loop after its
    commit), or with an earlier one, and then its own other half pairs only with
    arrivals later than itself, or wakes. The one way to lose: a transaction with a
    NOTIFY and no hint, from a connection with a hint left unpaired. So the enqueuer
    puts its PID in at most one hint per transaction (one NOTIFY per transaction:
    ``hints.is_first_announcement``); hints that no NOTIFY accompanies (dependents
    released by an UPDATE), hints of older versions and notifications with a payload
    (queues, cancels, probes) carry none and are never paired; and the window bounds
    what a lost NOTIFY (the listener reconnecting) can leave behind.
    """

    def __init__(self, window: float = PAIR_SECONDS, limit: int = PAIR_LIMIT) -> None:
        self.window = window
        self.limit = limit
        self._lock = threading.Lock()
        #: Per backend PID, the unpaired arrivals in order: (channel, monotonic time).
        self._unpaired: dict[int, deque[tuple[str, float]]] = {}
        self._count = 0
        #: Wake-ups dropped as the twin of one already let through (for tests, metrics).
        self.dropped = 0

    def first(self, channel: str, pid: int | None) -> bool:
        """Whether this wake-up should wake the worker: False only for a twin's second half."""
        if pid is None:
            return True
        now = time.monotonic()
        with self._lock:
            arrivals = self._unpaired.get(pid)
            if arrivals is not None:
                while arrivals and now - arrivals[0][1] > self.window:
                    arrivals.popleft()
                    self._count -= 1
                for index, (other, _) in enumerate(arrivals):
                    if other != channel:
                        del arrivals[index]
                        self._count -= 1
                        if not arrivals:
                            del self._unpaired[pid]
                        self.dropped += 1
                        return False
            if self._count >= self.limit:
                self._forget_stale(now)
            if self._count < self.limit:
                self._unpaired.setdefault(pid, deque()).append((channel, now))
                self._count += 1
            return True

    def _forget_stale(self, now: float) -> None:
        """Drop every arrival older than the window (under the lock)."""
        for pid in list(self._unpaired):
            arrivals = self._unpaired[pid]
            while arrivals and now - arrivals[0][1] > self.window:
                arrivals.popleft()
                self._count -= 1
            if not arrivals:
                del self._unpaired[pid]


class Listener:
    """A daemon thread that calls ``wake()`` on every notification, reconnecting on failure.

    ``on_queues`` (default: ``wake``) is called instead for a queue's pause or resume,
    and after each (re)connect, when such a change may have been missed: only then
    must the worker re-read the pause flags. Job notifications wake every idle
    worker of the fleet at once, so sparing each of them that extra query halves
    the round trips of the wake-up, and takes one off the pickup's latency.
    Another listener's probe wakes nobody: no job is behind it. A running job's
    cancel (``cancel:<id>``) goes to ``on_cancel``: the worker that holds it runs its
    fenced heartbeat at once instead of at the next beat.
    """

    def __init__(
        self,
        using: str,
        wake: Callable[[], None],
        on_queues: Callable[[], None] | None = None,
        on_cancel: Callable[[str], None] | None = None,
        pairs: WakePairs | None = None,
        on_listening: Callable[[], None] | None = None,
    ) -> None:
        self.using = using
        self.listen_using = listen_alias(using)
        self.wake = wake
        self.on_queues = on_queues or wake
        #: Called with the job id when a running job is cancelled; ignored if None.
        self.on_cancel = on_cancel
        #: Called each time the LISTEN starts delivering (first connect, reconnect): a
        #: cancel sent while it was deaf (connecting, probing, down) was missed, so a
        #: worker with jobs running checks their claims now instead of a heartbeat later.
        self.on_listening = on_listening
        #: Shared with the worker's hint receiver: a job NOTIFY whose hint came first is dropped.
        self.pairs = pairs
        #: None until probed; False once LISTEN was found not to deliver here.
        self.delivers: bool | None = None
        self._closed = threading.Event()
        self._listening = threading.Event()
        self._thread = threading.Thread(target=self._run, name="arcature-listen", daemon=True)

    @staticmethod
    def supported(using: str) -> bool:
        return (
            connections[using].vendor == "postgresql"
            and connections[listen_alias(using)].vendor == "postgresql"
        )

    @property
    def listening(self) -> bool:
        """True while notifications can arrive; the worker polls faster otherwise."""
        return self._listening.is_set()

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._closed.set()

    def _connect(self) -> Any:
        conn = _autocommit_connection(self.listen_using)
        conn.execute(f"LISTEN {CHANNEL}")
        return conn

    def _probe(self, conn: Any) -> bool:
        """Whether a NOTIFY sent the way enqueues send theirs reaches this LISTEN."""
        token = f"{PROBE_PREFIX}{uuid.uuid4().hex}"
        with _autocommit_connection(self.using) as sender:
            sender.execute("SELECT pg_notify(%s, %s)", (CHANNEL, token))
        deadline = time.monotonic() + PROBE_SECONDS
        while (left := deadline - time.monotonic()) > 0:
            for notify in conn.notifies(timeout=left):
                if notify.payload == token:
                    return True
                # Already listening: an enqueue's or a cancel's notification that
                # arrives before our token is real, and would otherwise be lost.
                self._dispatch(notify.payload, notify.pid)
        return False

    def _run(self) -> None:
        pause = 0.1
        while not self._closed.is_set():
            conn = None
            try:
                conn = self._connect()
                if self.delivers is None:
                    self.delivers = self._probe(conn)
                    if not self.delivers:
                        logger.info(
                            "LISTEN %s on database %r does not receive notifications (a "
                            "transaction-mode pooler such as PgBouncer?); polling instead. Set "
                            "ARCATURE['LISTEN_DATABASE'] to an alias that reaches PostgreSQL "
                            "directly to wake at once.",
                            CHANNEL,
                            self.listen_using,
                        )
                        return
                self._listening.set()
                pause = 0.1
                # Anything enqueued (or paused) while we were not listening was
                # missed: look now.
                self.on_queues()
                if self.on_listening is not None:
                    self.on_listening()
                while not self._closed.is_set():
                    for notify in conn.notifies(timeout=0.5):
                        self._dispatch(notify.payload, notify.pid)
            except Exception as exc:  # the database went away, or LISTEN is refused
                if self._closed.is_set():
                    break
                self._listening.clear()
                logger.warning(
                    "LISTEN %s failed (%s); polling instead, retrying in %.1fs",
                    CHANNEL,
                    exc,
                    pause,
                )
                self._closed.wait(pause)
                pause = min(pause * 2, 5.0)
            finally:
                self._listening.clear()
                if conn is not None:
                    try:
                        conn.close()
                    except Exception:  # closing a dead connection may fail too
                        logger.debug("closing the LISTEN connection failed", exc_info=True)

    def _dispatch(self, payload: str, pid: int | None = None) -> None:
        if payload.startswith(PROBE_PREFIX):
            return
        if payload == QUEUES_PAYLOAD:
            self.on_queues()
        elif payload.startswith(CANCEL_PREFIX):
            if self.on_cancel is not None:
                self.on_cancel(payload[len(CANCEL_PREFIX) :])
        elif self.pairs is None or self.pairs.first(LISTEN_CHANNEL, pid):
            self.wake()


def listen_alias(using: str) -> str:
    """The alias the LISTEN connection uses: ``ARCATURE["LISTEN_DATABASE"]``, else ``using``."""
    return get_settings().listen_database or using


def _autocommit_connection(using: str) -> Any:
    """A psycopg connection of our own (never one of Django's), in autocommit."""
    import psycopg

    params = connections[using].get_connection_params()
    params.pop("cursor_factory", None)
    return psycopg.connect(**params, autocommit=True)

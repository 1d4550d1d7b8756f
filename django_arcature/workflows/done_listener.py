"""PostgreSQL: one LISTEN connection per process and database for every ``job.wait()`` in it.

A waiter registers the job id here, waits until this listener LISTENs on
``arcature_done``, marks its job (``arcature_waited``, migration 0013) and only
then reads the job's status. A completion that commits after the mark sends the
notification; one that committed before it is seen by the read: no lost
wake-up between "read" and "listen", in either order.

The connection is our own (never one of Django's: a LISTEN connection must stay
idle outside any transaction, and a request's connection is not ours to hold),
in autocommit, and shared by every sync and async waiter of the process, so a
thousand waiters cost one connection. It is opened by the first waiter and
closed once nobody has waited for ``IDLE_SECONDS``.

Nothing here may make a waiter hang: while the connection is down (killed,
restarted, a network cut) every waiter polls on its own; after a reconnect the
listener reads the status of every job it is waiting for at once, since
notifications sent meanwhile are lost; and while it listens it re-reads them
every ``SAFETY_SECONDS`` in one query, in case one is lost anyway. Behind a
transaction-mode pooler (PgBouncer) LISTEN succeeds but never delivers: a
probe NOTIFY, sent once per process the way completions are sent, finds that
out, and the process's waiters poll from then on (``ARCATURE["LISTEN_DATABASE"]``
names an alias that bypasses the pooler, as for the workers).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
import uuid
from collections.abc import Iterable
from typing import Any

from django.db import connections

from django_arcature.states import FINISHED_STATUSES
from django_arcature.worker.wakeup import _autocommit_connection, listen_alias

logger = logging.getLogger(__name__)

CHANNEL = "arcature_done"
PROBE_PREFIX = "probe:"
#: How long the first listener of a process waits for its probe.
PROBE_SECONDS = 2.0
#: While listening, every waited-for job is re-read at least this often (one query).
SAFETY_SECONDS = 0.5
#: How often the thread looks up from its connection (to close, re-read, or stop).
TICK_SECONDS = 0.1
#: The connection is closed once nobody has waited for this long.
IDLE_SECONDS = 10.0
#: How a listener's backend shows in ``pg_stat_activity``.
APPLICATION_NAME = "arcature-wait"

#: Per LISTEN alias: whether notifications reach a LISTEN there (None: not probed yet).
_delivers: dict[str, bool] = {}


class Waiter:
    """One ``wait()`` call: woken (from the listener's thread) when its job may have finished."""

    def __init__(self, job_id: uuid.UUID, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.job_id = str(job_id)
        self.loop = loop
        self.event = threading.Event()
        self.async_event = asyncio.Event() if loop is not None else None

    def wake(self) -> None:
        self.event.set()
        if self.loop is not None and self.async_event is not None:
            with contextlib.suppress(RuntimeError):  # its loop is closed: nobody to wake
                self.loop.call_soon_threadsafe(self.async_event.set)

    def clear(self) -> None:
        self.event.clear()
        if self.async_event is not None:
            self.async_event.clear()


class DoneListener:
    """The daemon thread holding the LISTEN connection, and the waiters it wakes."""

    def __init__(self, using: str) -> None:
        self.using = using
        self.listen_using = listen_alias(using)
        self.table = _job_table()
        self._lock = threading.Lock()
        self._waiters: dict[str, set[Waiter]] = {}
        self._thread: threading.Thread | None = None
        self._listening = threading.Event()
        #: The backend pid of the LISTEN connection (for tests and operators).
        self.backend_pid: int | None = None
        self.reconnects = 0
        self._closed = threading.Event()
        self.pid = os.getpid()

    @property
    def listening(self) -> bool:
        """True while a notification would reach us: a waiter may then stop polling."""
        return self._listening.is_set()

    @property
    def delivers(self) -> bool | None:
        return _delivers.get(self.listen_using)

    def register(self, waiter: Waiter) -> None:
        with self._lock:
            self._waiters.setdefault(waiter.job_id, set()).add(waiter)
            if self._thread is None and _delivers.get(self.listen_using) is not False:
                self._thread = threading.Thread(
                    target=self._run, name="arcature-wait-listen", daemon=True
                )
                self._thread.start()

    def unregister(self, waiter: Waiter) -> None:
        with self._lock:
            found = self._waiters.get(waiter.job_id)
            if found is not None:
                found.discard(waiter)
                if not found:
                    del self._waiters[waiter.job_id]

    # --- the thread ---------------------------------------------------------------------

    def _run(self) -> None:
        pause = 0.1
        idle_since = time.monotonic()
        while not self._closed.is_set():
            conn = None
            try:
                conn = _autocommit_connection(self.listen_using)
                conn.execute(f"SET application_name = '{APPLICATION_NAME}'")
                conn.execute(f"LISTEN {CHANNEL}")
                self.backend_pid = conn.info.backend_pid
                if self.listen_using not in _delivers and not self._probe(conn):
                    _delivers[self.listen_using] = False
                    logger.info(
                        "LISTEN %s on database %r does not receive notifications (a "
                        "transaction-mode pooler such as PgBouncer?); job.wait() polls instead. "
                        "Set ARCATURE['LISTEN_DATABASE'] to an alias that reaches PostgreSQL "
                        "directly for an immediate wake-up.",
                        CHANNEL,
                        self.listen_using,
                    )
                    self._stop_thread()
                    return
                _delivers[self.listen_using] = True
                self._listening.set()
                pause = 0.1
                # Whatever finished while we were not listening sent nothing we heard,
                # and a waiter that started meanwhile has not marked its job: each
                # marks (once) and reads now.
                self._wake_all()
                checked = time.monotonic()
                while not self._closed.is_set():
                    for notify in conn.notifies(timeout=TICK_SECONDS):
                        self._wake(notify.payload)
                    now = time.monotonic()
                    if self._waiting():
                        idle_since = now
                        if now - checked >= SAFETY_SECONDS:
                            self._check(conn)
                            checked = now
                    elif now - idle_since > IDLE_SECONDS and self._stop_if_idle():
                        return
            except Exception as exc:  # the connection dropped, or LISTEN was refused
                self._listening.clear()
                if self._closed.is_set():
                    break
                self.reconnects += 1
                logger.warning("LISTEN %s failed (%s); waiters poll meanwhile", CHANNEL, exc)
                self._wake_all()  # each polls on its own until we are back
                if not self._waiting() and self._stop_if_idle():
                    return
                self._closed.wait(pause)
                pause = min(pause * 2, 5.0)
            finally:
                self._listening.clear()
                if conn is not None:
                    try:
                        conn.close()
                    except Exception:  # closing a dead connection may fail too
                        logger.debug("closing the wait LISTEN connection failed", exc_info=True)

    def close(self, wait: float = 5.0) -> None:
        """Stop the thread and close its connection (within ``TICK_SECONDS``)."""
        self._closed.set()
        with self._lock:
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(wait)
        self._wake_all()

    def _probe(self, conn: Any) -> bool:
        """Whether a NOTIFY sent the way completions are sent reaches this LISTEN."""
        token = f"{PROBE_PREFIX}{uuid.uuid4().hex}"
        with _autocommit_connection(self.using) as sender:
            sender.execute("SELECT pg_notify(%s, %s)", (CHANNEL, token))
        deadline = time.monotonic() + PROBE_SECONDS
        while (left := deadline - time.monotonic()) > 0:
            for notify in conn.notifies(timeout=left):
                if notify.payload == token:
                    return True
                self._wake(notify.payload)
        return False

    def _waiting(self) -> bool:
        with self._lock:
            return bool(self._waiters)

    def _stop_if_idle(self) -> bool:
        with self._lock:
            if self._waiters:
                return False
            self._thread = None
            return True

    def _stop_thread(self) -> None:
        with self._lock:
            self._thread = None
            waiters = [w for group in self._waiters.values() for w in group]
        for waiter in waiters:
            waiter.wake()

    def _wake(self, job_id: str) -> None:
        with self._lock:
            found = list(self._waiters.get(job_id, ()))
        for waiter in found:
            waiter.wake()

    def _wake_all(self) -> None:
        with self._lock:
            found = [w for group in self._waiters.values() for w in group]
        for waiter in found:
            waiter.wake()

    def _check(self, conn: Any) -> None:
        """Wake the waiters of every job that is finished (or gone), in one query."""
        with self._lock:
            ids = list(self._waiters)
        if not ids:
            return
        rows = conn.execute(
            f"SELECT id::text FROM {self.table} WHERE id = ANY(%s::uuid[]) AND status <> ALL(%s)",
            (ids, [str(status) for status in FINISHED_STATUSES]),
        ).fetchall()
        unfinished = {row[0] for row in rows}
        for job_id in ids:
            if job_id not in unfinished:
                self._wake(job_id)


_listeners: dict[str, DoneListener] = {}
_listeners_lock = threading.Lock()


def listener_for(using: str) -> DoneListener | None:
    """The process's listener for ``using``, or None where waiters must poll."""
    from django_arcature.conf import get_settings

    if not get_settings().use_listen_notify:
        return None
    if connections[using].vendor != "postgresql":
        return None
    if connections[listen_alias(using)].vendor != "postgresql":
        return None
    if _delivers.get(listen_alias(using)) is False:
        return None
    with _listeners_lock:
        found = _listeners.get(using)
        # A forked child (a pre-forking web server) inherits the parent's listener
        # but not its thread or connection: it gets one of its own.
        if found is None or found.pid != os.getpid():
            found = _listeners[using] = DoneListener(using)
        return found


def mark_waited(job_id: uuid.UUID, using: str) -> None:
    """Ask for a notification when ``job_id`` finishes (a no-op once it has, or if marked)."""
    table = _job_table()
    with connections[using].cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET arcature_waited = true "
            "WHERE id = %s AND NOT arcature_waited AND status <> ALL(%s)",
            [job_id, [str(status) for status in FINISHED_STATUSES]],
        )


def _job_table() -> str:
    # Through the app registry: the models module imports this one (``Job.wait``).
    from django.apps import apps

    job = apps.get_model("django_arcature", "Job")
    return connections["default"].ops.quote_name(job._meta.db_table)


def close_all() -> None:
    """Close every listener of this process (before dropping a database, say)."""
    with _listeners_lock:
        found = list(_listeners.values())
        _listeners.clear()
    for listener in found:
        listener.close()


def reset_for_tests(aliases: Iterable[str] = ()) -> None:
    """Forget every probe result (a test that changes the database setup calls this)."""
    for alias in list(aliases) or list(_delivers):
        _delivers.pop(alias, None)

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
#: A running job was cancelled (migration 0013): ``cancel:<job id>``.
CANCEL_PREFIX = "cancel:"
#: How long the listener waits for its own probe before concluding LISTEN does not deliver.
PROBE_SECONDS = 2.0


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
    ) -> None:
        self.using = using
        self.listen_using = listen_alias(using)
        self.wake = wake
        self.on_queues = on_queues or wake
        #: Called with the job id when a running job is cancelled; ignored if None.
        self.on_cancel = on_cancel
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
                while not self._closed.is_set():
                    for notify in conn.notifies(timeout=0.5):
                        self._dispatch(notify.payload)
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

    def _dispatch(self, payload: str) -> None:
        if payload.startswith(PROBE_PREFIX):
            return
        if payload == QUEUES_PAYLOAD:
            self.on_queues()
        elif payload.startswith(CANCEL_PREFIX):
            if self.on_cancel is not None:
                self.on_cancel(payload[len(CANCEL_PREFIX) :])
        else:
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

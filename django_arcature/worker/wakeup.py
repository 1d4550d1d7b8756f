"""Waking an idle worker as soon as a job is enqueued (PostgreSQL LISTEN/NOTIFY).

Migration 0002 makes every INSERT into the job table send ``NOTIFY
arcature_jobs``, delivered when the enqueueing transaction commits. A
listener thread holds its own autocommit connection (never one of Django's:
a connection that LISTENs must stay open and idle outside any transaction)
and turns each notification into a call of ``wake``. When LISTEN cannot be
used the worker simply polls, so a broken listener costs latency, never jobs.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from django.db import connections

logger = logging.getLogger(__name__)

CHANNEL = "arcature_jobs"


class Listener:
    """A daemon thread that calls ``wake()`` on every notification, reconnecting on failure."""

    def __init__(self, using: str, wake: Callable[[], None]) -> None:
        self.using = using
        self.wake = wake
        self._closed = threading.Event()
        self._listening = threading.Event()
        self._thread = threading.Thread(target=self._run, name="arcature-listen", daemon=True)

    @staticmethod
    def supported(using: str) -> bool:
        return connections[using].vendor == "postgresql"

    @property
    def listening(self) -> bool:
        """True while notifications can arrive; the worker polls faster otherwise."""
        return self._listening.is_set()

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._closed.set()

    def _connect(self) -> Any:
        import psycopg

        params = connections[self.using].get_connection_params()
        params.pop("cursor_factory", None)
        conn = psycopg.connect(**params, autocommit=True)
        conn.execute(f"LISTEN {CHANNEL}")
        return conn

    def _run(self) -> None:
        pause = 0.1
        while not self._closed.is_set():
            conn = None
            try:
                conn = self._connect()
                self._listening.set()
                pause = 0.1
                # Anything enqueued while we were not listening was missed: look now.
                self.wake()
                while not self._closed.is_set():
                    for _ in conn.notifies(timeout=0.5):
                        self.wake()
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

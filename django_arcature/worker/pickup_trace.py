"""Stamps of each job's way from a wake-up to its handler thread, for ``arcature_bench``.

An idle pickup's latency is spent in several places: the enqueue's commit, the
notification or hint on its way, the worker's main thread waking, its claim's
round trip, and the hand-off to a handler thread. To say which of them costs
what, a worker started with ``ARCATURE_PICKUP_TRACE=<file>`` in its environment
appends one JSON line per claimed job to that file, with the moments (``time.time_ns``,
``CLOCK_REALTIME``, so they compare with the enqueueing process's on the same host)
of each step. The benchmark reads the file after stopping the worker.

Off (the variable unset), the worker pays one ``is None`` test per step: nothing is
stamped or written. The file is opened in append mode, never truncated or created
anywhere but where the variable says; a write that fails turns tracing off (a log
line), and never touches a job.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from typing import IO

logger = logging.getLogger(__name__)

ENV = "ARCATURE_PICKUP_TRACE"

#: How the worker learnt of the job it then claimed: a LISTEN notification, a
#: same-host hint, or its own poll (no wake-up before the claim).
LISTEN, HINT, POLL = "listen", "hint", "poll"


class PickupTrace:
    """The stamps of the current wake-up, and the file each claimed job's line goes to.

    ``woke`` is called from the listener and hint threads, everything else from the
    worker's main thread, except ``started`` (a handler thread): the main thread's
    stamps for one claim are copied into each of its jobs before any handler sees
    them, so the only shared state is the wake-up's (under a lock) and the file.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._out: IO[str] | None = open(path, "a", encoding="utf-8")  # noqa: SIM115
        #: The first wake-up before the claim now on its way (or the next one), and
        #: the first that arrived while that claim was on its way: the job it
        #: announces may have committed too late for it, and is the next claim's.
        self._current: tuple[int, str] | None = None
        self._next: tuple[int, str] | None = None
        self._in_flight = False
        self._taken_ns = 0
        self._claim_sent_ns = 0
        #: An empty claim's line, written once the loop next waits (or claims again).
        self._empty: dict[str, object] | None = None

    @classmethod
    def from_environment(cls) -> PickupTrace | None:
        path = os.environ.get(ENV)
        if not path:
            return None
        try:
            return cls(path)
        except OSError as exc:
            logger.warning("pickup trace off: cannot open %s (%s)", path, exc)
            return None

    # -- main-thread and wake-up threads' stamps --------------------------------------

    def woke(self, source: str) -> None:
        """A notification or hint arrived (its thread)."""
        stamp = (time.time_ns(), source)
        with self._lock:
            if self._in_flight:
                if self._next is None:
                    self._next = stamp
            elif self._current is None:
                self._current = stamp

    def taken(self) -> None:
        """The main thread took a wake-up event off its queue."""
        if not self._taken_ns:
            self._taken_ns = time.time_ns()

    def claim_sent(self) -> None:
        self._flush_empty(time.time_ns())
        with self._lock:
            self._in_flight = True
        self._claim_sent_ns = time.time_ns()

    def waiting(self) -> None:
        """The main thread is about to wait for events: it was busy until now."""
        if self._empty is not None:
            self._flush_empty(time.time_ns())

    def _flush_empty(self, until: int) -> None:
        empty, self._empty = self._empty, None
        if empty is not None:
            self._write({**empty, "busy_until_ns": until})

    def claimed(self, count: int) -> dict[str, int | str] | None:
        """The claim came back with ``count`` jobs: their shared stamps.

        A job found without a wake-up since the last claim (the worker's poll, or
        the claim it makes at once after a full batch) is marked ``poll``. An empty
        claim writes a line of its own (no ``job``: when it was sent and came back,
        what woke it, and when the loop next waited, ``busy_until_ns``) and
        returns None.
        """
        back = time.time_ns()
        with self._lock:
            wake, self._current, self._next = self._current, self._next, None
            self._in_flight = False
        taken, self._taken_ns = self._taken_ns, 0
        sent = self._claim_sent_ns
        if not count:
            self._empty = {
                "source": wake[1] if wake else POLL,
                "claim_sent_ns": sent,
                "claim_back_ns": back,
                "batch": 0,
            }
            return None
        return {
            "source": wake[1] if wake else POLL,
            "woke_ns": wake[0] if wake else sent,
            "taken_ns": taken if wake and taken else sent,
            "claim_sent_ns": sent,
            "claim_back_ns": back,
            "batch": count,
        }

    # -- a handler thread ---------------------------------------------------------------

    def started(self, job_id: object, stamps: dict[str, int | str] | None) -> None:
        """A handler thread is about to run the job: write its line (its claim's stamps)."""
        if stamps is not None:
            self._write({"job": str(job_id), **stamps, "handler_ns": time.time_ns()})

    def _write(self, record: dict[str, object]) -> None:
        line = json.dumps(record)
        with self._lock:
            out = self._out
            if out is None:
                return
            try:
                out.write(line + "\n")
                out.flush()
            except OSError as exc:
                self._out = None
                logger.warning("pickup trace off: writing %s failed (%s)", self.path, exc)
                _close_quietly(out)

    def close(self) -> None:
        with self._lock:
            out, self._out = self._out, None
        if out is not None:
            out.close()


def _close_quietly(out: IO[str]) -> None:
    """Close a file whose write failed: what it still buffers cannot be written either."""
    with contextlib.suppress(OSError):
        out.close()

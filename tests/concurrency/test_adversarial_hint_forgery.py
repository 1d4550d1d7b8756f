"""A hostile local user forging a wake-up hint to swallow a real NOTIFY (worker.wakeup.WakePairs).

A hint datagram ``!<pid>`` pairs with the NOTIFY of backend ``<pid>`` arriving within
``PAIR_SECONDS``, and the later of the two is dropped. A forged hint naming the
backend of an enqueue about to commit would therefore drop that enqueue's NOTIFY
(a late pickup, up to a poll interval). Only a sender that can reach the worker's
socket can forge one: this checks that another Unix user, told the socket's exact
path, cannot, so the pairing state never holds a datagram of theirs.

Our side runs as root (permission checks are then about the folder's owner and
mode alone); the forger is the unprivileged ``arcature-hostile``. No sleep: the
forger's ``sendto`` answers at once, and a datagram of ours sent after it marks when
the receiver thread has read everything that reached the socket before it.
"""

from __future__ import annotations

import os
import pwd
import socket
import stat
import threading
from pathlib import Path

import pytest

from django_arcature.hints import HINT_CHANNEL, HintReceiver
from django_arcature.worker.wakeup import LISTEN_CHANNEL, WakePairs
from tests.concurrency.conftest import wait_until
from tests.concurrency.local_users import HOSTILE, ensure_user, run_as

pytestmark = [pytest.mark.slow, pytest.mark.heavy]

#: The backend PID the forger names (any: the worker cannot tell a forged one).
FORGED_PID = 4242


class Wakes:
    """Counts the wake-ups the receiver lets through."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 0

    def __call__(self) -> None:
        with self._lock:
            self.count += 1


def test_another_user_cannot_forge_a_hint_that_swallows_a_notify(shared: Path) -> None:
    """The forger's datagram is refused (EACCES: the hint folder is 0700, ours), so the
    NOTIFY of the backend it names is let through; a real hint of it still pairs."""
    hostile: pwd.struct_passwd = ensure_user(HOSTILE)
    pairs = WakePairs(window=3600.0)  # a window no test run outlasts: any pairing would show
    wakes = Wakes()
    receiver = HintReceiver("default", wakes, pairs)
    assert receiver.start(), "the hint receiver did not start"
    try:
        path = receiver.path
        assert stat.S_ISSOCK(os.lstat(path).st_mode)
        assert str(path).startswith(str(shared))

        tried = run_as(
            hostile,
            f"""
            s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            try:
                s.sendto(b"!{FORGED_PID}", {str(path)!r})
                print(json.dumps({{"sent": True, "errno": None}}))
            except OSError as exc:
                print(json.dumps({{"sent": False, "errno": exc.errno}}))
            """,
        )
        assert (tried["sent"], tried["errno"]) == (False, 13), tried  # EACCES

        # Ours, after theirs: once it has woken the worker, whatever reached the socket
        # before it has been read.
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as ours:
            ours.sendto(b"!", str(path))
        wait_until(lambda: wakes.count >= 1, timeout=10, what="our own hint to be read")
        assert wakes.count == 1  # theirs woke nothing either

        # The real NOTIFY of backend FORGED_PID still wakes the worker: nothing to pair with.
        assert pairs.first(LISTEN_CHANNEL, FORGED_PID) is True
        assert pairs.dropped == 0
        # And the pairing itself works, so the check above could have failed: a hint of
        # that backend now pairs with the NOTIFY just let through.
        assert pairs.first(HINT_CHANNEL, FORGED_PID) is False
        assert pairs.dropped == 1
    finally:
        receiver.close()

"""Same-host wake-up hints: an enqueue's commit nudges the idle workers on this machine.

Where LISTEN/NOTIFY is not available (MariaDB, SQLite, PostgreSQL behind a
transaction pooler), an idle worker would notice a new job only at its next
poll. So each worker binds a Unix datagram socket in a directory named after
the database it serves, and an enqueue, once its transaction has committed,
sends one byte to every socket there: a wake-up costs the database nothing.

A hint is only a hint. One that is lost (a full socket buffer, a worker on
another host, a process that died without cleaning up) costs latency, never a
job: the worker's polling remains the safety net, and sending never raises
into the enqueue that triggered it.
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import os
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from django.db import connections

from django_arcature.conf import ArcatureSettings, get_settings

logger = logging.getLogger(__name__)

_SUFFIX = ".sock"


#: ``hint_directory`` per database identity and base folder: a digest is worked out once.
_directories: dict[tuple[object, ...], Path] = {}


def hint_directory(using: str, conf: ArcatureSettings | None = None) -> Path:
    """The folder shared by the processes of this host that use this database.

    Named by a digest of the database's identity (vendor, host, port, name), so
    two projects, or a test database and a real one, never nudge each other.
    """
    get = connections[using].settings_dict.get
    configured = (conf or get_settings()).wake_hint_dir
    key = (get("ENGINE"), get("HOST"), get("PORT"), get("NAME"), configured)
    found = _directories.get(key)
    if found is None:
        identity = "|".join(str(part or "") for part in key[:4])
        base = configured or os.path.join(tempfile.gettempdir(), "arcature-wake")
        digest = hashlib.sha256(identity.encode()).hexdigest()[:20]
        found = _directories[key] = Path(base) / digest
    return found


class _Sender:
    """One unbound datagram socket per process, reused by every hint it sends.

    Opening a socket for each enqueue's hint cost as much as sending it. A
    datagram send is one system call, safe from several threads at once; a
    child process (``fork``) opens its own.
    """

    def __init__(self) -> None:
        self._socket: socket.socket | None = None
        self._pid = 0
        self._lock = threading.Lock()

    def get(self) -> socket.socket:
        sender, pid = self._socket, os.getpid()
        if sender is not None and self._pid == pid:
            return sender
        with self._lock:
            if self._socket is None or self._pid != pid:
                sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                sender.setblocking(False)
                self._socket, self._pid = sender, pid
            return self._socket

    def close(self) -> None:
        sender, self._socket = self._socket, None
        if sender is not None:
            sender.close()


_sender = _Sender()
atexit.register(_sender.close)


def send_hints(using: str, directory: Path | None = None) -> int:
    """Nudge every worker listening for this database on this host; return how many.

    ``directory`` is ``hint_directory(using)`` when the caller has it already (an
    enqueue reads the settings once). Sockets whose worker is gone (refused, or
    missing) are removed so the next enqueue does not try them again.
    """
    folder = str(directory or hint_directory(using))
    try:
        paths = _listing(folder)
    except OSError:  # no worker has ever listened here: nothing to do
        return 0
    sent = 0
    sender = _sender.get()
    for path in paths:
        try:
            sender.sendto(b"!", path)
            sent += 1
        except BlockingIOError:  # its buffer is full: it has been nudged already
            sent += 1
        except (ConnectionRefusedError, FileNotFoundError):
            _listings.pop(folder, None)
            _remove(path)
        except OSError as exc:
            logger.debug("wake-up hint to %s failed: %s", path, exc)
    return sent


#: A folder's listing is trusted only if the folder had not changed for this long
#: when it was read (nanoseconds): its modification time comes from a clock that
#: ticks every few milliseconds, so a socket bound within the same tick as an
#: earlier change would leave it unchanged.
_SETTLED_NS = 50_000_000
#: ... and for at most this long (nanoseconds), whatever the folder's time says.
_LISTING_TTL_NS = 1_000_000_000

#: Per hint folder: (its modification time, when it was read, its sockets).
_listings: dict[str, tuple[int, int, list[str]]] = {}


def _listing(folder: str) -> list[str]:
    """The sockets in ``folder``, read again only when the folder has changed.

    Binding or removing a socket changes the folder's modification time, so one
    ``stat`` tells whether the last listing still holds; a listing read while the
    folder was still changing is not kept, and none is kept longer than a second.
    A new worker is therefore found by the first enqueue after it bound (at the
    latest a second later, where the file system keeps no such time).
    """
    changed = os.stat(folder).st_mtime_ns
    kept = _listings.get(folder)
    clock = time.monotonic_ns()
    if kept is not None and kept[0] == changed and clock - kept[1] < _LISTING_TTL_NS:
        return kept[2]
    paths = [entry.path for entry in os.scandir(folder) if entry.name.endswith(_SUFFIX)]
    if time.time_ns() - changed > _SETTLED_NS:
        _listings[folder] = (changed, clock, paths)
    else:
        _listings.pop(folder, None)
    return paths


class HintReceiver:
    """A worker's socket in the hint folder and the daemon thread that reads it."""

    def __init__(self, using: str, wake: Callable[[], None]) -> None:
        self.directory = hint_directory(using)
        self.wake = wake
        self.path = self.directory / f"{os.getpid()}-{uuid.uuid4().hex[:8]}{_SUFFIX}"
        self._socket: socket.socket | None = None
        self._thread = threading.Thread(target=self._run, name="arcature-hints", daemon=True)

    def start(self) -> bool:
        """Bind and start reading; False (and polling alone) if the folder is unusable."""
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            receiver.bind(str(self.path))
        except OSError as exc:
            logger.info("same-host wake-up hints are off (%s); polling only", exc)
            return False
        self._socket = receiver
        self._thread.start()
        return True

    def close(self) -> None:
        receiver, self._socket = self._socket, None
        if receiver is not None:
            _remove(str(self.path))
            receiver.close()

    def _run(self) -> None:
        receiver = self._socket
        while receiver is not None and self._socket is not None:
            try:
                receiver.recv(64)
            except OSError:  # closed by close(): the worker is stopping
                return
            self.wake()


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        logger.debug("could not remove stale hint socket %s", path, exc_info=True)

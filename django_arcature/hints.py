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
import stat
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from django.db import connections

from django_arcature.conf import ArcatureSettings, get_settings
from django_arcature.core.hint_paths import DIGEST_CHARS, SOCKET_PATH_MAX_BYTES
from django_arcature.core.private_folder import (
    UnsafeFolderError,
    check_holding_folder,
    check_private_folder,
    is_own_socket,
    make_private_folder,
)

if TYPE_CHECKING:
    from django_arcature.worker.wakeup import WakePairs

logger = logging.getLogger(__name__)

#: How ``worker.wakeup.WakePairs`` names a hint's wake-up.
HINT_CHANNEL = "hint"

_SUFFIX = ".sock"
#: Where to change the hint folder, said by every warning about it.
_SETTING_FIX = "or set ARCATURE['WAKE_HINT_DIR'] to a folder of your own"


@dataclass(frozen=True)
class _Layout:
    """Where the sockets live, and what each folder above them must be to be trusted.

    ``folder`` (one per database) and, unless configured, ``base`` are private to
    this user; ``holder`` holds ``base`` and must not let others swap it. A
    configured ``WAKE_HINT_DIR`` is ``base`` itself, checked as a holding folder
    (an operator may share one such folder between several databases).
    """

    folder: Path
    base: Path
    holder: Path | None
    configured: bool
    runtime: bool


#: ``_layout`` per database identity, base folder and environment: worked out once.
_layouts: dict[tuple[object, ...], _Layout] = {}
#: The layout of each folder handed out, for ``send_hints`` given only the folder.
_by_folder: dict[str, _Layout] = {}


def _runtime_dir() -> Path | None:
    """``XDG_RUNTIME_DIR`` if it is set and valid: ours, mode 0700, not a symbolic link."""
    value = os.environ.get("XDG_RUNTIME_DIR")
    if not value or not os.path.isabs(value):
        return None
    try:
        check_private_folder(value)
    except OSError as exc:
        logger.info(
            "XDG_RUNTIME_DIR is not usable for wake-up hints (%s); using %s",
            exc,
            tempfile.gettempdir(),
        )
        return None
    return Path(value)


def _layout(using: str, conf: ArcatureSettings | None = None) -> _Layout:
    get = connections[using].settings_dict.get
    configured = (conf or get_settings()).wake_hint_dir
    key = (
        get("ENGINE"),
        get("HOST"),
        get("PORT"),
        get("NAME"),
        configured,
        os.environ.get("XDG_RUNTIME_DIR"),
        tempfile.gettempdir(),
        os.geteuid(),  # a process that changed its user gets that user's folder
    )
    found = _layouts.get(key)
    if found is None:
        identity = "|".join(str(part or "") for part in key[:4])
        digest = hashlib.sha256(identity.encode()).hexdigest()[:DIGEST_CHARS]
        runtime = None if configured else _runtime_dir()
        if configured:
            base, holder = Path(configured), None
        elif runtime is not None:
            base, holder = runtime / "arcature-wake", runtime
        else:
            temp = Path(tempfile.gettempdir())
            base, holder = temp / f"arcature-wake-{os.geteuid()}", temp
        found = _layouts[key] = _Layout(
            base / digest, base, holder, bool(configured), runtime is not None
        )
        _by_folder[str(found.folder)] = found
    return found


def hint_directory(using: str, conf: ArcatureSettings | None = None) -> Path:
    """The folder shared by this user's processes on this host that use this database.

    Named by a digest of the database's identity (vendor, host, port, name), so
    two projects, or a test database and a real one, never nudge each other. It
    lies in ``ARCATURE["WAKE_HINT_DIR"]``, else in ``$XDG_RUNTIME_DIR/arcature-wake``
    when that is a valid runtime folder, else in ``arcature-wake-<uid>`` in the
    system's temporary folder: a folder per user, since another user must neither
    hear when we enqueue nor place anything where we send.
    """
    return _layout(using, conf).folder


def _verify(layout: _Layout, *, create: bool) -> None:
    """Raise unless every folder on the way to the sockets is safe (made if ``create``)."""
    if layout.configured:
        if create:
            os.makedirs(layout.base, mode=0o700, exist_ok=True)
        check_holding_folder(layout.base)
    else:
        if layout.holder is None:  # pragma: no cover - every default layout has one
            raise UnsafeFolderError(layout.base, "has no known parent", _SETTING_FIX)
        if layout.runtime:
            check_private_folder(layout.holder)
        else:
            check_holding_folder(layout.holder)
        (make_private_folder if create else check_private_folder)(layout.base)
    (make_private_folder if create else check_private_folder)(layout.folder)


def _layout_of(folder: str) -> _Layout:
    """The layout ``hint_directory`` handed out for ``folder`` (else: private, in a holder)."""
    found = _by_folder.get(folder)
    if found is None:
        path = Path(folder)
        found = _Layout(path, path.parent, None, True, False)
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


#: A hint's datagram: this byte, then (optionally) the decimal PID of the PostgreSQL
#: backend whose commit it follows. Receivers of older versions read nothing of it.
_MARK = b"!"
#: The longest datagram a receiver reads: the mark and a PID of up to 20 digits.
_HINT_BYTES = 64


def _datagram(backend_pid: int | None) -> bytes:
    if backend_pid is None:
        return _MARK
    return _MARK + str(int(backend_pid)).encode()


def hint_pid(datagram: bytes) -> int | None:
    """The backend PID a hint carries, or None (an old sender's, a release's, or malformed)."""
    if len(datagram) < 2 or datagram[:1] != _MARK or len(datagram) > 21:
        return None
    digits = datagram[1:]
    if not digits.isdigit():
        return None
    return int(digits)


def committing_backend_pid(using: str) -> int | None:
    """The PostgreSQL backend PID of ``using``'s open connection, else None (no round trip).

    A hint that carries it lets a worker that also hears the commit's NOTIFY (which
    carries the same PID) tell the two wake-ups of one enqueue from two enqueues
    (``worker.wakeup.WakePairs``). Behind a pooler the client sees a PID of the
    pooler's making, which no NOTIFY carries: the two are then simply never paired.
    """
    connection = connections[using]
    if connection.vendor != "postgresql" or connection.connection is None:
        return None
    raw = connection.connection
    try:
        info = getattr(raw, "info", None)
        pid = info.backend_pid if info is not None else raw.get_backend_pid()
    except Exception:  # a closed or broken connection: the hint goes without it
        return None
    return int(pid) if pid else None


def is_first_announcement(using: str) -> bool:
    """Whether a hint registered now would be its transaction's only one to carry a PID.

    PostgreSQL sends one NOTIFY per transaction however many rows or enqueues it holds
    (identical notifications of one transaction are merged), so at most one hint per
    transaction may name its backend: a second one would be left unpaired and could
    then swallow the NOTIFY of that connection's next transaction. Outside a
    transaction the hint is sent at once, alone; inside one, only while nothing else
    waits for its commit (the first enqueue of it, with no caller's ``on_commit``).
    """
    connection = connections[using]
    return not connection.in_atomic_block or not connection.run_on_commit


def send_hints(using: str, directory: Path | None = None, *, backend_pid: int | None = None) -> int:
    """Nudge every worker listening for this database on this host; return how many.

    ``directory`` is ``hint_directory(using)`` when the caller has it already (an
    enqueue reads the settings once). Only sockets of this user in a folder that is
    verifiably this user's are nudged; those whose worker is gone (refused) are
    removed so the next enqueue does not try them again, and nothing else ever is.
    ``backend_pid`` is given only for a commit that also sent the INSERT trigger's
    NOTIFY (an enqueue on PostgreSQL): the worker then wakes once for the two of them.
    """
    folder = str(directory or hint_directory(using))
    try:
        paths = _listing(folder)
    except FileNotFoundError:  # no worker has ever listened here: nothing to do
        return 0
    except UnsafeFolderError as exc:
        _warn_once(folder, f"same-host wake-up hints are not sent: {exc}, {_SETTING_FIX}")
        return 0
    except OSError:
        return 0
    _warned.discard(folder)
    sent = 0
    sender = _sender.get()
    datagram = _datagram(backend_pid)
    for path in paths:
        try:
            sender.sendto(datagram, path)
            sent += 1
        except BlockingIOError:  # its buffer is full: it has been nudged already
            sent += 1
        except (ConnectionRefusedError, FileNotFoundError):
            _listings.pop(folder, None)
            _remove_own_socket(path, Path(folder))
        except OSError as exc:
            logger.debug("wake-up hint to %s failed: %s", path, exc)
    return sent


#: Folders whose refusal was logged already: an enqueue must not log it every time.
_warned: set[str] = set()


def _warn_once(folder: str, message: str) -> None:
    if folder not in _warned:
        _warned.add(folder)
        logger.warning(message)


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
    """Our sockets in ``folder``, read again only when the folder has changed.

    Binding or removing a socket changes the folder's modification time, so one
    ``lstat`` tells whether the last listing still holds (and that the folder is
    still ours and private); a listing read while the folder was still changing is
    not kept, and none is kept longer than a second. A new worker is therefore
    found by the first enqueue after it bound (at the latest a second later, where
    the file system keeps no such time). Each reading checks the folders above it
    too, and keeps only entries that are sockets owned by this user: never a
    symbolic link, never another user's socket.
    """
    info = os.lstat(folder)
    uid = os.geteuid()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != uid or info.st_mode & 0o077:
        _listings.pop(folder, None)
        check_private_folder(folder)  # raises with the reason
    changed = info.st_mtime_ns
    kept = _listings.get(folder)
    clock = time.monotonic_ns()
    if kept is not None and kept[0] == changed and clock - kept[1] < _LISTING_TTL_NS:
        return kept[2]
    _verify(_layout_of(folder), create=False)
    paths = []
    for entry in os.scandir(folder):
        if not entry.name.endswith(_SUFFIX):
            continue
        try:
            found = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISSOCK(found.st_mode) and found.st_uid == uid:
            paths.append(entry.path)
    if time.time_ns() - changed > _SETTLED_NS:
        _listings[folder] = (changed, clock, paths)
    else:
        _listings.pop(folder, None)
    return paths


class HintReceiver:
    """A worker's socket in the hint folder and the daemon thread that reads it."""

    def __init__(
        self, using: str, wake: Callable[[], None], pairs: WakePairs | None = None
    ) -> None:
        self._layout = _layout(using)
        self.directory = self._layout.folder
        self.wake = wake
        #: Shared with the worker's LISTEN thread: a hint whose NOTIFY came first is dropped.
        self.pairs = pairs
        self.path = self.directory / f"{os.getpid()}-{uuid.uuid4().hex[:8]}{_SUFFIX}"
        self._socket: socket.socket | None = None
        self._inode = 0
        self._thread = threading.Thread(target=self._run, name="arcature-hints", daemon=True)

    def start(self) -> bool:
        """Bind and start reading; False (and polling alone) if the folder is unusable.

        A folder that another user made, or could change, is never used: hints are
        then off, with a WARNING saying which folder and what to do about it.
        """
        size = len(os.fsencode(self.path))
        if size > SOCKET_PATH_MAX_BYTES:
            logger.warning(
                "same-host wake-up hints are off: the socket path %s is %d bytes, over the "
                "%d a Unix socket allows; set ARCATURE['WAKE_HINT_DIR'] to a shorter folder. "
                "Polling only.",
                self.path,
                size,
                SOCKET_PATH_MAX_BYTES,
            )
            return False
        try:
            _verify(self._layout, create=True)
        except UnsafeFolderError as exc:
            logger.warning(
                "same-host wake-up hints are off: %s, %s. Polling only.", exc, _SETTING_FIX
            )
            return False
        except OSError as exc:
            logger.info("same-host wake-up hints are off (%s); polling only", exc)
            return False
        receiver = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            receiver.bind(str(self.path))
            self._inode = os.lstat(self.path).st_ino
        except OSError as exc:
            receiver.close()
            logger.info("same-host wake-up hints are off (%s); polling only", exc)
            return False
        self._socket = receiver
        self._thread.start()
        return True

    def close(self) -> None:
        """Stop reading, wait for the thread to end, and remove our socket (only ours).

        Closing a socket does not wake a thread blocked in its ``recv()``; shutting it
        down does (on Linux), else a datagram to ourselves does. So a worker run
        many times in one process leaves no thread behind.
        """
        receiver, self._socket = self._socket, None
        if receiver is None:
            return
        try:
            receiver.shutdown(socket.SHUT_RDWR)
        except OSError:
            try:
                _sender.get().sendto(b"", str(self.path))
            except OSError:
                logger.debug("could not wake the hint thread", exc_info=True)
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        receiver.close()
        try:
            ours = os.lstat(self.path).st_ino == self._inode
        except OSError:
            return
        if ours:
            _remove_own_socket(str(self.path), self.directory)

    def _run(self) -> None:
        receiver = self._socket
        while receiver is not None:
            try:
                datagram = receiver.recv(_HINT_BYTES)
            except OSError:  # closed under us: the worker is stopping
                return
            if self._socket is None:  # woken by close()
                return
            pairs = self.pairs
            if pairs is None or pairs.first(HINT_CHANNEL, hint_pid(datagram)):
                self.wake()


def _remove_own_socket(path: str, folder: Path) -> None:
    """Unlink ``path`` only if it is a socket of this user in our verified ``folder``."""
    if not is_own_socket(path, folder):
        logger.debug("not removing %s: not a socket of this user in %s", path, folder)
        return
    try:
        os.unlink(path)
    except OSError:
        logger.debug("could not remove stale hint socket %s", path, exc_info=True)

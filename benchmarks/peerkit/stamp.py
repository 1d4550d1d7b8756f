"""The handler-side start stamp every contender's no-op job writes, and its reader.

Pickup latency and drain time are read from the same place for every queue: the
job's handler, as its first act, appends ``"<key> <CLOCK_REALTIME>"`` to a file
of its own process in ``PEERS_STAMP_DIR``. No queue's own bookkeeping (a
``started_at`` column, a log table) is used, so each is timed the same way. One
``write`` per job with ``O_APPEND``; without the variable the handler does nothing.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

_fd: int | None = None
_pid = 0


def stamp(key: object) -> None:
    """Record that the job ``key`` started in this process, now."""
    global _fd, _pid
    now = time.time()
    folder = os.environ.get("PEERS_STAMP_DIR")
    if not folder:
        return
    if _fd is None or _pid != os.getpid():  # a forked worker gets a file of its own
        _pid = os.getpid()
        _fd = os.open(
            os.path.join(folder, f"{_pid}.stamps"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600
        )
    os.write(_fd, f"{key} {now:.6f}\n".encode())


class StampReader:
    """Reads the stamp files incrementally: key -> (time, pid of the process that ran it)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.offsets: dict[Path, int] = {}
        self.partial: dict[Path, bytes] = {}
        self.seen: dict[int, tuple[float, int]] = {}

    def poll(self) -> dict[int, tuple[float, int]]:
        for path in self.folder.glob("*.stamps"):
            offset = self.offsets.get(path, 0)
            with open(path, "rb") as handle:
                handle.seek(offset)
                fresh = handle.read()
            self.offsets[path] = offset + len(fresh)
            lines = (self.partial.pop(path, b"") + fresh).split(b"\n")
            if lines[-1]:  # a line still being written: keep it for the next poll
                self.partial[path] = lines[-1]
            pid = int(path.stem)
            for line in lines[:-1]:
                key, _, moment = line.partition(b" ")
                self.seen[int(key)] = (float(moment), pid)
        return self.seen

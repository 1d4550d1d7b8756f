"""A liveness file the worker's main loop rewrites, and the probe that reads it.

Why a file: a process supervisor (a Kubernetes exec probe, a systemd timer, a
monitoring agent) needs to know whether the *main loop* still turns, since that
loop alone claims, heartbeats and writes outcomes. A thread that answers HTTP
could stay up while the loop is wedged; a probe that queries the database would
fail whenever the database is slow, and restart healthy workers for it. So the
loop itself rewrites a small JSON file (at most about once a second), and the
probe only reads that file: no database, no Django setup needed, a few
milliseconds.

What the probe concludes:

- the file is fresh and the worker says ``starting``, ``ok``, ``stopping`` or
  ``database unreachable``: alive (exit 0). A database outage does not fail
  liveness by default, because restarting workers does not bring a database
  back; ``require_database`` makes it fail (for a readiness-style check);
- the file is older than the allowed age: the loop is stuck, or the process died
  without a word (SIGKILL, OOM): not alive;
- the worker wrote ``stopped`` on its way out: not alive, with its exit status.
- the worker says ``write failing``: the same write of finished jobs keeps
  failing while other round trips work (a row the server refuses by dropping
  the connection); retrying looks like working, so this fails (exit 1) with
  the error the worker recorded.

Each write goes to a new file with a random name in the same folder (created
exclusively, never through a symbolic link) and is renamed over the old one, so a
reader sees either the previous record or the new one, never half of one, and a
link planted in a shared folder is replaced, not written through. The file is not
fsynced: it describes the present, not a durable fact.

This module imports nothing from Django or the package, so
``python -m django_arcature.worker.health PATH`` probes without loading a
project (``manage.py arcature_health`` does the same from inside one).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import socket
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_MIN_MAX_AGE",
    "HealthFile",
    "HealthFileError",
    "Verdict",
    "add_probe_arguments",
    "check",
    "main",
]

#: The record's layout version, so a newer probe can still read an older worker's file.
FORMAT = 1
#: Least time between two rewrites while nothing changes (a change of state is written at once).
WRITE_EVERY = 1.0
#: The probe's default age limit is this, or three of the worker's own refresh bounds if longer:
#: long enough that one slow database round trip does not get a healthy worker restarted.
DEFAULT_MIN_MAX_AGE = 30.0

STARTING = "starting"
OK = "ok"
DATABASE_UNREACHABLE = "database unreachable"
STOPPING = "stopping"
STOPPED = "stopped"
#: The same write of finished jobs keeps failing while other round trips work (a row
#: the server refuses by dropping the connection): not healthy, whatever the database.
WRITE_FAILING = "write failing"
#: States of a running worker; ``stopped`` is the only one written by a worker that has ended.
RUNNING_STATES = frozenset({STARTING, OK, DATABASE_UNREACHABLE, STOPPING, WRITE_FAILING})


class HealthFileError(ValueError):
    """The health file cannot be written (raised at startup, so a bad path fails at once)."""


def _iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).isoformat(timespec="milliseconds")


class HealthFile:
    """The writer side: owned by the worker's main thread, rewritten from its loop.

    ``refresh_within`` is the longest the loop may sleep between two passes (its
    poll, sweep and heartbeat intervals decide it); it is recorded so the probe
    can pick a sensible age limit by itself.
    """

    def __init__(self, path: str | os.PathLike[str], worker_id: str, refresh_within: float) -> None:
        self.path = Path(path)
        self.worker_id = worker_id
        self.host = socket.gethostname()
        self.refresh_within = max(refresh_within, WRITE_EVERY)
        self.started_at = time.time()
        self._state = ""
        self._next_write = 0.0
        self._failing = False
        try:
            self._write(STARTING, {})
        except OSError as exc:
            raise HealthFileError(
                f"cannot write the health file {self.path}: {exc.strerror or exc}"
            ) from exc

    def report(
        self, *, stopping: bool, database_failures: int, failing_write: str = "", **details: Any
    ) -> None:
        """The loop's state in one call: stopping, else whether its last round trip failed.

        ``failing_write`` (the loop's reason, once the same write has failed too often)
        turns the state to ``write failing``: retrying cannot be told from working.
        """
        if stopping:
            state = STOPPING
        elif failing_write:
            state = WRITE_FAILING
            details = {**details, "failing_write": failing_write}
        elif database_failures:
            state = DATABASE_UNREACHABLE
        else:
            state = OK
        self.beat(state, database_failures=database_failures, **details)

    def beat(self, state: str, **details: Any) -> None:
        """Record ``state`` now if it changed, else at most once every ``WRITE_EVERY`` seconds.

        Never raises: a full disk must not stop the jobs. A failed write is logged
        once (until one succeeds again); the file then goes stale, and the probe
        says so.
        """
        now = time.monotonic()
        if state == self._state and now < self._next_write:
            return
        try:
            self._write(state, details)
        except OSError as exc:
            if not self._failing:
                logger.warning("cannot write the health file %s: %s", self.path, exc)
            self._failing = True
            self._next_write = now + WRITE_EVERY
            return
        if self._failing:
            logger.warning("health file %s written again", self.path)
            self._failing = False

    def stopped(self, exit_status: int, **details: Any) -> None:
        """The last record: the worker has left its loop (the probe then fails at once)."""
        try:
            self._write(STOPPED, {**details, "exit_status": exit_status})
        except OSError as exc:
            logger.warning("cannot write the health file %s: %s", self.path, exc)

    def _write(self, state: str, details: dict[str, Any]) -> None:
        now = time.time()
        record = {
            "format": FORMAT,
            "state": state,
            "worker_id": self.worker_id,
            "pid": os.getpid(),
            "host": self.host,
            "written_at": now,
            "written": _iso(now),
            "started": _iso(self.started_at),
            "refresh_within": self.refresh_within,
            **details,
        }
        replace_file(self.path, json.dumps(record) + "\n")
        self._state = state
        self._next_write = time.monotonic() + WRITE_EVERY


#: The health file's mode: readable by a probe running as another user (it holds no secret).
FILE_MODE = 0o644


def replace_file(path: Path, text: str) -> None:
    """Put ``text`` at ``path`` in one rename, never writing through a planted link.

    The text goes to a new file with a random name in the same folder, created
    with ``O_CREAT | O_EXCL | O_NOFOLLOW`` (``tempfile.mkstemp``): an existing
    name, a symbolic link among them, is never opened, so another user who can
    write in a shared folder cannot make the worker overwrite a file of theirs
    choosing. The rename then replaces whatever entry ``path`` is, a link
    included, without following it. On failure the temporary file is removed.
    """
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            os.fchmod(out.fileno(), FILE_MODE)
            out.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@dataclass(frozen=True)
class Verdict:
    """What the probe found: ``healthy`` decides the exit status, ``reason`` is its one line."""

    healthy: bool
    reason: str


def _describe(record: dict[str, Any]) -> str:
    return f"worker {record.get('worker_id', '?')} (pid {record.get('pid', '?')})"


def check(
    path: str | os.PathLike[str],
    *,
    max_age: float | None = None,
    require_database: bool = False,
    now: float | None = None,
) -> Verdict:
    """Judge a health file without touching the database.

    ``max_age`` defaults to three times the worker's recorded refresh bound, and
    at least ``DEFAULT_MIN_MAX_AGE`` seconds.
    """
    path = Path(path)
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        return Verdict(False, f"no health file at {path}: the worker has not started (yet)")
    except (OSError, ValueError) as exc:
        return Verdict(False, f"cannot read the health file {path}: {exc}")
    if not isinstance(record, dict) or not isinstance(record.get("written_at"), int | float):
        return Verdict(False, f"{path} is not a worker health file")
    who = _describe(record)
    state = record.get("state")
    if state == STOPPED:
        return Verdict(
            False,
            f"{who} stopped at {record.get('written', '?')} "
            f"(exit status {record.get('exit_status', '?')})",
        )
    if state not in RUNNING_STATES:
        return Verdict(False, f"{who} reports an unknown state {state!r}")
    if max_age is None:
        refresh = record.get("refresh_within")
        bound = refresh if isinstance(refresh, int | float) else WRITE_EVERY
        max_age = max(DEFAULT_MIN_MAX_AGE, 3 * bound)
    age = (time.time() if now is None else now) - record["written_at"]
    if age > max_age:
        return Verdict(
            False,
            f"{who} last wrote its health file {age:.1f}s ago (max age {max_age:g}s, "
            f"state then: {state}): its main loop is stuck or the process is gone",
        )
    if state == WRITE_FAILING:
        return Verdict(
            False,
            f"{who} cannot write its finished jobs' outcomes "
            f"({record.get('failing_writes', '?')} failed tries of the same write): "
            f"{record.get('failing_write', '?')}",
        )
    if state == DATABASE_UNREACHABLE and require_database:
        return Verdict(
            False,
            f"{who} cannot reach its database "
            f"({record.get('database_failures', '?')} failed tries in a row)",
        )
    return Verdict(True, f"{who} {state}, written {max(age, 0.0):.1f}s ago")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m django_arcature.worker.health PATH``: the probe, without loading Django."""
    parser = argparse.ArgumentParser(
        prog="python -m django_arcature.worker.health",
        description="Exit 0 if the worker that writes PATH (arcature_worker --health-file) is "
        "alive, 1 with a one-line reason otherwise. Reads only that file.",
    )
    add_probe_arguments(parser, positional=True)
    args = parser.parse_args(argv)
    verdict = check(args.file, max_age=args.max_age, require_database=args.require_database)
    if verdict.healthy:
        print(verdict.reason)
        return 0
    print(f"unhealthy: {verdict.reason}", file=sys.stderr)
    return 1


def _max_age(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be above 0, not {text}")
    return value


def add_probe_arguments(parser: argparse.ArgumentParser, *, positional: bool = False) -> None:
    """The probe's options, shared by this module's ``main`` and ``manage.py arcature_health``."""
    help_file = "The file the worker writes (its --health-file)."
    if positional:
        parser.add_argument("file", metavar="PATH", help=help_file)
    else:
        parser.add_argument("--file", required=True, metavar="PATH", help=help_file)
    parser.add_argument(
        "--max-age",
        type=_max_age,
        metavar="SECONDS",
        help="Fail if the worker last wrote the file longer ago than this. Default: three "
        "times the longest idle pause the worker recorded in the file, at least "
        f"{DEFAULT_MIN_MAX_AGE:g}.",
    )
    parser.add_argument(
        "--require-database",
        action="store_true",
        help="Also fail while the worker reports its database unreachable (off by default: "
        "restarting a worker does not bring a database back).",
    )


if __name__ == "__main__":  # pragma: no cover - exercised through a subprocess
    raise SystemExit(main())

"""Start real ``manage.py arcature_worker`` processes against the pytest test database."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from django.db import connection

from tests.concurrency.local_users import require_root
from tests.dburl import database_url

REPO = Path(__file__).resolve().parents[2]


class WorkerProcess:
    """One worker subprocess; its stderr (the worker's log) goes to a file we can read.

    ``command`` replaces the whole command line, for a test that must run one
    exactly as written elsewhere (the deployment guide's recipes); by default it is
    this interpreter running ``arcature_worker -v 2`` with ``args``.
    """

    def __init__(self, args: list[str], events: Path, command: list[str] | None = None) -> None:
        self.log_path = Path(tempfile.mkstemp(prefix="arcature-worker-", suffix=".log")[1])
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.settings",
            "ARCATURE_USE_TEST_DATABASE": "1",
            "DATABASE_URL": database_url(),
            "PYTHONPATH": str(REPO),
            "ARCATURE_TEST_EVENTS": str(events),
        }
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(
                command or [sys.executable, "-m", "django", "arcature_worker", "-v", "2", *args],
                cwd=REPO,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    @property
    def log(self) -> str:
        return self.log_path.read_text()

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def wait(self, timeout: float = 60) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"worker did not exit within {timeout}s; its log:\n{self.log}")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.alive():
            self.proc.kill()
            self.proc.wait()
        self.log_path.unlink(missing_ok=True)


@pytest.fixture
def events(tmp_path: Path) -> Path:
    """The file worker processes append their observer events to."""
    return tmp_path / "events.txt"


@pytest.fixture
def start_worker(events: Path) -> Iterator[Callable[..., WorkerProcess]]:
    started: list[WorkerProcess] = []

    def start(*args: str, command: list[str] | None = None) -> WorkerProcess:
        # Commit what the test wrote before a second process looks for it.
        connection.close()
        worker = WorkerProcess(list(args), events, command)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()


def wait_until(
    condition: Callable[[], object], timeout: float = 30, what: str = "condition"
) -> None:
    """Poll ``condition`` (which reads the database) until it is true, or fail."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    pytest.fail(f"timed out after {timeout}s waiting for {what}")


def read_events(path: Path) -> list[tuple[str, str]]:
    if not path.exists():
        return []
    return [tuple(line.split(" ", 1)) for line in path.read_text().splitlines()]  # type: ignore[misc]


def wait_started(events: Path, job_id: object, timeout: float = 30) -> None:
    """Wait until a handler thread has begun the job, not merely claimed it.

    A claimed job a signal finds still waiting for its thread is released at
    once, as unstarted; tests about running jobs must wait for the thread.
    """
    wait_until(
        lambda: ("job_attempt_started", str(job_id)) in read_events(events),
        timeout=timeout,
        what=f"a handler thread to start job {job_id}",
    )


@pytest.fixture
def shared(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """A stand-in for /tmp (root's, mode 1777) that this process and its workers use as
    their temporary folder, so the default hint folder is looked for in it.

    (``tmp_path`` first: pytest must settle its own temporary folder before ours
    becomes the system's.)"""
    require_root()
    folder = Path(tempfile.mkdtemp(prefix="arc-x-", dir="/tmp"))
    folder.chmod(0o1777)
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    monkeypatch.setenv("TMPDIR", str(folder))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


__all__ = ["WorkerProcess", "read_events", "signal", "wait_started", "wait_until"]

"""Worker processes of the fault suite: ``python -m django arcature_worker``, optionally proxied."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.dburl import database_url

REPO = Path(__file__).resolve().parents[2]


class FaultWorker:
    """One worker subprocess on the test database, through the proxy on ``proxy_port`` if given."""

    def __init__(
        self,
        args: list[str],
        events: Path,
        *,
        proxy_port: int | None = None,
        raising: str = "",
    ) -> None:
        self.log_path = Path(tempfile.mkstemp(prefix="arcature-fault-worker-", suffix=".log")[1])
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.faults.worker_settings",
            "ARCATURE_USE_TEST_DATABASE": "1",
            "DATABASE_URL": database_url(),
            "PYTHONPATH": str(REPO),
            "ARCATURE_TEST_EVENTS": str(events),
            "ARCATURE_FAULT_RAISING_RECEIVERS": raising,
        }
        env.pop("ARCATURE_PROXY_PORT", None)
        if proxy_port is not None:
            env["ARCATURE_PROXY_PORT"] = str(proxy_port)
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "django", "arcature_worker", "-v", "2", *args],
                cwd=REPO,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait(self, timeout: float) -> int | None:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self) -> None:
        if self.alive():
            self.proc.kill()
            self.proc.wait()

    def cleanup(self) -> None:
        self.stop()
        self.log_path.unlink(missing_ok=True)


def event_counts(path: Path) -> Counter[tuple[str, str]]:
    """``(event name, job id)`` → how many times a worker process sent it."""
    if not path.exists():
        return Counter()
    return Counter(
        (name, job_id)
        for name, _, job_id in (line.partition(" ") for line in path.read_text().splitlines())
    )


@pytest.fixture
def fleet() -> Iterator[list[FaultWorker]]:
    """The worker processes a test starts (append them): each is killed and its log
    removed afterwards, whatever the test did."""
    workers: list[FaultWorker] = []
    yield workers
    for worker in workers:
        worker.cleanup()

"""The chaos suites' worker fleet: every process started is killed and its log removed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.faults.processes import FaultWorker


@pytest.fixture
def fleet() -> Iterator[list[FaultWorker]]:
    workers: list[FaultWorker] = []
    yield workers
    for worker in workers:
        worker.cleanup()

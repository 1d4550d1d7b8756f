"""What both chaos suites do to their worker fleet: inject one fault, and stop the fleet.

``test_chaos_soak.py`` (plain jobs) and ``test_chaos_workflows.py`` (workflows and
batches) run the same kind of fleet, ``arcature_worker`` processes SIGKILLed at
random and their sessions killed on the server; only what they enqueue and what
they check at the end differ.
"""

from __future__ import annotations

import random
import signal
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from django.db import connection

from django_arcature.models import Job
from tests.faults.processes import FaultWorker
from tests.faults.sessions import kill_worker_sessions


@dataclass
class Faults:
    """What a chaos run has injected so far (the bounds on re-runs come from these)."""

    sigkills: int = 0
    session_kills: int = 0
    kill_rounds: int = 0

    @property
    def injected(self) -> int:
        return self.sigkills + self.kill_rounds


def inject_fault(
    chance: random.Random,
    fleet: list[FaultWorker],
    start: Callable[[], None],
    faults: Faults,
    *,
    session_chance: float,
    only_started: bool = False,
) -> None:
    """One fault: kill the workers' sessions (with ``session_chance``, not on SQLite),
    else SIGKILL a live worker and start a replacement.

    ``only_started``: pick the victim among workers that logged ``started``: one
    still starting up holds nothing, so its death tests nothing a run must show.
    """
    live = [
        worker
        for worker in fleet
        if worker.alive() and (not only_started or "started" in worker.log)
    ]
    if connection.vendor != "sqlite" and chance.random() < session_chance:
        faults.session_kills += kill_worker_sessions()
        faults.kill_rounds += 1
        connection.close()
    elif live:
        victim = chance.choice(live)
        victim.proc.send_signal(signal.SIGKILL)
        victim.proc.wait()
        faults.sigkills += 1
        start()


@dataclass(frozen=True)
class Chaos:
    """How a run injects faults: the pause between two, drawn uniformly (seconds), the
    chance that a fault kills sessions rather than a process, whether only started
    workers are SIGKILLed, and how many faults at most (None: until the end)."""

    pause: tuple[float, float]
    session_chance: float
    timeout: float
    only_started: bool = False
    max_faults: int | None = None


def run_under_faults(
    chance: random.Random,
    fleet: list[FaultWorker],
    events: Path,
    worker_args: list[str],
    workers: int,
    chaos: Chaos,
    unfinished: Callable[[], int],
    seed: int,
) -> Faults:
    """Start ``workers`` workers, inject faults until ``unfinished()`` is 0, stop the fleet.

    Fails when the work is not done within ``chaos.timeout``, naming the seed and the
    jobs' statuses. Returns what was injected, for the caller's bounds on re-runs.
    """
    connection.close()  # what the test enqueued is committed; the workers see it

    def start() -> None:
        fleet.append(FaultWorker(worker_args, events))

    for _ in range(workers):
        start()
    faults = Faults()
    deadline = time.monotonic() + chaos.timeout
    while True:
        left = unfinished()
        connection.close()
        if not left:
            break
        assert time.monotonic() < deadline, (
            f"seed {seed}: {left} job(s) not done after {chaos.timeout}s: "
            f"{Counter(Job.objects.values_list('status', flat=True))}"
        )
        time.sleep(chance.uniform(*chaos.pause))
        if chaos.max_faults is not None and faults.injected >= chaos.max_faults:
            continue
        inject_fault(
            chance,
            fleet,
            start,
            faults,
            session_chance=chaos.session_chance,
            only_started=chaos.only_started,
        )
    stop_fleet(fleet)
    return faults


def stop_fleet(fleet: list[FaultWorker]) -> None:
    """SIGTERM every live worker and require a clean exit (0) within 30 s.

    A replacement started just now installs its SIGTERM handler as it starts: it
    is given up to 30 s to log ``started`` first, or the signal would kill it.
    """
    for worker in fleet:
        started_by = time.monotonic() + 30
        while worker.alive() and "started" not in worker.log and time.monotonic() < started_by:
            time.sleep(0.05)
        if worker.alive():
            worker.proc.send_signal(signal.SIGTERM)
    for worker in fleet:
        if worker.proc.poll() is None:
            assert worker.wait(30) == 0, worker.log[-3000:]

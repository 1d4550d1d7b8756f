"""``arcature_worker`` with every claim timed, for ``benchmarks/fleet.py``.

The same management command and worker loop as ``python -m django arcature_worker``;
the only addition is a wrapper around the worker's claim call that records, per
claim, when it returned, how long the round trip took (as the worker saw it, so
including any network latency), how many jobs it asked for and how many it got,
and the moments the worker read the queues' pause flags. PostgreSQL here has no
``pg_stat_statements``, so this is where claim latency and empty or short claims
can be counted. The records are written as JSON to the file named by
``ARCATURE_FLEET_STATS`` when the worker exits.

``ARCATURE_FLEET_REREAD_PAUSES=1`` restores the behaviour before the wake-up change
(every job notification made the worker re-read the pause flags before claiming),
so that ``fleet.py --wake-ab`` can compare both in one run.

    python -m benchmarks.fleet_worker --queue default -v 1
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchmarks.fleet_settings")
    import django

    django.setup()
    from django.core.management import execute_from_command_line

    from django_arcature.queues import gate
    from django_arcature.queues.gate import QueueGate
    from django_arcature.worker.loop import Worker

    records: list[tuple[float, float, int, int]] = []
    flag_reads: list[float] = []
    original = QueueGate.claim
    read_flags = gate.paused_queues  # type: ignore[attr-defined]

    def counted_read(using: str) -> set[str]:
        flag_reads.append(time.time())
        return read_flags(using)

    gate.paused_queues = counted_read  # type: ignore[attr-defined]
    if os.environ.get("ARCATURE_FLEET_REREAD_PAUSES") == "1":
        take = Worker._take

        def old_take(self: Worker, item: object) -> None:
            take(self, "notify" if item == "enqueued" else item)

        Worker._take = old_take  # type: ignore[method-assign]

    def timed_claim(self: QueueGate, manager: Any, worker_id: str, lease: Any, want: int) -> Any:
        started = time.perf_counter()
        jobs = original(self, manager, worker_id, lease, want)
        records.append((time.time(), time.perf_counter() - started, want, len(jobs)))
        return jobs

    QueueGate.claim = timed_claim  # type: ignore[method-assign]
    try:
        execute_from_command_line([sys.argv[0], "arcature_worker", *sys.argv[1:]])
    finally:
        path = os.environ.get("ARCATURE_FLEET_STATS")
        if path:
            with open(path, "w") as out:
                json.dump({"claims": records, "flag_reads": flag_reads}, out)


if __name__ == "__main__":
    main()

"""Reading the handlers' own records back (tests/testapp/limits_jobs.py) as run intervals."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Run:
    job_id: str
    attempt: int
    pid: int
    start: float
    end: float | None


def runs(path: Path, ended: dict[int, float] | None = None) -> list[Run]:
    """Every handler run recorded in ``path``.

    A run without an end line ended with its process (SIGKILL, or an abandoned
    thread at exit): ``ended`` gives when the test saw that process gone (later
    than it really ended, so an overlap is overestimated, never hidden); a run
    of a process still alive is taken as running now.
    """
    found: dict[tuple[str, int, int], Run] = {}
    if not path.exists():
        return []
    for line in path.read_text().splitlines():
        event, job_id, attempt, pid, at = line.split()
        key = (job_id, int(attempt), int(pid))
        if event == "start":
            found[key] = Run(job_id, int(attempt), int(pid), float(at), None)
        else:
            found[key].end = float(at)
    now = time.monotonic()
    for run in found.values():
        if run.end is None:
            run.end = (ended or {}).get(run.pid, now)
    return sorted(found.values(), key=lambda run: run.start)


def max_overlap(found: list[Run]) -> int:
    """The most handlers running at one instant (an end before a start at the same instant)."""
    events = sorted([(run.start, 1) for run in found] + [(run.end or 0.0, -1) for run in found])
    current = peak = 0
    for _, delta in events:
        current += delta
        peak = max(peak, current)
    return peak


def busiest_window(found: list[Run], seconds: float) -> int:
    """The most handler starts within any window of ``seconds`` (sliding, from each start)."""
    starts = sorted(run.start for run in found)
    return max(
        (sum(1 for t in starts[i:] if t < s + seconds) for i, s in enumerate(starts)), default=0
    )

"""Handlers for the workflow and batch tests (registered with ``tests.testapp.jobs``)."""

from __future__ import annotations

from typing import Any

from django_arcature import Permanent, Snooze, current_job, job


@job(name="wf.step", max_attempts=1)
def step(label: str) -> str:
    return label


@job(name="wf.boom", max_attempts=1)
def boom(label: str) -> None:
    raise Permanent(f"{label} failed")


@job(name="wf.gather", max_attempts=1)
def gather(label: str) -> dict[str, Any]:
    context = current_job()
    assert context is not None
    return {"label": label, "upstream": context.upstream()}


@job(name="wf.snooze_once", max_attempts=1)
def snooze_once(path: str) -> str:
    """Snoozes (0 s) the first time: a marker file says it has."""
    import os

    if not os.path.exists(path):
        with open(path, "w") as marker:
            marker.write("snoozed")
        raise Snooze(0)
    return "woke"


@job(name="wf.always_snooze", max_attempts=2)
def always_snooze() -> None:
    raise Snooze(0)


@job(name="wf.report_progress", max_attempts=1)
def report_progress() -> list[bool]:
    context = current_job()
    assert context is not None
    return [context.progress(0.1 * i, f"step {i}") for i in range(1, 6)] + [
        context.progress(1.0, "done")
    ]


@job(name="wf.batch_done")
def batch_done(batch_id: str) -> str:
    return batch_id


@job(name="wf.record", max_attempts=3)
def record(path: str, label: str, seconds: float = 0.0) -> str:
    """Append ``label`` to ``path`` (one line per run), after ``seconds``."""
    import time

    if seconds:
        time.sleep(seconds)
    with open(path, "a") as runs:
        runs.write(label + "\n")
    return label


@job(name="wf.async_until_cancelled", max_attempts=1)
async def async_until_cancelled(path: str, seconds: float) -> str:
    """Sleeps ``seconds``; writes ``path`` if its task is cancelled (CancelledError) meanwhile."""
    import asyncio
    from pathlib import Path

    try:
        await asyncio.sleep(seconds)
    except asyncio.CancelledError:
        Path(path).write_text("cancelled")
        raise
    return "slept"


@job(name="wf.batch_record", max_attempts=50)
def batch_record(batch_id: str) -> str:
    """A batch callback that appends ``callback <batch id>`` to ``ARCATURE_WF_RUNS`` per run."""
    import os

    path = os.environ.get("ARCATURE_WF_RUNS")
    if path:
        with open(path, "a") as runs:
            runs.write(f"callback {batch_id}\n")
    return batch_id

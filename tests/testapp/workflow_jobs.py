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


#: What the order handlers ran, in order, in this process (eager tests run inline).
ORDER_RUNS: list[str] = []


@job(name="wf.charge_card", max_attempts=1)
def charge_card(order: int, amount_cents: int = 100) -> str:
    ORDER_RUNS.append(f"charge {order}")
    if amount_cents <= 0:
        raise Permanent(f"order {order}: nothing to charge")
    return f"charged {order}"


@job(name="wf.pick_item", max_attempts=1)
def pick_item(item: int) -> str:
    ORDER_RUNS.append(f"pick {item}")
    return f"picked {item}"


@job(name="wf.ship_order", max_attempts=1)
def ship_order(order: int) -> list[str]:
    ORDER_RUNS.append(f"ship {order}")
    context = current_job()
    assert context is not None
    return sorted(str(value) for value in context.upstream().values())


@job(name="wf.email_receipt", max_attempts=1)
def email_receipt(order: int) -> str:
    ORDER_RUNS.append(f"email {order}")
    return f"emailed {order}"


@job(name="wf.refund", max_attempts=1)
def refund(order: int) -> str:
    ORDER_RUNS.append(f"refund {order}")
    return f"refunded {order}"


@job(name="wf.batch_note", max_attempts=1)
def batch_note(batch_id: str) -> str:
    """A batch callback that notes its run in ``ORDER_RUNS``."""
    ORDER_RUNS.append(f"callback {batch_id}")
    return batch_id


@job(name="wf.nested_flow", max_attempts=1)
def nested_flow(label: str) -> str:
    """Enqueues a two-node workflow of its own; returns its id."""
    from django_arcature import Workflow

    inner = Workflow(f"inner {label}")
    first = inner.add(step, f"{label} 1")
    inner.add(step, f"{label} 2", after=[first])
    inner.enqueue()
    return str(inner.id)


@job(name="wf.count_rows", max_attempts=1)
def count_rows(rows: int) -> int:
    """Takes a number, so it cannot be a batch callback (which gets the batch's id)."""
    return rows


@job(name="wf.async_gather", max_attempts=1)
async def async_gather(label: str) -> dict[str, Any]:
    """An ``async def`` node: reads its upstream and reports progress the async way."""
    context = current_job()
    assert context is not None
    written = await context.aprogress(1.0, f"{label} done")
    return {"label": label, "upstream": await context.aupstream(), "written": written}


@job(name="wf.async_sync_calls", max_attempts=1)
async def async_sync_calls(label: str) -> None:
    """An ``async def`` node calling the sync ``upstream()``: refused with the fix."""
    context = current_job()
    assert context is not None
    context.upstream()

"""Retention and workflows: pruned jobs take their node and edge rows with them, finished
workflows and batches go once empty, and a live workflow keeps every row it needs.

Jobs finish through the real manager (claim, fenced completion, requeue); only their
``finished_at`` is moved into the past, as the retention tests do.
"""

from __future__ import annotations

import threading
import time
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.db import connections, transaction

from django_arcature import Batch, Workflow
from django_arcature.db import DatabaseNow
from django_arcature.models import Job
from django_arcature.retention.prune import prune
from django_arcature.retention.rules import PruneRule
from django_arcature.transitions import ClaimTransition
from django_arcature.workflows.models import (
    BatchCounter,
    BatchRun,
    WorkflowCounter,
    WorkflowEdge,
    WorkflowNode,
    WorkflowRun,
)
from django_arcature.workflows.results import upstream_results
from tests.testapp import workflow_jobs as wf

from .test_workflows import claim, diamond, die, succeed

pytestmark = pytest.mark.django_db(transaction=True)

RULES = [PruneRule(status, timedelta(days=7)) for status in ("succeeded", "cancelled", "dead")]
SUCCEEDED_ONLY = [PruneRule("succeeded", timedelta(days=7))]


def age(*job_ids: uuid.UUID) -> None:
    Job.objects.filter(id__in=job_ids).update(finished_at=DatabaseNow(-10 * 86400))


def age_all() -> None:
    Job.objects.exclude(finished_at=None).update(finished_at=DatabaseNow(-10 * 86400))


def wid(flow: Workflow) -> uuid.UUID:
    assert flow.id is not None
    return flow.id


def bid(batch: Batch) -> uuid.UUID:
    assert batch.id is not None
    return batch.id


def outcome(flow: Workflow) -> str:
    return str(WorkflowRun.objects.get(id=wid(flow)).outcome)


def rows(workflow_id: uuid.UUID) -> dict[str, int]:
    return {
        "runs": WorkflowRun.objects.filter(id=workflow_id).count(),
        "nodes": WorkflowNode.objects.filter(workflow_id=workflow_id).count(),
        "edges": WorkflowEdge.objects.filter(workflow_id=workflow_id).count(),
        "counters": WorkflowCounter.objects.filter(workflow_id=workflow_id).count(),
    }


def test_a_finished_workflow_and_batch_are_pruned_with_their_jobs() -> None:
    flow, nodes = diamond()
    for node in nodes:
        succeed(node.job_id)
    batch = Batch(on_finish=wf.batch_done)
    members = [batch.add(wf.step, str(i)) for i in range(3)]
    batch.enqueue()
    for job_id in members:
        succeed(job_id)
    kept = diamond()[0]  # a live one beside it, untouched
    age_all()
    prune(RULES, "default", batch=2)
    assert rows(wid(flow)) == {"runs": 0, "nodes": 0, "edges": 0, "counters": 0}
    assert not Job.objects.filter(id__in=[n.job_id for n in nodes] + members).exists()
    assert not BatchRun.objects.filter(id=bid(batch)).exists()
    assert not BatchCounter.objects.filter(batch_id=bid(batch)).exists()
    assert rows(wid(kept)) == {"runs": 1, "nodes": 4, "edges": 4, "counters": 4}


def _sweep() -> int:
    return sum(result.deleted for result in prune(RULES, "default"))


def _manager_prune() -> int:
    return Job.objects.prune(
        older_than=timedelta(days=7), statuses=["succeeded", "cancelled", "dead"]
    )


@pytest.mark.parametrize("pruner", [_sweep, _manager_prune], ids=["sweep", "Job.objects.prune"])
def test_a_live_workflow_keeps_its_finished_nodes_until_it_finishes(pruner: Any) -> None:
    """Both ways to prune: ``Job.objects.prune()`` (the documented call for a cron of
    one's own) deleted a live workflow's finished nodes and left their node and edge
    rows behind, so the dependent's ``upstream()`` lost its results."""
    flow, (a, b, c, d) = diamond()
    succeed(a.job_id)
    succeed(b.job_id)
    age(a.job_id, b.job_id)
    plain = Job.objects.enqueue("tests.noop")
    plain_token = claim(plain.pk)
    assert Job.objects.mark_succeeded(plain.pk, plain_token, None) is ClaimTransition.UPDATED
    age(plain.pk)
    assert pruner() == 1  # the plain job only
    assert rows(wid(flow)) == {"runs": 1, "nodes": 4, "edges": 4, "counters": 4}
    succeed(c.job_id)
    token = claim(d.job_id)
    # d's upstream results are all still there for it to read.
    assert set(upstream_results(d.job_id)) == {b.name, c.name}
    assert Job.objects.mark_succeeded(d.job_id, token, None) is ClaimTransition.UPDATED
    age_all()
    assert pruner() == 4
    assert rows(wid(flow)) == {"runs": 0, "nodes": 0, "edges": 0, "counters": 0}


def test_a_partly_pruned_workflow_resumes_and_finishes_again() -> None:
    """Succeeded nodes kept 7 days, dead ones forever: the dead node outlives the rest."""
    flow = Workflow("partly pruned")
    first = flow.add(wf.step, "first")
    charge = flow.add(wf.step, "charge", after=[first])
    ship = flow.add(wf.step, "ship", after=[charge])
    refund = flow.add(wf.step, "refund", after=[charge], when="failed")
    flow.enqueue()
    succeed(first.job_id)
    die(charge.job_id)  # ship cancelled, refund released
    succeed(refund.job_id)
    assert outcome(flow) == "failed"
    age_all()
    prune([*SUCCEEDED_ONLY, PruneRule("cancelled", timedelta(days=7))], "default")
    # first, refund and ship are gone with their edges; charge stays, and so does the run.
    assert set(WorkflowNode.objects.values_list("job_id", flat=True)) == {charge.job_id}
    assert rows(wid(flow)) == {"runs": 1, "nodes": 1, "edges": 0, "counters": 4}
    assert Job.objects.requeue_dead(charge.job_id) == 1
    assert outcome(flow) == ""
    assert Job.objects.get(id=charge.job_id).status == "pending"
    assert not Job.objects.filter(id=ship.job_id).exists()  # pruned: it cannot come back
    token = claim(charge.job_id)
    assert upstream_results(charge.job_id) == {}  # its upstream was pruned: nothing to pass
    assert Job.objects.mark_succeeded(charge.job_id, token, None) is ClaimTransition.UPDATED
    assert outcome(flow) == "succeeded"
    age_all()
    prune(RULES, "default")
    assert rows(wid(flow)) == {"runs": 0, "nodes": 0, "edges": 0, "counters": 0}


def test_an_open_batch_keeps_its_row_when_its_members_are_pruned() -> None:
    batch = Batch(on_finish=wf.batch_done)
    first = batch.add(wf.step, "1")
    batch.enqueue(close=False)
    succeed(first)
    age(first)
    prune(RULES, "default")
    assert not WorkflowNode.objects.filter(batch_id=bid(batch)).exists()
    again = Batch.open(bid(batch))  # still open: more members later
    second = again.add(wf.step, "2")
    again.enqueue()
    succeed(second)
    assert batch.counts() == {"total": 2, "succeeded": 2, "dead": 0, "cancelled": 0, "pending": 0}
    assert Job.objects.filter(task_name="wf.batch_done").count() == 1


needs_two_writers = pytest.mark.only_on(
    "postgresql", "mysql", reason="SQLite runs one writer at a time"
)


def in_thread(target: object) -> tuple[threading.Thread, list[BaseException]]:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            target()  # type: ignore[operator]
        except BaseException as exc:  # pragma: no cover - reported by the test
            errors.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, errors


@needs_two_writers
def test_a_prune_racing_a_completion_that_releases_a_dependent() -> None:
    """The last sibling's completion holds its transaction open (dependent released,
    not committed) while a prune runs: the prune neither waits for it nor deletes the
    finished siblings of the live workflow, and the dependent runs."""
    flow = Workflow("race")
    ups = [flow.add(wf.step, str(i)) for i in range(4)]
    sink = flow.add(wf.step, "sink", after=ups)
    flow.enqueue()
    for node in ups[:3]:
        succeed(node.job_id)
    age(*(n.job_id for n in ups[:3]))
    last = ups[3].job_id
    token = claim(last)
    released = threading.Event()
    pruned = threading.Event()

    def complete() -> None:
        with transaction.atomic():
            assert Job.objects.mark_succeeded(last, token, None) is ClaimTransition.UPDATED
            released.set()
            assert pruned.wait(30)

    thread, errors = in_thread(complete)
    assert released.wait(30)
    started = time.monotonic()
    results = prune(RULES, "default")
    pruned.set()
    thread.join(30)
    assert not errors, errors
    assert time.monotonic() - started < 25  # it did not wait for the completion
    assert sum(r.deleted for r in results) == 0
    assert rows(wid(flow)) == {"runs": 1, "nodes": 5, "edges": 4, "counters": 5}
    assert Job.objects.get(id=sink.job_id).status == "pending"
    assert set(upstream_results(sink.job_id)) == {n.name for n in ups}
    succeed(sink.job_id)
    age_all()
    prune(RULES, "default")
    assert rows(wid(flow)) == {"runs": 0, "nodes": 0, "edges": 0, "counters": 0}


def hold_prune(go: threading.Event, done: threading.Event) -> None:
    """Prune old cancelled jobs in a transaction kept open until ``done``."""
    with transaction.atomic():
        prune([PruneRule("cancelled", timedelta(days=7))], "default")
        go.set()
        assert done.wait(30)


@needs_two_writers
@pytest.mark.parametrize("order", ["prune first", "requeue first"])
def test_a_prune_racing_a_requeue_that_resumes_a_finished_workflow(order: str) -> None:
    """The requeue brings back the nodes the death cancelled; the prune deletes them
    first (or not): either way the counts stay right and the workflow finishes."""
    flow = Workflow(f"resume {order}")
    root = flow.add(wf.step.using(max_attempts=1), "root")
    kids = [flow.add(wf.step, str(i), after=[root]).job_id for i in range(3)]
    flow.enqueue()
    die(root.job_id)  # the kids are cancelled
    assert outcome(flow) == "failed"
    age(*kids)
    go, done = threading.Event(), threading.Event()
    if order == "prune first":
        pruning, errors = in_thread(lambda: hold_prune(go, done))
        assert go.wait(30)
        requeue, requeue_errors = in_thread(lambda: Job.objects.requeue_dead(root.job_id))
        time.sleep(0.5)  # the requeue waits on the rows the prune deleted
        done.set()
        pruning.join(30)
        requeue.join(30)
        assert not requeue_errors, requeue_errors
        assert not Job.objects.filter(id__in=kids).exists()
    else:
        assert Job.objects.requeue_dead(root.job_id) == 1
        pruning, errors = in_thread(lambda: hold_prune(go, done))
        assert go.wait(30)
        done.set()
        pruning.join(30)
        assert Job.objects.filter(id__in=kids, status="waiting").count() == 3
    assert not errors, errors
    assert outcome(flow) == ""
    succeed(root.job_id)
    for kid in Job.objects.filter(id__in=kids, status="pending"):
        succeed(kid.pk)
    assert outcome(flow) == "succeeded"


def test_the_manager_prune_refuses_what_is_not_finished() -> None:
    for status in ("pending", "running", "waiting"):
        with pytest.raises(ValueError, match="finished jobs only"):
            Job.objects.prune(older_than=timedelta(days=1), statuses=[status])

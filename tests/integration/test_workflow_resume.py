"""A resume of very many dead nodes runs in bounded transactions (chunks), and a crash
between two of them leaves a consistent workflow that a second resume completes."""

from __future__ import annotations

import uuid

import pytest
from django.db.models import Sum

from django_arcature import Batch, Workflow
from django_arcature.manager.operations import OperatorWrites
from django_arcature.models import Job, JobStatus
from django_arcature.testing import drain
from django_arcature.transitions import ClaimTransition
from django_arcature.workflows.build import Node
from django_arcature.workflows.models import Outcome, WorkflowCounter, WorkflowNode, WorkflowRun
from tests.testapp import workflow_jobs as wf

from .conftest import fresh

pytestmark = pytest.mark.django_db(transaction=True)

ROOTS = 7


def die(job_id: uuid.UUID) -> None:
    claimed = Job.objects.claim_job(job_id, "w", 60)
    assert claimed is not None
    assert (
        Job.objects.mark_dead(job_id, claimed.claim_token, "permanent", "boom")
        is ClaimTransition.UPDATED
    )


def broken_workflow() -> tuple[Workflow, list[Node], list[Node], Node]:
    """ROOTS roots, each with a child, all gathered by one fan-in; every root dead."""
    flow = Workflow("wide")
    roots = [flow.add(wf.step, f"root {i}") for i in range(ROOTS)]
    children = [flow.add(wf.step, f"child {i}", after=[root]) for i, root in enumerate(roots)]
    gather = flow.add(wf.step, "gather", after=children)
    flow.enqueue()
    for root in roots:
        die(root.job_id)
    assert {fresh(n.job_id).status for n in [*children, gather]} == {JobStatus.CANCELLED}
    return flow, roots, children, gather


def assert_counters_match_the_nodes(flow: Workflow) -> None:
    """The workflow's shard counters say what its nodes' rows say (nothing lost or doubled)."""
    nodes = Job.objects.filter(
        id__in=WorkflowNode.objects.filter(workflow_id=flow.id).values("job_id")
    )
    finished = nodes.filter(status__in=["succeeded", "dead", "cancelled"]).count()
    sums = WorkflowCounter.objects.filter(workflow_id=flow.id).aggregate(
        finished=Sum("finished"), dead=Sum("dead")
    )
    assert (sums["finished"], sums["dead"]) == (finished, nodes.filter(status="dead").count())


def test_a_chunked_resume_requeues_every_dead_node_once() -> None:
    flow, roots, children, gather = broken_workflow()
    assert flow.id is not None
    requeued: list[uuid.UUID] = []
    from django_arcature import signals

    def heard(sender: object, job_id: uuid.UUID, **_: object) -> None:
        requeued.append(job_id)

    signals.job_requeued.connect(heard)
    try:
        result = Job.objects.resume_workflow(flow.id, chunk_size=3)
    finally:
        signals.job_requeued.disconnect(heard)
    assert (result.requeued, result.refused, result.cancelled) == (ROOTS, 0, False)
    assert sorted(requeued) == sorted(root.job_id for root in roots)  # each once
    assert {fresh(r.job_id).status for r in roots} == {JobStatus.PENDING}
    assert {fresh(n.job_id).status for n in [*children, gather]} == {JobStatus.WAITING}
    assert_counters_match_the_nodes(flow)
    assert Job.objects.resume_workflow(flow.id, chunk_size=3).requeued == 0
    assert drain().succeeded == 2 * ROOTS + 1
    assert WorkflowRun.objects.get(id=flow.id).outcome == Outcome.SUCCEEDED


def test_a_crash_between_chunks_leaves_a_consistent_workflow_a_second_resume_completes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    flow, roots, children, gather = broken_workflow()
    assert flow.id is not None
    real = OperatorWrites._requeue_dead_here
    calls = {"n": 0}

    def crash_on_the_fourth(self: OperatorWrites, job_id: uuid.UUID) -> int:
        calls["n"] += 1
        if calls["n"] == 4:  # the first node of the second chunk: the process dies here
            raise RuntimeError("crash")
        return real(self, job_id)

    monkeypatch.setattr(OperatorWrites, "_requeue_dead_here", crash_on_the_fourth)
    with pytest.raises(RuntimeError, match="crash"):
        Job.objects.resume_workflow(flow.id, chunk_size=3)
    monkeypatch.undo()
    # The first chunk (3 roots, in the database's id order) committed whole, the
    # second not at all; each root's child followed its root.
    states = [
        (fresh(r.job_id).status, fresh(c.job_id).status)
        for r, c in zip(roots, children, strict=True)
    ]
    assert (
        sorted(states)
        == [(JobStatus.DEAD, JobStatus.CANCELLED)] * 4
        + [(JobStatus.PENDING, JobStatus.WAITING)] * 3
    )
    gathered = fresh(gather.job_id)
    assert gathered.status == JobStatus.CANCELLED  # still ruled out by a dead branch
    assert_counters_match_the_nodes(flow)
    assert WorkflowRun.objects.get(id=flow.id).outcome == ""  # in progress again
    # A second resume requeues the rest, and the workflow runs to its end.
    assert Job.objects.resume_workflow(flow.id, chunk_size=3).requeued == 4
    assert fresh(gather.job_id).status == JobStatus.WAITING
    assert_counters_match_the_nodes(flow)
    assert drain().succeeded == 2 * ROOTS + 1
    assert WorkflowRun.objects.get(id=flow.id).outcome == Outcome.SUCCEEDED


def test_a_cancel_between_chunks_stops_the_resume(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each chunk re-reads the workflow under its lock: cancelled meanwhile, it stops."""
    flow, roots, _, _ = broken_workflow()
    assert flow.id is not None
    real = OperatorWrites._requeue_dead_here
    calls = {"n": 0}

    def cancel_after_the_first_chunk(self: OperatorWrites, job_id: uuid.UUID) -> int:
        calls["n"] += 1
        rows = real(self, job_id)
        if calls["n"] == 3:  # the chunk's last node; the cancel lands once it commits
            from django.db import transaction

            transaction.on_commit(lambda: flow.cancel())
        return rows

    monkeypatch.setattr(OperatorWrites, "_requeue_dead_here", cancel_after_the_first_chunk)
    result = Job.objects.resume_workflow(flow.id, chunk_size=3)
    assert (result.requeued, result.cancelled) == (3, True)
    assert {fresh(r.job_id).status for r in roots} == {JobStatus.DEAD, JobStatus.CANCELLED}
    assert calls["n"] == 3


def test_a_batch_resumes_in_chunks() -> None:
    batch = Batch(on_finish=wf.batch_done)
    members = [batch.add(wf.step, f"row {i}") for i in range(5)]
    batch.enqueue()
    for member in members:
        die(member)
    assert batch.id is not None
    assert Job.objects.resume_batch(batch.id, chunk_size=2).requeued == 5
    assert batch.counts() == {"total": 5, "succeeded": 0, "dead": 0, "cancelled": 0, "pending": 5}


@pytest.mark.parametrize("size", [0, -1, 1.5, True])
def test_chunk_size_is_a_positive_int(size: object) -> None:
    with pytest.raises(ValueError, match="chunk_size"):
        Job.objects.resume_workflow(uuid.uuid4(), chunk_size=size)  # type: ignore[arg-type]

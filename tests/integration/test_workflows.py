"""Workflows: nodes wait invisibly, and are released or cancelled in their upstream's transaction.

Every step goes through the real manager on the real database (claim, fenced
completion, sweep, cancel, requeue); nothing here writes a job row itself.
"""

from __future__ import annotations

import time
import uuid

import pytest
from django.db import transaction

from django_arcature import Workflow, WorkflowError
from django_arcature.manager import dependencies
from django_arcature.models import Job, JobStatus
from django_arcature.testing import drain
from django_arcature.transitions import ClaimTransition, Completion
from django_arcature.workflows.build import Node
from django_arcature.workflows.models import EdgeState, WorkflowEdge, WorkflowNode, WorkflowRun
from tests.testapp import workflow_jobs as wf

from .conftest import fresh

pytestmark = pytest.mark.django_db(transaction=True)


def status(node: Node) -> str:
    return fresh(node.job_id).status


def claim(job_id: uuid.UUID, worker: str = "w1", lease: float = 60) -> uuid.UUID:
    """Claim exactly this job (it must be pending); its claim token."""
    claimed = Job.objects.claim_job(job_id, worker, lease)
    assert claimed is not None, f"{job_id} was not claimable ({fresh(job_id).status})"
    return claimed.claim_token


def succeed(job_id: uuid.UUID, result: object = None) -> None:
    token = claim(job_id)
    assert Job.objects.mark_succeeded(job_id, token, result) is ClaimTransition.UPDATED


def die(job_id: uuid.UUID) -> None:
    token = claim(job_id)
    assert Job.objects.mark_dead(job_id, token, "permanent", "boom") is ClaimTransition.UPDATED


def diamond() -> tuple[Workflow, list[Node]]:
    flow = Workflow("diamond")
    a = flow.add(wf.step, "a")
    b = flow.add(wf.step, "b", after=[a])
    c = flow.add(wf.step, "c", after=[a])
    d = flow.add(wf.step, "d", after=[b, c])
    flow.enqueue()
    return flow, [a, b, c, d]


def test_waiting_nodes_are_never_claimed() -> None:
    _, (a, b, c, d) = diamond()
    assert [status(n) for n in (a, b, c, d)] == ["pending", "waiting", "waiting", "waiting"]
    claimed = Job.objects.claim("w", lease=60, batch=10)
    assert [job.id for job in claimed] == [a.job_id]


def test_fan_in_is_released_by_its_last_dependency_only() -> None:
    _, (a, b, c, d) = diamond()
    succeed(a.job_id)
    assert (status(b), status(c), status(d)) == ("pending", "pending", "waiting")
    succeed(b.job_id)
    assert status(d) == "waiting"
    succeed(c.job_id)
    assert status(d) == "pending"


def test_batched_completion_releases_in_its_transaction() -> None:
    """Siblings completed in one ``complete_batch`` release their fan-in once."""
    _, (a, b, c, d) = diamond()
    succeed(a.job_id)
    tokens = [claim(n.job_id) for n in (b, c)]
    outcomes = Job.objects.complete_batch(
        [
            Completion(n.job_id, t, "succeeded", result=n.name)
            for n, t in zip((b, c), tokens, strict=True)
        ]
    )
    assert outcomes == [ClaimTransition.UPDATED] * 2
    assert status(d) == "pending"


def test_release_rolls_back_with_the_completion() -> None:
    """The release is in the completion's transaction: undo one, the other is undone."""
    _, (a, b, _c, _d) = diamond()
    token = claim(a.job_id)
    seen = []

    def complete_then_fail() -> None:
        with transaction.atomic():
            Job.objects.mark_succeeded(a.job_id, token, "x")
            seen.append(status(b))
            raise RuntimeError("the caller's transaction fails")

    with pytest.raises(RuntimeError):
        complete_then_fail()
    assert seen == ["pending"]
    assert (status(a), status(b)) == ("running", "waiting")


def test_stale_completion_releases_nothing() -> None:
    flow = Workflow("stale")
    a = flow.add(wf.step.using(max_attempts=3), "a")
    b = flow.add(wf.step, "b", after=[a])
    flow.enqueue()
    stale = claim(a.job_id, lease=1)
    time.sleep(1.6)
    assert Job.objects.sweep_expired_leases(10) == 1
    assert status(a) == "pending"
    fresh_token = claim(a.job_id)
    assert Job.objects.mark_succeeded(a.job_id, stale, 1) is ClaimTransition.LOST
    assert status(b) == "waiting"
    assert Job.objects.mark_succeeded(a.job_id, fresh_token, 2) is ClaimTransition.UPDATED
    assert status(b) == "pending"


def test_lost_acknowledgement_is_not_released_twice() -> None:
    """A completion written again after its commit landed (answer lost) changes nothing."""
    flow = Workflow("ack")
    a = flow.add(wf.step, "a")
    b = flow.add(wf.step, "b", after=[a])
    flow.enqueue()
    token = claim(a.job_id)
    completion = Completion(a.job_id, token, "succeeded", result=1, attempt_log=[{"worker": "w"}])
    assert Job.objects.complete_batch([completion]) == [ClaimTransition.UPDATED]
    succeed(b.job_id)
    # The worker did not hear back and writes the same completion again.
    assert Job.objects.complete_batch([completion]) == [ClaimTransition.UPDATED]
    assert status(b) == "succeeded"
    assert fresh(b.job_id).attempts == 1


def test_when_failed_and_cascade_cancel_name_the_upstream() -> None:
    flow = Workflow("fulfil")
    charge = flow.add(wf.step, "charge")
    ship = flow.add(wf.step, "ship", after=[charge])
    email = flow.add(wf.step, "email", after=[ship])
    refund = flow.add(wf.step, "refund", after=[charge], when="failed")
    audit = flow.add(wf.step, "audit", after=[ship, refund], when="always")
    flow.enqueue()
    die(charge.job_id)
    assert status(refund) == "pending"
    assert status(ship) == "cancelled"
    assert "'step'" in fresh(ship.job_id).last_error  # the upstream node's name
    assert str(charge.job_id) in fresh(ship.job_id).last_error
    assert status(email) == "cancelled"
    assert f"'{ship.name}'" in fresh(email.job_id).last_error
    assert status(audit) == "waiting"  # always: waits for refund too
    succeed(refund.job_id)
    assert status(audit) == "pending"


def test_succeeded_upstream_cancels_a_when_failed_node() -> None:
    flow = Workflow("happy")
    charge = flow.add(wf.step, "charge")
    refund = flow.add(wf.step, "refund", after=[charge], when="failed")
    flow.enqueue()
    succeed(charge.job_id)
    assert status(refund) == "cancelled"


def test_sweep_releases_and_cancels_in_its_transaction() -> None:
    flow = Workflow("swept")
    a = flow.add(wf.step.using(max_attempts=1), "a")
    ok = flow.add(wf.step, "ok", after=[a])
    on_fail = flow.add(wf.step, "on_fail", after=[a], when="failed")
    flow.enqueue()
    claim(a.job_id, lease=1)
    time.sleep(1.6)
    assert Job.objects.sweep_expired_leases(10) == 1
    assert fresh(a.job_id).error_kind == "exhausted"
    assert (status(ok), status(on_fail)) == ("cancelled", "pending")


def test_requeue_of_a_dead_node_resumes_its_workflow() -> None:
    flow = Workflow("resume")
    a = flow.add(wf.step, "a")
    other = flow.add(wf.step, "other")
    b = flow.add(wf.step, "b", after=[a])
    c = flow.add(wf.step, "c", after=[b, other])
    blocked = flow.add(wf.step, "blocked", after=[a, other])
    on_fail = flow.add(wf.step, "on_fail", after=[a], when="failed")
    flow.enqueue()
    die(a.job_id)
    assert [status(n) for n in (b, c, blocked)] == ["cancelled"] * 3
    assert status(on_fail) == "pending"
    succeed(other.job_id)
    assert Job.objects.requeue_dead(a.job_id) == 1
    assert [status(n) for n in (a, b, c, blocked)] == ["pending", "waiting", "waiting", "waiting"]
    assert fresh(b.job_id).last_error == ""
    succeed(a.job_id)
    assert (status(b), status(blocked)) == ("pending", "pending")
    succeed(b.job_id)
    assert status(c) == "pending"
    assert status(on_fail) == "pending"  # released by the first death; it stays released


def edge_state(up: Node, down: Node) -> tuple[str, str]:
    """The edge's state as stored, and as ``edge_states`` reads it."""
    edge = WorkflowEdge.objects.get(upstream_id=up.job_id, downstream_id=down.job_id)
    return edge.state, dependencies.edge_states("default", Job, edge.workflow_id)[edge.id]


def test_a_decided_edge_is_not_written_and_a_requeue_of_its_upstream_writes_it() -> None:
    """The completion that decides an edge leaves it stored open (its upstream's
    status says how it was decided); readers get ``met`` or ``unmet`` from
    ``edge_states``. A requeue of the upstream writes the edge into the dependent it
    released, so the upstream's next outcome (one that dependent's ``when`` does not
    accept) neither makes it unmet nor touches the released dependent; the edge into
    the dependent it cancelled is open again, and decided again by the next outcome."""
    flow = Workflow("sole edges")
    a = flow.add(wf.step, "a")
    ship = flow.add(wf.step, "ship", after=[a])
    refund = flow.add(wf.step, "refund", after=[a], when="failed")
    flow.enqueue()
    die(a.job_id)
    assert (status(ship), status(refund)) == ("cancelled", "pending")
    assert edge_state(a, refund) == (EdgeState.OPEN, EdgeState.MET)
    assert edge_state(a, ship) == (EdgeState.OPEN, EdgeState.UNMET)  # read from a's status
    assert Job.objects.requeue_dead(a.job_id) == 1
    assert (status(ship), status(refund)) == ("waiting", "pending")
    assert edge_state(a, refund) == (EdgeState.MET, EdgeState.MET)
    assert edge_state(a, ship) == (EdgeState.OPEN, EdgeState.OPEN)
    succeed(a.job_id)
    assert (status(ship), status(refund)) == ("pending", "pending")
    assert edge_state(a, refund) == (EdgeState.MET, EdgeState.MET)
    assert edge_state(a, ship) == (EdgeState.OPEN, EdgeState.MET)
    succeed(refund.job_id)
    succeed(ship.job_id)
    assert flow.run is not None
    assert WorkflowRun.objects.get(pk=flow.run.pk).outcome == "succeeded"


def test_requeue_keeps_cancelled_a_node_another_failure_rules_out() -> None:
    flow = Workflow("two failures")
    a = flow.add(wf.step, "a")
    z = flow.add(wf.step, "z")
    d = flow.add(wf.step, "d", after=[a, z])
    flow.enqueue()
    die(a.job_id)
    die(z.job_id)
    assert status(d) == "cancelled"
    assert WorkflowNode.objects.get(job_id=d.job_id).cancelled_by == a.job_id
    Job.objects.requeue_dead(a.job_id)
    assert status(d) == "cancelled"
    assert WorkflowNode.objects.get(job_id=d.job_id).cancelled_by == z.job_id
    Job.objects.requeue_dead(z.job_id)
    assert status(d) == "waiting"
    succeed(a.job_id)
    succeed(z.job_id)
    assert status(d) == "pending"


def test_operator_cancel_of_a_node_cascades() -> None:
    _, (a, b, c, d) = diamond()
    succeed(a.job_id)
    assert Job.objects.cancel(b.job_id) == 1
    assert status(d) == "cancelled"
    succeed(c.job_id)
    assert status(d) == "cancelled"


def test_cancelling_a_workflow_cancels_waiting_pending_and_running() -> None:
    flow, (a, b, c, d) = diamond()
    succeed(a.job_id)
    token = claim(b.job_id)
    assert flow.cancel() == 3
    assert [status(n) for n in (a, b, c, d)] == ["succeeded", "cancelled", "cancelled", "cancelled"]
    # The running node's worker is fenced out.
    assert Job.objects.mark_succeeded(b.job_id, token, 1) is ClaimTransition.LOST


def test_enqueue_commits_with_the_callers_transaction_or_not_at_all() -> None:
    def enqueue_then_fail() -> None:
        with transaction.atomic():
            flow = Workflow("rolled back", key="k1")
            flow.add(wf.step, "a")
            flow.enqueue()
            raise RuntimeError("the order failed")

    with pytest.raises(RuntimeError):
        enqueue_then_fail()
    assert not WorkflowRun.objects.exists()
    assert not Job.objects.exists()


def test_key_is_held_by_one_live_workflow() -> None:
    first = Workflow("one", key="order-1")
    first_node = first.add(wf.step, "a")
    first.enqueue()
    second = Workflow("one", key="order-1")
    second.add(wf.step, "a")
    second.enqueue()
    assert not second.created
    assert second.id == first.id
    assert Job.objects.count() == 1
    succeed(first_node.job_id)
    third = Workflow("one", key="order-1")
    third.add(wf.step, "a")
    third.enqueue()
    assert third.created
    assert third.id != first.id


def test_cycles_and_unknown_nodes_are_refused_at_build_time() -> None:
    flow = Workflow("cyclic")
    a = flow.add(wf.step, "a")
    b = flow.add(wf.step, "b", after=[a])
    a.after(b)
    with pytest.raises(WorkflowError, match=r"cycle: .*step.*→.*step"):
        flow.enqueue()
    other = Workflow("other")
    stranger = other.add(wf.step, "x")
    mine = Workflow("mine")
    mine.add(wf.step, "y", after=[stranger])
    with pytest.raises(WorkflowError, match="not a node of 'mine'"):
        mine.enqueue()
    with pytest.raises(WorkflowError, match="when must be one of"):
        mine.add(wf.step, "z", when="sometimes")
    assert not Job.objects.exists()


def test_limits_are_settings(settings: object) -> None:
    from django.test import override_settings

    with override_settings(ARCATURE={"WORKFLOW_MAX_NODES": 2}):
        flow = Workflow("big")
        flow.add(wf.step, "a")
        flow.add(wf.step, "b")
        with pytest.raises(WorkflowError, match="WORKFLOW_MAX_NODES"):
            flow.add(wf.step, "c")
    with override_settings(ARCATURE={"WORKFLOW_MAX_EDGES_PER_NODE": 1}):
        flow = Workflow("wide")
        a, b = flow.add(wf.step, "a"), flow.add(wf.step, "b")
        flow.add(wf.step, "c", after=[a, b])
        with pytest.raises(WorkflowError, match="WORKFLOW_MAX_EDGES_PER_NODE"):
            flow.enqueue()


def test_ten_thousand_nodes_by_default() -> None:
    flow = Workflow("wide fan")
    root = flow.add(wf.step, "root")
    leaves = [flow.add(wf.step, f"leaf {i}", after=[root]) for i in range(9_998)]
    flow.add(wf.step, "sink", after=leaves)
    flow.enqueue()
    assert Job.objects.filter(status=JobStatus.WAITING).count() == 9_999
    assert WorkflowEdge.objects.filter(state=EdgeState.OPEN).count() == 2 * 9_998


def test_upstream_results_reach_the_dependent() -> None:
    flow = Workflow("results")
    a = flow.add(wf.step, "A")
    b = flow.add(wf.step, "B")
    g = flow.add(wf.gather, "G", after=[a, b])
    flow.enqueue()
    summary = drain()
    assert summary.succeeded == 3
    assert fresh(g.job_id).result == {"label": "G", "upstream": {"step": "A", "step-2": "B"}}


def test_drain_runs_a_whole_workflow() -> None:
    flow = Workflow("drained")
    charge = flow.add(wf.step, "charge")
    picks = [flow.add(wf.step, f"pick {i}", after=[charge]) for i in range(5)]
    ship = flow.add(wf.step, "ship", after=picks)
    flow.add(wf.boom, "refund", after=[charge], when="failed")
    flow.enqueue()
    summary = drain()
    assert summary.succeeded == 7
    assert status(ship) == "succeeded"
    assert Job.objects.filter(status=JobStatus.CANCELLED).count() == 1


def test_admin_lists_and_shows_waiting_nodes(admin_user: object) -> None:
    from django.test import Client
    from django.urls import reverse

    _, (a, _b, _c, d) = diamond()
    client = Client()
    client.force_login(admin_user)  # type: ignore[arg-type]
    listing = client.get(reverse("admin:django_arcature_job_changelist"), {"status": "waiting"})
    assert listing.status_code == 200
    assert str(d.job_id) in listing.content.decode()
    assert str(a.job_id) not in listing.content.decode()
    page = client.get(reverse("admin:django_arcature_job_change", args=[d.job_id]))
    assert page.status_code == 200


def test_a_django_tasks_task_is_refused_as_a_node_member_or_callback() -> None:
    """Its ``name`` is the bare function name: stored, it would be a task nobody runs."""
    from django_arcature import Batch
    from tests.integration import backend_tasks

    flow = Workflow("tasks")
    with pytest.raises(WorkflowError, match=r"django\.tasks Task"):
        flow.add(backend_tasks.add, 1, 2)
    with pytest.raises(WorkflowError, match=r"django\.tasks Task"):
        Batch(on_success=backend_tasks.add)
    with pytest.raises(WorkflowError, match=r"django\.tasks Task"):
        Batch().add(backend_tasks.add, 1, 2)
    assert not Job.objects.exists()

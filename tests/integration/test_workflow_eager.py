"""``ARCATURE["EAGER"]`` runs a workflow's nodes and a batch's callbacks inline, in order.

Each node runs through the eager runner (claim, dispatch, fenced completion), and
only its completion releases or cancels what waits on it, as in a worker: the
tests read every node's stored end state, not what the drain thinks it did.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from django.test import override_settings

from django_arcature import Batch, Workflow
from django_arcature.models import Job, JobStatus
from django_arcature.workflows.build import Node
from django_arcature.workflows.models import BatchRun, Outcome, WorkflowNode, WorkflowRun
from tests.testapp import workflow_jobs as wf

from .conftest import fresh

pytestmark = pytest.mark.django_db

EAGER = {"EAGER": True}


@pytest.fixture(autouse=True)
def runs() -> Iterator[list[str]]:
    wf.ORDER_RUNS.clear()
    yield wf.ORDER_RUNS
    wf.ORDER_RUNS.clear()


def fulfilment(amount_cents: int = 100) -> tuple[Workflow, dict[str, Node]]:
    """The order-fulfilment workflow of issue 20, for order 7 with items 1-3."""
    flow = Workflow("fulfil order", key="order-7")
    charge = flow.add(wf.charge_card, 7, amount_cents=amount_cents)
    picks = [flow.add(wf.pick_item, item, after=[charge]) for item in (1, 2, 3)]
    ship = flow.add(wf.ship_order, 7, after=picks)
    email = flow.add(wf.email_receipt, 7, after=[ship])
    refund = flow.add(wf.refund, 7, after=[charge], when="failed")
    flow.enqueue()
    nodes = {"charge": charge, "ship": ship, "email": email, "refund": refund}
    nodes.update({f"pick {item}": pick for item, pick in zip((1, 2, 3), picks, strict=True)})
    return flow, nodes


def flow_id(flow: Workflow) -> uuid.UUID:
    assert flow.id is not None
    return flow.id


def batch_id(batch: Batch) -> uuid.UUID:
    assert batch.id is not None
    return batch.id


def states(nodes: dict[str, Node]) -> dict[str, str]:
    return {name: fresh(node.job_id).status for name, node in nodes.items()}


@override_settings(ARCATURE=EAGER)
def test_order_fulfilment_runs_to_its_end_state(runs: list[str]) -> None:
    flow, nodes = fulfilment()
    assert states(nodes) == {
        "charge": "succeeded",
        "pick 1": "succeeded",
        "pick 2": "succeeded",
        "pick 3": "succeeded",
        "ship": "succeeded",
        "email": "succeeded",
        "refund": "cancelled",  # its when="failed" cannot be met: let go, as by a worker
    }
    # Dependency order: each node after everything it waits for.
    assert runs == ["charge 7", "pick 1", "pick 2", "pick 3", "ship 7", "email 7"]
    ship = fresh(nodes["ship"].job_id)
    assert ship.result == ["picked 1", "picked 2", "picked 3"]  # upstream() read inline
    refund = fresh(nodes["refund"].job_id)
    assert "charge_card" in refund.last_error
    assert "cannot be met" in refund.last_error
    assert all(fresh(node.job_id).attempts <= 1 for node in nodes.values())
    run = WorkflowRun.objects.get(id=flow_id(flow))
    assert (run.outcome, run.live_key) == (Outcome.SUCCEEDED, None)


@override_settings(ARCATURE=EAGER)
def test_a_failing_node_runs_its_refund_branch(runs: list[str]) -> None:
    flow, nodes = fulfilment(amount_cents=0)
    assert states(nodes) == {
        "charge": "dead",
        "pick 1": "cancelled",
        "pick 2": "cancelled",
        "pick 3": "cancelled",
        "ship": "cancelled",
        "email": "cancelled",
        "refund": "succeeded",
    }
    assert runs == ["charge 7", "refund 7"]
    assert fresh(nodes["refund"].job_id).result == "refunded 7"
    assert fresh(nodes["charge"].job_id).error_kind == "permanent"
    assert WorkflowRun.objects.get(id=flow_id(flow)).outcome == Outcome.FAILED


@override_settings(ARCATURE=EAGER)
def test_an_always_node_after_a_cancelled_one_runs(runs: list[str]) -> None:
    """The drain looks through the nodes a completion cancelled to their dependents."""
    flow = Workflow("cleanup")
    a = flow.add(wf.boom, "a")
    b = flow.add(wf.step, "b", after=[a])  # cancelled when a dies
    c = flow.add(wf.step, "c", after=[b], when="always")  # released by b's cancel
    flow.enqueue()
    assert [fresh(n.job_id).status for n in (a, b, c)] == ["dead", "cancelled", "succeeded"]


@override_settings(ARCATURE=EAGER)
def test_a_workflow_in_the_callers_transaction_runs_there() -> None:
    from django.db import transaction

    with transaction.atomic():
        flow = Workflow("in a transaction")
        a = flow.add(wf.step, "a")
        b = flow.add(wf.step, "b", after=[a])
        flow.enqueue()
        assert fresh(b.job_id).status == JobStatus.SUCCEEDED


@override_settings(ARCATURE=EAGER)
def test_a_held_key_runs_nothing_again(runs: list[str]) -> None:
    first = Workflow("held", key="held")
    first.add(wf.record.using(max_attempts=2), "/nonexistent-dir/runs", "a")  # stays pending
    first.enqueue()
    again = Workflow("held", key="held")
    again.add(wf.charge_card, 2)
    again.enqueue()
    assert (again.created, again.id, runs) == (False, first.id, [])


@override_settings(ARCATURE=EAGER)
def test_a_node_that_fails_with_attempts_left_stays_pending() -> None:
    """One attempt per node, as for a plain eager enqueue; drain() finishes it."""
    from django_arcature.testing import drain

    flow = Workflow("flaky")
    a = flow.add(wf.record.using(max_attempts=2), "/nonexistent-dir/runs", "a")
    b = flow.add(wf.step, "b", after=[a])
    flow.enqueue()
    assert (fresh(a.job_id).status, fresh(a.job_id).attempts) == (JobStatus.PENDING, 1)
    assert fresh(b.job_id).status == JobStatus.WAITING
    summary = drain()
    assert (summary.dead, fresh(b.job_id).status) == (1, JobStatus.CANCELLED)


@override_settings(ARCATURE=EAGER)
def test_a_batch_runs_its_members_then_its_callbacks_once(runs: list[str]) -> None:
    batch = Batch(on_success=wf.batch_note, on_finish=wf.batch_done)
    members = [batch.add(wf.pick_item, item) for item in range(4)]
    batch.enqueue()
    assert [fresh(m).status for m in members] == ["succeeded"] * 4
    assert runs == [*(f"pick {i}" for i in range(4)), f"callback {batch.id}"]
    callbacks = Job.objects.filter(task_name__in=["wf.batch_note", "wf.batch_done"])
    assert sorted(callbacks.values_list("task_name", "status", "result")) == [
        ("wf.batch_done", "succeeded", str(batch.id)),
        ("wf.batch_note", "succeeded", str(batch.id)),
    ]
    assert batch.counts() == {"total": 4, "succeeded": 4, "dead": 0, "cancelled": 0, "pending": 0}
    assert BatchRun.objects.get(id=batch_id(batch)).outcome == Outcome.SUCCEEDED


@override_settings(ARCATURE=EAGER)
def test_a_batch_with_a_dead_member_runs_on_finish_only(runs: list[str]) -> None:
    batch = Batch(on_success=wf.batch_done, on_finish=wf.batch_note)
    batch.add(wf.charge_card, 1, amount_cents=0)
    batch.add(wf.pick_item, 2)
    batch.enqueue()
    assert not Job.objects.filter(task_name="wf.batch_done").exists()
    assert runs == ["charge 1", "pick 2", f"callback {batch.id}"]
    assert BatchRun.objects.get(id=batch_id(batch)).outcome == Outcome.FAILED


@override_settings(ARCATURE=EAGER)
def test_an_open_batch_fires_when_closed(runs: list[str]) -> None:
    batch = Batch(on_finish=wf.batch_note)
    batch.add(wf.pick_item, 1)
    batch.enqueue(close=False)
    assert runs == ["pick 1"]
    more = Batch.open(batch_id(batch))
    more.add(wf.pick_item, 2)
    more.enqueue(close=False)
    assert runs == ["pick 1", "pick 2"]
    more.close()
    assert runs == ["pick 1", "pick 2", f"callback {batch.id}"]


@override_settings(ARCATURE=EAGER)
def test_a_node_that_enqueues_a_workflow_runs_it_inline() -> None:
    flow = Workflow("outer")
    outer = flow.add(wf.nested_flow, "x")
    last = flow.add(wf.step, "done", after=[outer])
    flow.enqueue()
    inner_id = uuid.UUID(str(fresh(outer.job_id).result))
    inner_nodes = WorkflowNode.objects.filter(workflow_id=inner_id).values_list("job_id", flat=True)
    inner = sorted(Job.objects.filter(id__in=inner_nodes).values_list("result", "status"))
    assert inner == [("x 1", "succeeded"), ("x 2", "succeeded")]
    assert fresh(last.job_id).status == JobStatus.SUCCEEDED
    assert WorkflowRun.objects.get(id=inner_id).outcome == Outcome.SUCCEEDED


@pytest.mark.slow
@pytest.mark.only_on("sqlite", reason="the drain's loop is the same code on every database")
@override_settings(ARCATURE=EAGER)
def test_a_600_node_chain_runs_without_recursion() -> None:
    """A loop, not a recursion: past a recursion limit of 400 in nested runs (one frame
    per node would fail at once; every run takes several)."""
    import sys

    flow = Workflow("chain")
    node = flow.add(wf.step, "0")
    for i in range(1, 600):
        node = flow.add(wf.step, str(i), after=[node])
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(400)  # a recursion of one frame per node would fail at once
    try:
        flow.enqueue()
    finally:
        sys.setrecursionlimit(limit)
    assert Job.objects.filter(status=JobStatus.SUCCEEDED).count() == 600
    assert fresh(node.job_id).result == "599"
    assert WorkflowRun.objects.get(id=flow_id(flow)).outcome == Outcome.SUCCEEDED


def test_without_eager_nothing_runs(runs: list[str]) -> None:
    _, nodes = fulfilment()
    assert states(nodes)["charge"] == "pending"
    assert runs == []

"""A workflow's and a batch's outcome, written once in the transaction that finished it.

The metrics (and anyone else) read ``outcome`` from the workflow or batch row
instead of scanning nodes, so it must follow every path that finishes a node:
fenced completions, the sweep, cascaded cancels, an operator's cancel, and a
requeue of a dead node, which makes the workflow live again.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from django.db import connection, connections, transaction
from django.test.utils import CaptureQueriesContext

from django_arcature import Batch, Workflow
from django_arcature.models import Job
from django_arcature.transitions import ClaimTransition
from django_arcature.workflows.models import BatchRun, WorkflowCounter, WorkflowRun
from tests.testapp import workflow_jobs as wf

from .test_workflows import claim, diamond, die, succeed

pytestmark = pytest.mark.django_db(transaction=True)


def outcome(flow: Workflow) -> str:
    assert flow.id is not None
    run = WorkflowRun.objects.get(id=flow.id)
    assert (run.finished_at is None) == (run.outcome == "")
    return run.outcome


def test_a_workflow_is_finished_by_its_last_node_only() -> None:
    flow, (a, b, c, d) = diamond()
    assert WorkflowCounter.objects.filter(workflow_id=flow.id).count() == 4
    for node in (a, b, c):
        succeed(node.job_id)
        assert outcome(flow) == ""
    succeed(d.job_id)
    assert outcome(flow) == "succeeded"
    assert flow.run is not None
    assert WorkflowRun.objects.filter(pk=flow.run.pk, live_key=None).exists()


def test_a_death_and_its_cascade_finish_the_workflow_as_failed() -> None:
    flow, (a, b, c, d) = diamond()
    die(a.job_id)  # b, c, d cancelled in the same transaction
    assert {Job.objects.get(id=n.job_id).status for n in (b, c, d)} == {"cancelled"}
    assert outcome(flow) == "failed"


def test_a_compensated_failure_still_reads_failed_and_a_requeue_resumes_it() -> None:
    flow = Workflow("order")
    charge = flow.add(wf.step, "charge")
    ship = flow.add(wf.step, "ship", after=[charge])
    refund = flow.add(wf.step, "refund", after=[charge], when="failed")
    flow.enqueue()
    die(charge.job_id)
    assert outcome(flow) == ""  # the refund is pending
    succeed(refund.job_id)
    assert outcome(flow) == "failed"
    assert Job.objects.requeue_dead(charge.job_id) == 1
    assert outcome(flow) == ""  # live again: charge pending, ship waiting
    assert Job.objects.get(id=ship.job_id).status == "waiting"
    succeed(charge.job_id)
    succeed(ship.job_id)
    assert outcome(flow) == "succeeded"


def test_the_sweep_and_an_operator_cancel_finish_workflows() -> None:
    swept = Workflow("swept")
    a = swept.add(wf.step.using(max_attempts=1), "a")
    swept.add(wf.step, "b", after=[a])
    swept.enqueue()
    claim(a.job_id, lease=1)
    time.sleep(1.6)
    assert Job.objects.sweep_expired_leases(10) == 1
    assert outcome(swept) == "failed"

    cancelled = Workflow("one node cancelled")
    x = cancelled.add(wf.step, "x")
    cancelled.add(wf.step, "y", after=[x])
    cancelled.enqueue()
    assert Job.objects.cancel(x.job_id) == 1  # y is cancelled with it
    assert outcome(cancelled) == "cancelled"  # an operator cancelled x; y was let go


def test_cancelling_a_workflow_reads_cancelled_and_a_late_finish_changes_nothing() -> None:
    flow, (a, *_rest) = diamond()
    token = claim(a.job_id)
    flow.cancel()
    assert outcome(flow) == "cancelled"
    assert Job.objects.mark_succeeded(a.job_id, token, None) is ClaimTransition.LOST
    assert outcome(flow) == "cancelled"


def test_batch_outcomes() -> None:
    ok = Batch(on_finish=wf.batch_done)
    members = [ok.add(wf.step, str(i)) for i in range(3)]
    ok.enqueue()
    for job_id in members:
        succeed(job_id)
    bad = Batch(on_finish=wf.batch_done)
    lost = bad.add(wf.step, "x")
    bad.enqueue()
    die(lost)
    gone = Batch(on_finish=wf.batch_done)
    gone.add(wf.step, "y")
    gone.enqueue()
    gone.cancel()
    still = Batch(on_finish=wf.batch_done)
    still.add(wf.step, "z")
    still.enqueue()
    got = dict(BatchRun.objects.values_list("id", "outcome"))
    assert got == {ok.id: "succeeded", bad.id: "failed", gone.id: "cancelled", still.id: ""}


def test_a_wide_fan_in_does_not_lock_the_workflow_row_until_the_end() -> None:
    """Completions that leave their dependent waiting neither lock nor write the workflow row
    (they read its node count with their node rows, without a lock)."""
    flow = Workflow("wide")
    top = [flow.add(wf.step, str(i)) for i in range(5)]
    flow.add(wf.step, "sink", after=top)
    flow.enqueue()
    table = WorkflowRun._meta.db_table
    succeed(top[4].job_id)  # the sink still waits on four
    for node in top[:4]:
        with CaptureQueriesContext(connection) as queries:
            succeed(node.job_id)
        touching = [
            q["sql"]
            for q in queries.captured_queries
            if any(f"UPDATE {quote}{table}{quote}" in q["sql"] for quote in '"`')
            or (
                any(f"FROM {quote}{table}{quote}" in q["sql"] for quote in '"`')
                and " FOR " in q["sql"].upper()  # FOR UPDATE / NO KEY UPDATE / SHARE
            )
        ]
        assert touching == [], node


def complete_together(tokens: dict[uuid.UUID, uuid.UUID]) -> None:
    """Each fenced completion in its own thread and transaction, started at the same instant."""
    barrier = threading.Barrier(len(tokens))
    errors: list[BaseException] = []

    def complete(job_id: uuid.UUID) -> None:
        try:
            with transaction.atomic():
                barrier.wait(10)
                result = Job.objects.mark_succeeded(job_id, tokens[job_id], None)
                assert result is ClaimTransition.UPDATED
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=complete, args=(j,)) for j in tokens]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors, errors


@pytest.mark.only_on("postgresql", "mysql", reason="SQLite runs one writer at a time")
def test_two_last_siblings_finishing_at_once_finish_the_workflow_once() -> None:
    """Both last leaves complete in overlapping transactions; one of them sees the other."""
    for _round in range(3):
        flow = Workflow(f"pair {uuid.uuid4()}")
        root = flow.add(wf.step, "root")
        left = flow.add(wf.step, "left", after=[root])
        right = flow.add(wf.step, "right", after=[root])
        flow.enqueue()
        succeed(root.job_id)
        complete_together({n.job_id: claim(n.job_id) for n in (left, right)})
        assert outcome(flow) == "succeeded"


def test_a_node_cancelled_in_a_later_round_of_the_cascade_lets_the_workflow_finish() -> None:
    """Found by the model: d waits for b (when=failed) and c; b's death cancels c in the
    first round, which cancels d in the second. The workflow has then finished."""
    flow = Workflow("two rounds")
    a = flow.add(wf.step, "a")
    b = flow.add(wf.step, "b", after=[a])
    c = flow.add(wf.step, "c", after=[a, b])
    d = flow.add(wf.step, "d", after=[b, c], when="failed")
    flow.enqueue()
    succeed(a.job_id)
    die(b.job_id)
    assert [Job.objects.get(id=n.job_id).status for n in (c, d)] == ["cancelled", "cancelled"]
    assert outcome(flow) == "failed"

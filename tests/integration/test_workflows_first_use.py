"""Workflows and batches as a new user meets them: the mistakes caught where they are made.

A batch callback is enqueued by the last member's completion, in a worker, and a
node's ``when`` is read by its upstream's completion: a mistake found there is
found where nobody can fix it. These tests pin that it is found at the call instead.
"""

from __future__ import annotations

import io
import uuid

import pytest
from django.core.management import call_command

from django_arcature import Batch, Workflow, WorkflowError
from django_arcature.exceptions import UnknownTask
from django_arcature.models import Job, JobStatus
from django_arcature.workflows.models import BatchRun, WorkflowRun
from django_arcature.workflows.results import progress_of
from tests.testapp import workflow_jobs as wf

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("role", ["on_success", "on_finish"])
def test_a_callback_whose_handler_cannot_take_the_batch_id_is_refused_at_once(role: str) -> None:
    with pytest.raises(WorkflowError) as refused:
        Batch(**{role: wf.count_rows})  # type: ignore[arg-type]
    message = str(refused.value)
    assert f"Batch({role}='wf.count_rows')" in message
    assert "one argument, the batch's id as a string" in message
    assert "argument 'rows' of count_rows must be int, got str <the batch's id>" in message
    assert not Job.objects.exists()
    assert not BatchRun.objects.exists()


def test_a_callback_handle_with_options_is_checked_the_same_way() -> None:
    with pytest.raises(WorkflowError, match="batch's id as a string"):
        Batch(on_finish=wf.count_rows.using(queue="cleanup"))


def test_an_unknown_callback_name_is_refused_naming_the_nearest() -> None:
    with pytest.raises(UnknownTask, match=r"wf\.batch_done"):
        Batch(on_finish="wf.batch_dome")
    assert not BatchRun.objects.exists()


def test_a_good_callback_still_fires_from_a_worker() -> None:
    batch = Batch(on_success=wf.batch_done, on_finish="wf.batch_done")
    batch.add(wf.step, "row")
    batch.enqueue()
    call_command("arcature_worker", "--burst", "--no-duties", stdout=io.StringIO())
    fired = Job.objects.filter(task_name="wf.batch_done", payload__args=[str(batch.id)])
    assert fired.count() == 2
    call_command("arcature_worker", "--burst", "--no-duties", stdout=io.StringIO())
    assert set(fired.values_list("status", flat=True)) == {JobStatus.SUCCEEDED}


def test_opening_a_batch_that_does_not_exist_says_so() -> None:
    missing = uuid.uuid4()
    with pytest.raises(LookupError, match=f"no batch {missing}"):
        Batch.open(missing)


@pytest.mark.parametrize("when", ["failed", "always"])
def test_a_when_without_after_is_refused_before_it_runs_at_once(when: str) -> None:
    """``flow.add(refund, 7, when="failed")`` without ``after=`` would refund at once."""
    flow = Workflow("fulfil order")
    flow.add(wf.step, "charge")
    flow.add(wf.step, "refund", when=when)
    with pytest.raises(WorkflowError, match=f"when='{when}' but waits for nothing"):
        flow.enqueue()
    assert not Job.objects.exists()
    assert not WorkflowRun.objects.exists()


def test_a_when_given_its_upstream_later_with_after_is_accepted() -> None:
    flow = Workflow("fulfil order")
    charge = flow.add(wf.boom, "charge")
    refund = flow.add(wf.step, "refund", when="failed")
    refund.after(charge)
    flow.enqueue()
    call_command("arcature_worker", "--burst", "--no-duties", stdout=io.StringIO())
    assert refund.job.status == JobStatus.SUCCEEDED


def test_a_node_of_a_workflow_whose_key_was_held_says_it_was_never_written() -> None:
    """The second enqueue returns the live workflow; its own nodes have no job to read."""
    first = Workflow("fulfil order", key="order-7")
    charge = first.add(wf.step, "charge")
    first.enqueue()
    again = Workflow("fulfil order", key="order-7")
    ship = again.add(wf.step, "ship")
    again.enqueue()
    assert again.created is False
    assert again.id == first.id
    with pytest.raises(WorkflowError, match=r"node 'step' was never written: .* key 'order-7'"):
        ship.job  # noqa: B018
    assert charge.job.status == JobStatus.PENDING
    assert Job.objects.count() == 1


def test_a_batch_name_past_its_column_is_refused_on_every_database() -> None:
    with pytest.raises(WorkflowError, match="a batch's name is 0 to 200 characters"):
        Batch(name="n" * 201)
    batch = Batch(name="n" * 200)
    batch.add(wf.step, "row")
    batch.enqueue()
    assert batch.id is not None
    assert BatchRun.objects.get(id=batch.id).name == "n" * 200


def test_an_async_node_reads_its_upstream_and_reports_progress() -> None:
    flow = Workflow("async fan-in")
    picks = [flow.add(wf.step, f"pick {i}") for i in range(2)]
    gather = flow.add(wf.async_gather, "ship", after=picks)
    flow.enqueue()
    call_command("arcature_worker", "--burst", "--no-duties", stdout=io.StringIO())
    job = gather.job
    assert job.status == JobStatus.SUCCEEDED, job.last_error
    assert job.result == {
        "label": "ship",
        "upstream": {"step": "pick 0", "step-2": "pick 1"},
        "written": True,
    }
    assert progress_of(gather.job_id) == (1.0, "ship done")


def test_an_async_node_calling_the_sync_upstream_is_told_what_to_call() -> None:
    flow = Workflow("async mistake")
    node = flow.add(wf.async_sync_calls, "x", after=[flow.add(wf.step, "a")])
    flow.enqueue()
    call_command("arcature_worker", "--burst", "--no-duties", stdout=io.StringIO())
    job = node.job
    assert job.status == JobStatus.DEAD
    assert "use await current_job().aupstream(...)" in job.last_error

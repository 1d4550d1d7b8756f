"""A batched completion settles its workflow and batch members, and only them.

PostgreSQL's batched completion says in its own ``RETURNING`` which changed jobs are
workflow or batch members, so a batch of plain jobs runs no look-up for dependents at
all; the other databases look the landed ids up as before. Either way, a batch that
mixes plain jobs and members must release and count exactly what the members' own
completions would, one by one.
"""

from __future__ import annotations

import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_arcature import Batch, Workflow
from django_arcature.models import Job, JobStatus
from django_arcature.transitions import ClaimTransition, Completion
from django_arcature.workflows.models import WorkflowNode, WorkflowRun
from tests.testapp import workflow_jobs as wf

from .conftest import MakeJobs, fresh

pytestmark = pytest.mark.django_db(transaction=True)


def claim_token(job_id: uuid.UUID) -> uuid.UUID:
    claimed = Job.objects.claim_job(job_id, "w1", 60)
    assert claimed is not None, f"{job_id} was not claimable"
    return claimed.claim_token


def test_one_batch_of_plain_jobs_and_members_settles_the_members(make_jobs: MakeJobs) -> None:
    flow = Workflow("mixed batch")
    root = flow.add(wf.step, "root")
    child = flow.add(wf.step, "child", after=[root])
    flow.enqueue()
    batch = Batch(on_finish=wf.batch_done)
    members = [batch.add(wf.step, f"member {i}") for i in range(2)]
    batch.enqueue()
    plain = make_jobs(3)
    stale = make_jobs(1)[0]
    stale_token = claim_token(stale)
    Job.objects.filter(id=stale).update(claim_token=uuid.uuid4())  # re-claimed elsewhere

    completions = [
        Completion(job_id, claim_token(job_id), "succeeded")
        for job_id in [plain[0], root.job_id, plain[1], *members, plain[2]]
    ]
    completions.append(Completion(stale, stale_token, "succeeded"))
    outcomes = Job.objects.complete_batch(completions)

    assert outcomes == [ClaimTransition.UPDATED] * 6 + [ClaimTransition.LOST]
    assert fresh(child.job_id).status == JobStatus.PENDING  # released by its root
    assert batch.counts()["succeeded"] == 2
    assert Job.objects.filter(task_name="wf.batch_done").count() == 1  # on_finish, once
    assert {fresh(job_id).status for job_id in plain} == {JobStatus.SUCCEEDED}
    assert fresh(stale).status == JobStatus.RUNNING


def test_a_member_that_retries_releases_nothing_until_it_succeeds() -> None:
    flow = Workflow("retrying root")
    root = flow.add(wf.step, "root")
    child = flow.add(wf.step, "child", after=[root])
    flow.enqueue()
    retry = Completion(
        root.job_id, claim_token(root.job_id), "retry", available_at=timezone.now(), message="x"
    )
    assert Job.objects.complete_batch([retry]) == [ClaimTransition.UPDATED]
    assert fresh(child.job_id).status == JobStatus.WAITING

    done = Completion(root.job_id, claim_token(root.job_id), "succeeded")
    assert Job.objects.complete_batch([done]) == [ClaimTransition.UPDATED]
    assert fresh(child.job_id).status == JobStatus.PENDING


@pytest.mark.only_on(
    "postgresql", reason="only PostgreSQL's completion statement says which jobs are members"
)
def test_a_batch_of_plain_jobs_runs_no_member_look_up(make_jobs: MakeJobs) -> None:
    node_table = WorkflowNode._meta.db_table
    plain = make_jobs(5)
    completions = [Completion(job_id, claim_token(job_id), "succeeded") for job_id in plain]

    with CaptureQueriesContext(connection) as captured:
        assert Job.objects.complete_batch(completions) == [ClaimTransition.UPDATED] * 5

    statements = [query["sql"] for query in captured.captured_queries]
    updates = [sql for sql in statements if "UPDATE" in sql]
    assert len(updates) == 1
    assert node_table in updates[0]  # the probe, in the update's RETURNING
    assert [sql for sql in statements if node_table in sql and sql not in updates] == []


@pytest.mark.only_on("postgresql", reason="the VALUES fallback with a member probe is PostgreSQL's")
def test_the_values_form_reports_members_too() -> None:
    from django_arcature.db.batch import _values_rows
    from django_arcature.transitions import transition_fields

    flow = Workflow("values form")
    member = flow.add(wf.step, "only")
    flow.enqueue()
    plain = Job.objects.enqueue_many("tests.noop", [()])[0].id
    rows = []
    for job_id in (member.job_id, plain):
        token = claim_token(job_id)
        rows.append((job_id, token, transition_fields(Completion(job_id, token, "succeeded"))))
    table = (WorkflowNode._meta.db_table, "job_id", WorkflowRun._meta.db_table)

    returned = {
        uuid.UUID(str(row[0])): row[1]
        for row in _values_rows(connection, Job, rows, typed=True, members=table)
    }

    assert returned == {member.job_id: True, plain: False}

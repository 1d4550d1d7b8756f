"""The node and edge rows a workflow or batch writes through the driver's bulk path.

``Workflow.enqueue()`` and ``Batch.enqueue()`` write their node and edge rows as
the nodes' job rows go (``COPY`` on PostgreSQL, multi-row ``INSERT`` on MariaDB),
from plain attribute bags, not through ``bulk_create``. These pin that every
column lands as the ORM would have stored it, that edge ids are the database's,
and that a refused row leaves nothing behind.
"""

from __future__ import annotations

import pytest
from django.db import IntegrityError, transaction

from django_arcature import Batch, Workflow
from django_arcature.models import Job, JobStatus
from django_arcature.workflows.models import WorkflowEdge, WorkflowNode, WorkflowRun
from tests.testapp import workflow_jobs as wf

pytestmark = pytest.mark.django_db(transaction=True)


def test_every_node_and_edge_column_is_stored() -> None:
    flow = Workflow("graph rows")
    root = flow.add(wf.step, "root")
    left = flow.add(wf.step, "left", after=[root])
    right = flow.add(wf.step, "right", after=[root], when="failed")
    join = flow.add(wf.step, "join", after=[left, right], when="always")
    leaf = flow.add(wf.step, "leaf", after=[join])
    flow.enqueue()
    run = WorkflowRun.objects.get()

    nodes = {node.job_id: node for node in WorkflowNode.objects.filter(workflow_id=run.id)}
    expected = {
        root.job_id: ("step", "succeeded", True),
        left.job_id: ("step-2", "succeeded", True),
        right.job_id: ("step-3", "failed", True),
        join.job_id: ("step-4", "always", True),
        leaf.job_id: ("step-5", "succeeded", False),
    }
    assert {
        job_id: (node.name, node.when, node.has_dependents) for job_id, node in nodes.items()
    } == expected
    assert all(node.batch_id is None and node.cancelled_by is None for node in nodes.values())

    edges = list(WorkflowEdge.objects.filter(workflow_id=run.id).order_by("id"))
    assert {(e.upstream_id, e.downstream_id, e.when, e.sole, e.state) for e in edges} == {
        (root.job_id, left.job_id, "succeeded", True, "open"),
        (root.job_id, right.job_id, "failed", True, "open"),
        (left.job_id, join.job_id, "always", False, "open"),
        (right.job_id, join.job_id, "always", False, "open"),
        (join.job_id, leaf.job_id, "succeeded", True, "open"),
    }
    ids = [edge.id for edge in edges]
    assert all(isinstance(edge_id, int) for edge_id in ids)
    assert len(set(ids)) == len(ids)

    # A second workflow's edges get ids of their own, after the first's.
    again = Workflow("graph rows, again")
    first = again.add(wf.step, "a")
    again.add(wf.step, "b", after=[first])
    again.enqueue()
    later = WorkflowEdge.objects.exclude(workflow_id=run.id).get()
    assert later.id > max(ids)


def test_batch_members_added_in_two_transactions_are_stored_as_members() -> None:
    batch = Batch(on_finish=wf.batch_note, name="rows")
    first = [batch.add(wf.step, f"row {n}") for n in range(3)]
    batch.enqueue(close=False)
    assert batch.id is not None
    later = Batch.open(batch.id)
    second = [later.add(wf.step, f"late {n}") for n in range(2)]
    later.enqueue()

    members = WorkflowNode.objects.filter(batch_id=batch.id)
    assert sorted(node.job_id for node in members) == sorted(first + second)
    assert {(node.name, node.when, node.has_dependents) for node in members} == {
        ("step", "succeeded", False)
    }
    assert all(node.workflow_id is None and node.cancelled_by is None for node in members)
    assert set(Job.objects.filter(id__in=first + second).values_list("status", flat=True)) == {
        JobStatus.PENDING
    }


def test_a_refused_node_row_leaves_nothing_of_the_workflow() -> None:
    taken = Workflow("first")
    held = taken.add(wf.step, "root")
    taken.enqueue()

    flow = Workflow("second")
    flow.add(wf.step, "root")
    # The first workflow's job id again: its job row (and node row) are refused.
    flow.nodes[0].job_id = held.job_id
    before = (Job.objects.count(), WorkflowNode.objects.count(), WorkflowRun.objects.count())
    with pytest.raises(IntegrityError), transaction.atomic():
        flow.enqueue()
    after = (Job.objects.count(), WorkflowNode.objects.count(), WorkflowRun.objects.count())
    assert after == before


def test_text_with_copy_control_characters_is_stored_as_given() -> None:
    import uuid
    from types import SimpleNamespace

    from django_arcature.manager.workflow_writes import insert_graph_rows

    run = WorkflowRun.objects.create(name="escapes", node_count=3)
    names = ["tab\there", "back\\slash \\N", "new\nline\r", "plain é 字"]
    rows = [
        SimpleNamespace(
            job_id=uuid.uuid4(),
            workflow_id=run.id,
            batch_id=None,
            name=name,
            when="always",
            has_dependents=index % 2 == 0,
            cancelled_by=None,
            open_upstreams=0,
        )
        for index, name in enumerate(names)
    ]
    insert_graph_rows("default", WorkflowNode, rows, varying=("job_id", "name", "has_dependents"))
    stored = {node.job_id: node for node in WorkflowNode.objects.filter(workflow_id=run.id)}
    assert {row.job_id: (row.name, row.has_dependents) for row in rows} == {
        job_id: (node.name, node.has_dependents) for job_id, node in stored.items()
    }
    assert {node.when for node in stored.values()} == {"always"}

"""Sole edges met but not written (issue 20): what readers see, and reruns of an upstream.

A completion that meets an edge which is the only one into its dependent
(``WorkflowEdge.sole``) leaves it stored ``open``; ``dependencies.edge_states``
derives ``met`` from the upstream's status. These tests hold every reader and every
path that makes a finished upstream live again to the same answer as a fan-in
edge (written ``met``) gives: the admin's graph, ``current_job().upstream()``,
retention, and an operator's requeue of a dead upstream, in a live workflow and
in a cancelled one. Every step goes through the real manager, the admin through
Django's test client.
"""

from __future__ import annotations

import re
import uuid
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db.models import Sum
from django.urls import reverse

from django_arcature import Workflow
from django_arcature.db import DatabaseNow
from django_arcature.manager import dependencies
from django_arcature.models import Job, JobStatus
from django_arcature.retention.prune import prune
from django_arcature.retention.rules import PruneRule
from django_arcature.testing import drain
from django_arcature.workflows.build import Node
from django_arcature.workflows.models import (
    EdgeState,
    WorkflowCounter,
    WorkflowEdge,
    WorkflowNode,
    WorkflowRun,
)
from tests.integration.test_admin_support import client_for, messages_of
from tests.testapp import workflow_jobs as wf

from .test_workflows import die, status, succeed

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def fast_passwords(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def run_of(flow: Workflow) -> WorkflowRun:
    assert flow.run is not None
    return WorkflowRun.objects.get(pk=flow.run.pk)


def states(flow: Workflow) -> dict[tuple[uuid.UUID, uuid.UUID], tuple[str, str]]:
    """Each edge (upstream, downstream) → (stored state, ``edge_states``'s)."""
    run = run_of(flow)
    derived = dependencies.edge_states("default", Job, run.id)
    return {
        (edge.upstream_id, edge.downstream_id): (edge.state, derived[edge.id])
        for edge in WorkflowEdge.objects.filter(workflow_id=run.id)
    }


def read(flow: Workflow, up: Node, down: Node) -> str:
    """The edge's state as readers get it (``edge_states``)."""
    return states(flow)[(up.job_id, down.job_id)][1]


def counted(flow: Workflow) -> tuple[int, int, int]:
    """(finished, dead, cancelled) summed over the workflow's counter shards."""
    sums = WorkflowCounter.objects.filter(workflow_id=run_of(flow).id).aggregate(
        finished=Sum("finished"), dead=Sum("dead"), cancelled=Sum("cancelled")
    )
    return int(sums["finished"] or 0), int(sums["dead"] or 0), int(sums["cancelled"] or 0)


def admin_requeue(admin: User, job_id: uuid.UUID) -> None:
    """The admin's "Requeue" action on the dead-job list, as an operator sends it."""
    response = client_for(admin).post(
        reverse("admin:django_arcature_deadjob_changelist"),
        {"action": "requeue_jobs", "_selected_action": [str(job_id)], "index": "0"},
        follow=True,
    )
    assert response.status_code == 200
    assert messages_of(response) == ["Requeued 1 job."]


def drawn_edges(admin: User, flow: Workflow) -> list[str]:
    """The status class of each edge the workflow page's graph draws, in edge order."""
    url = reverse("admin:django_arcature_workflowrun_change", args=[run_of(flow).pk])
    page = client_for(admin).get(url)
    assert page.status_code == 200
    return re.findall(r'class="arcature-edge arcature-edge-(\w+)"', page.content.decode())


# --- readers ------------------------------------------------------------------------


def test_readers_of_a_finished_fan_out_root_and_chain_see_its_sole_edges_met(
    admin_user: User,
) -> None:
    """1 → 3 fan-out and a chain a → b: every edge is sole; once the roots succeed
    each is stored ``open`` and read ``met``. The admin's graph draws each edge by its
    upstream's status (never the stored state), retention keeps the finished roots
    of the live workflow, ``upstream()`` still gives each dependent its root's
    result, and the finished workflow is pruned whole."""
    flow = Workflow("sole readers")
    root = flow.add(wf.step, "root")
    leaves = [flow.add(wf.gather, f"leaf {i}", after=[root]) for i in range(3)]
    a = flow.add(wf.step, "a")
    b = flow.add(wf.gather, "b", after=[a])
    flow.enqueue()
    assert drawn_edges(admin_user, flow) == ["pending"] * 4
    assert set(states(flow).values()) == {(EdgeState.OPEN, EdgeState.OPEN)}

    succeed(root.job_id, "root result")
    succeed(a.job_id, "a result")
    assert [status(n) for n in (*leaves, b)] == ["pending"] * 4
    assert set(states(flow).values()) == {(EdgeState.OPEN, EdgeState.MET)}  # stored, read
    assert drawn_edges(admin_user, flow) == ["succeeded"] * 4  # the upstream's status

    rules = [PruneRule("succeeded", timedelta(days=7))]
    age = Job.objects.exclude(finished_at=None)
    age.update(finished_at=DatabaseNow(-10 * 86400))
    assert [result.deleted for result in prune(rules, "default")] == [0]  # a live workflow
    assert set(states(flow).values()) == {(EdgeState.OPEN, EdgeState.MET)}

    drain()
    names = dict(WorkflowNode.objects.values_list("job_id", "name"))
    for node, up, result in [*((leaf, root, "root result") for leaf in leaves), (b, a, "a result")]:
        job = Job.objects.get(pk=node.job_id)
        assert job.status == JobStatus.SUCCEEDED
        assert isinstance(job.result, dict)
        assert job.result["upstream"] == {names[up.job_id]: result}
    assert set(states(flow).values()) == {(EdgeState.OPEN, EdgeState.MET)}
    assert (run_of(flow).outcome, counted(flow)) == ("succeeded", (6, 0, 0))

    age.update(finished_at=DatabaseNow(-10 * 86400))
    assert [result.deleted for result in prune(rules, "default")] == [6]
    assert not WorkflowEdge.objects.exists()
    assert not WorkflowRun.objects.exists()


# --- an operator reruns a finished upstream -------------------------------------------
#
# Only a dead job can be requeued (the admin's "Requeue" action, the dead-job list,
# ``Job.objects.requeue_dead``, a workflow's "Resume", which requeues its dead nodes):
# a succeeded or cancelled one never becomes pending again. What a rerun of a dead
# upstream SHOULD do to a dependent its death released, and that ran: nothing. The
# dependent is not cancelled, not released again and not counted again, whatever
# the rerun's outcome; the edge stays ``met``. A sole edge and a fan-in edge behave
# the same; the fan-in's is the reference (it was always written ``met``).


def build(kind: str) -> tuple[Workflow, Node, Node, list[Node]]:
    """A dies → R (``when="failed"``) released. ``sole``: A → R. ``fan-in``: A, B → R
    (B dies first). Returns the workflow, A, R, and the other nodes."""
    flow = Workflow(f"rerun {kind}")
    a = flow.add(wf.step, "a")
    others = [flow.add(wf.step, "b")] if kind == "fan-in" else []
    r = flow.add(wf.step, "r", after=[a, *others], when="failed")
    flow.enqueue()
    for node in others:
        die(node.job_id)
    assert status(r) == "waiting"
    die(a.job_id)
    assert status(r) == "pending"
    succeed(r.job_id, "r ran")
    assert run_of(flow).outcome == "failed"
    return flow, a, r, others


def left_alone(r: Node) -> bool:
    """R ran once and is as it ended: succeeded, one attempt, its result."""
    job = Job.objects.get(pk=r.job_id)
    return (job.status, job.attempts, job.result) == (JobStatus.SUCCEEDED, 1, "r ran")


@pytest.mark.parametrize("again", ["dies", "succeeds"])
@pytest.mark.parametrize("kind", ["sole", "fan-in"])
def test_a_rerun_of_a_dead_upstream_leaves_the_dependent_it_released_alone(
    admin_user: User, kind: str, again: str
) -> None:
    flow, a, r, others = build(kind)
    nodes = 2 + len(others)
    assert read(flow, a, r) == EdgeState.MET
    admin_requeue(admin_user, a.job_id)
    assert status(a) == "pending"
    assert left_alone(r)
    assert states(flow)[(a.job_id, r.job_id)] == (EdgeState.MET, EdgeState.MET)
    assert run_of(flow).outcome == ""  # in progress again: a node lives
    assert counted(flow) == (nodes - 1, len(others), 0)

    (die if again == "dies" else succeed)(a.job_id)
    assert left_alone(r)
    assert states(flow)[(a.job_id, r.job_id)] == (EdgeState.MET, EdgeState.MET)
    assert not Job.objects.filter(status__in=[JobStatus.PENDING, JobStatus.WAITING]).exists()
    dead = len(others) + (again == "dies")
    assert counted(flow) == (nodes, dead, 0)  # each node once
    assert run_of(flow).outcome == ("failed" if dead else "succeeded")


@pytest.mark.parametrize("kind", ["sole", "fan-in"])
def test_a_rerun_in_a_cancelled_workflow_keeps_the_met_edge_met(
    admin_user: User, kind: str
) -> None:
    """A cancelled workflow stays cancelled: only the requeued job runs again
    (``resume`` returns early). The edge its death met must still read ``met``
    while it runs and after it succeeds, as a fan-in edge does."""
    flow, a, r, _ = build(kind)
    assert Job.objects.cancel_workflow(run_of(flow).id) == 0  # nothing left to stop
    admin_requeue(admin_user, a.job_id)
    assert status(a) == "pending"
    assert read(flow, a, r) == EdgeState.MET
    succeed(a.job_id)
    assert left_alone(r)
    assert states(flow)[(a.job_id, r.job_id)] == (EdgeState.MET, EdgeState.MET)
    run = run_of(flow)
    assert (run.outcome, run.cancelled_at is not None) == ("failed", True)


def test_marking_reads_back_only_the_edges_it_decided() -> None:
    """After a rerun of A, its edges into dependents its death released are ``met``
    (written by the requeue); A's next completion decides only the edge still open
    (into F, which waits on B too). The cascade's read of open edges names F alone:
    not the released R and S again (MariaDB's read-back took every decided edge of
    A), and F's count of open edges is two again (A lives, B has not run)."""
    flow = Workflow("read back")
    a = flow.add(wf.step, "a")
    r = flow.add(wf.step, "r", after=[a], when="failed")
    s = flow.add(wf.step, "s", after=[a], when="always")
    b = flow.add(wf.step, "b")
    f = flow.add(wf.step, "f", after=[a, b], when="always")
    flow.enqueue()
    die(a.job_id)
    assert [status(n) for n in (r, s, f)] == ["pending", "pending", "waiting"]
    succeed(r.job_id, "r ran")
    succeed(s.job_id)
    assert Job.objects.requeue_dead(a.job_id) == 1
    assert {pair: st[0] for pair, st in states(flow).items()} == {
        (a.job_id, r.job_id): EdgeState.MET,
        (a.job_id, s.job_id): EdgeState.MET,
        (a.job_id, f.job_id): EdgeState.OPEN,
        (b.job_id, f.job_id): EdgeState.OPEN,
    }
    read = dependencies._open_edges("default", [a.job_id])
    assert [row[:5] for row in read] == [(f.job_id, run_of(flow).id, False, "always", 1)]
    assert WorkflowNode.objects.get(job_id=f.job_id).open_upstreams == 2

    succeed(a.job_id)
    assert [status(n) for n in (r, s, f)] == ["succeeded", "succeeded", "waiting"]
    succeed(b.job_id)
    succeed(f.job_id)
    assert left_alone(r)
    assert {derived for _, derived in states(flow).values()} == {EdgeState.MET}
    assert (run_of(flow).outcome, counted(flow)) == ("succeeded", (5, 0, 0))

"""The workflow and batch gauges: in progress and finished by outcome, from their own rows.

A scrape must not scan nodes: the gauges read the ``outcome`` of the workflow and
batch rows (the statements are captured and checked), so a workflow of 10,000
nodes costs a scrape what a workflow of one does.
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from django_arcature import Batch, Workflow
from django_arcature.contrib import prometheus
from django_arcature.contrib.prometheus.collector import QueueCollector
from django_arcature.models import Job
from django_arcature.workflows.build import Node
from django_arcature.workflows.models import WorkflowEdge, WorkflowNode
from tests.integration.test_workflows import die, succeed
from tests.testapp import workflow_jobs as wf

from .test_prometheus import parse, value

pytestmark = pytest.mark.django_db(transaction=True)


def two_step(label: str) -> tuple[Workflow, list[Node]]:
    flow = Workflow(label)
    a = flow.add(wf.step, "a")
    b = flow.add(wf.step, "b", after=[a])
    flow.enqueue()
    return flow, [a, b]


def test_gauges_count_each_outcome_without_reading_nodes() -> None:
    make_runs()
    collector = QueueCollector(sample_seconds=0)
    node_tables = (WorkflowNode._meta.db_table, WorkflowEdge._meta.db_table, Job._meta.db_table)
    with CaptureQueriesContext(connection) as queries:
        sample = collector.sample()
    assert sample is not None
    assert sample.runs["workflows"] == {
        "": 2,
        "succeeded": 1,
        "failed": 1,
        "cancelled": 1,
    }
    assert sample.runs["batches"] == {"": 1, "succeeded": 1, "failed": 1, "cancelled": 1}
    run_queries = [
        q["sql"]
        for q in queries.captured_queries
        if "workflowrun" in q["sql"] or "batchrun" in q["sql"]
    ]
    assert len(run_queries) == 8  # one bounded count per kind and outcome
    for sql in run_queries:
        assert not any(table in sql for table in node_tables), sql


def make_runs() -> None:
    two_step("open 1")
    two_step("open 2")
    _, (a, b) = two_step("done")
    succeed(a.job_id)
    succeed(b.job_id)
    _, (a, _b) = two_step("broken")
    die(a.job_id)
    flow, _ = two_step("stopped")
    flow.cancel()
    for fate in ("open", "ok", "dead", "cancel"):
        batch = Batch(on_finish=wf.batch_done)
        member = batch.add(wf.step, fate)
        batch.enqueue()
        if fate == "ok":
            succeed(member)
        elif fate == "dead":
            die(member)
        elif fate == "cancel":
            batch.cancel()


def test_the_scrape_shows_them_and_a_requeue_moves_a_workflow_back(client: Client) -> None:
    prometheus.install()
    try:
        _, (a, _b) = two_step("broken")
        die(a.job_id)
        prometheus.registry.queue_collector().sample_seconds = 0
        samples = parse(client.get("/metrics").content.decode())
        assert value(samples, "arcature_workflows_finished", outcome="failed") == 1
        assert value(samples, "arcature_workflows_in_progress") == 0
        assert Job.objects.requeue_dead(a.job_id) == 1
        samples = parse(client.get("/metrics").content.decode())
        assert value(samples, "arcature_workflows_finished", outcome="failed") == 0
        assert value(samples, "arcature_workflows_in_progress") == 1
        assert value(samples, "arcature_batches_in_progress") == 0
    finally:
        prometheus.uninstall()

"""``current_job().upstream()`` is bounded: ``ARCATURE["UPSTREAM_MAX_BYTES"]`` (issue 20).

A fan-in over many large results would otherwise load them all into the dependent's
memory on every attempt. Only the setting's validation had a test; these drive the
bound itself through the real manager, on every database.
"""

from __future__ import annotations

import pytest
from django.test import override_settings

from django_arcature import Workflow
from django_arcature.models import Job, JobStatus
from django_arcature.testing import drain
from django_arcature.workflows.build import Node
from tests.testapp import workflow_jobs as wf

from .conftest import fresh

pytestmark = pytest.mark.django_db(transaction=True)

#: The smallest limit the setting accepts.
LIMIT = 1024


def fan_in(label_size: int) -> Node:
    """Two upstream nodes whose results are labels of ``label_size`` characters, gathered."""
    flow = Workflow("big results")
    a = flow.add(wf.step, "a" * label_size)
    b = flow.add(wf.step, "b" * label_size)
    gathered = flow.add(wf.gather, "G", after=[a, b])
    flow.enqueue()
    return gathered


def test_upstream_results_over_the_limit_fail_the_dependent_naming_the_setting() -> None:
    # Each JSON-encoded result is 602 bytes: one fits, the two together (1,204) do not.
    gathered = fan_in(600)
    with override_settings(ARCATURE={"UPSTREAM_MAX_BYTES": LIMIT}):
        drain()
    job = fresh(gathered.job_id)
    assert job.status == JobStatus.DEAD
    assert "UPSTREAM_MAX_BYTES" in job.last_error
    assert job.result is None


def test_upstream_results_at_the_limit_reach_the_dependent() -> None:
    # 2 x (510 + 2 quotes) = 1,024 bytes: exactly the limit, which is allowed.
    gathered = fan_in(510)
    with override_settings(ARCATURE={"UPSTREAM_MAX_BYTES": LIMIT}):
        drain()
    job = fresh(gathered.job_id)
    assert job.status == JobStatus.SUCCEEDED, list(
        Job.objects.values_list("task_name", "status", "last_error")
    )
    assert job.result == {"label": "G", "upstream": {"step": "a" * 510, "step-2": "b" * 510}}

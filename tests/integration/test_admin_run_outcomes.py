"""The workflow and batch lists say how each run ended, and filter by it, on every database.

A new user's first look after a failure: which workflows failed? Without the outcome
in the list, every workflow's page had to be opened.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from django_arcature import Batch, Workflow
from django_arcature.testing import drain
from tests.integration.test_admin_support import client_for, staff
from tests.testapp import workflow_jobs as wf

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def fast_passwords(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def viewer() -> Client:
    return client_for(staff("viewer", "view_job"))


def rows(html: str) -> dict[str, str]:
    """Each result row's first cell (the run's name) and its outcome cell's text."""
    found = {}
    for row in re.findall(r"<tr>(.*?)</tr>", html, flags=re.S):
        name = re.search(r'<th class="field-(?:name|__str__)[^"]*">(.*?)</th>', row, re.S)
        outcome = re.search(r'<td class="field-outcome[^"]*">(.*?)</td>', row, re.S)
        if name and outcome:
            found[re.sub(r"<[^>]+>", "", name.group(1)).strip()] = outcome.group(1).strip()
    return found


def test_the_workflow_list_shows_each_outcome_and_filters_the_failed() -> None:
    for name, task in (("ok flow", wf.step), ("bad flow", wf.boom)):
        flow = Workflow(name)
        flow.add(wf.step, "after", after=[flow.add(task, "first")])
        flow.enqueue()
    drain()
    live = Workflow("live flow")
    live.add(wf.step, "first")
    live.enqueue()
    listing = reverse("admin:django_arcature_workflowrun_changelist")
    client = viewer()
    page = client.get(listing)
    assert page.status_code == 200
    assert rows(page.content.decode()) == {
        "ok flow": "succeeded",
        "bad flow": "failed",
        "live flow": "in progress",
    }
    failed = client.get(listing, {"outcome__exact": "failed"})
    assert failed.status_code == 200
    assert rows(failed.content.decode()) == {"bad flow": "failed"}


def test_the_batch_list_shows_each_outcome_and_filters_the_failed() -> None:
    for name, task in (("ok batch", wf.step), ("bad batch", wf.boom)):
        batch = Batch(name=name, on_finish=wf.batch_done)
        batch.add(task, "member")
        batch.enqueue()
    drain()
    listing = reverse("admin:django_arcature_batchrun_changelist")
    client = viewer()
    page = client.get(listing)
    assert page.status_code == 200
    assert rows(page.content.decode()) == {"ok batch": "succeeded", "bad batch": "failed"}
    failed = client.get(listing, {"outcome__exact": "failed"})
    assert rows(failed.content.decode()) == {"bad batch": "failed"}


def outcome_cell(html: str) -> str:
    found = re.search(r'<td id="arcature-run-outcome">(.*?)</td>', html, re.S)
    return found.group(1).strip() if found else "(no outcome on the page)"


def test_a_workflows_page_and_a_batchs_page_say_how_it_ended() -> None:
    flow = Workflow("bad flow")
    flow.add(wf.step, "after", after=[flow.add(wf.boom, "first")])
    flow.enqueue()
    batch = Batch(name="ok batch")
    batch.add(wf.step, "member")
    batch.enqueue()
    client = viewer()
    workflow_page = reverse("admin:django_arcature_workflowrun_change", args=[flow.id])
    batch_page = reverse("admin:django_arcature_batchrun_change", args=[batch.id])
    assert outcome_cell(client.get(workflow_page).content.decode()) == "in progress"
    assert outcome_cell(client.get(batch_page).content.decode()) == "in progress"
    drain()
    assert outcome_cell(client.get(workflow_page).content.decode()) == "failed"
    assert outcome_cell(client.get(batch_page).content.decode()) == "succeeded"

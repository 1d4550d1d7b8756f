"""The workflow and batch pages in a real headless Chromium: the graph is drawn, the
progress bar shows, the cancel buttons work, and hostile names stay text.

Screenshots go to a temporary directory, or to ``docs/screenshots/`` with
``ARCATURE_SAVE_SCREENSHOTS=1``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User

from django_arcature import Batch, Workflow
from django_arcature.models import Job, JobStatus
from django_arcature.transitions import ClaimTransition
from tests.browser.test_admin_browser import PASSWORD, browser, login, screenshot
from tests.browser.test_admin_xss import assert_nothing_ran
from tests.testapp import workflow_jobs as wf

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

__all__ = ["browser"]  # the fixture, imported for this module's tests


def finish(job_id: Any, dead: bool = False) -> None:
    claimed = Job.objects.claim_job(job_id, "web-1:4711", 60)
    assert claimed is not None
    if dead:
        outcome = Job.objects.mark_dead(job_id, claimed.claim_token, "permanent", "card declined")
    else:
        outcome = Job.objects.mark_succeeded(job_id, claimed.claim_token, "ok")
    assert outcome is ClaimTransition.UPDATED


def order_workflow() -> tuple[Workflow, dict[str, Any]]:
    """The issue's order fulfilment, part way through: charged, picking, one pick running."""
    flow = Workflow("fulfil order", key="order-1042")
    charge = flow.add(wf.step, "charge")
    picks = [flow.add(wf.step, f"pick {i}", after=[charge]) for i in range(4)]
    ship = flow.add(wf.gather, "ship", after=picks)
    flow.add(wf.record, "/dev/null", "receipt", after=[ship])
    flow.add(wf.boom, "refund", after=[charge], when="failed")
    flow.enqueue()
    finish(charge.job_id)
    finish(picks[0].job_id)
    finish(picks[1].job_id)
    Job.objects.claim_job(picks[2].job_id, "web-2:4712", 60)
    return flow, {"charge": charge, "picks": picks, "ship": ship}


def test_workflow_and_batch_pages_draw_and_cancel(
    browser: Any, live_server: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    User.objects.create_superuser("operator", "ops@example.com", PASSWORD)
    flow, nodes = order_workflow()
    assert flow.run is not None
    wait = WebDriverWait(browser, 15)
    page = f"/admin/django_arcature/workflowrun/{flow.run.pk}/change/"
    login(browser, live_server.url, page)
    graph = wait.until(
        expected_conditions.presence_of_element_located((By.ID, "arcature-workflow-graph"))
    )
    boxes = graph.find_elements(By.CSS_SELECTOR, "a.arcature-node")
    assert len(boxes) == 8
    assert all(box.find_element(By.TAG_NAME, "rect").size["width"] > 100 for box in boxes)
    states = sorted(
        element.text for element in graph.find_elements(By.CSS_SELECTOR, ".arcature-node-state")
    )
    assert states == sorted(
        ["succeeded"] * 3 + ["running", "pending", "waiting", "waiting", "cancelled"]
    )
    assert len(graph.find_elements(By.CSS_SELECTOR, "path.arcature-edge")) == 10
    # The text is readable: the admin's body colour, not the quiet grey.
    fill = browser.execute_script(
        "return getComputedStyle(arguments[0]).fill",
        graph.find_element(By.CSS_SELECTOR, ".arcature-node-state"),
    )
    assert fill == "rgb(51, 51, 51)"  # --body-fg in the light theme
    screenshot(browser, tmp_path, "workflow.png")

    # A node links to its job's page.
    charge = nodes["charge"]
    graph.find_element(By.CSS_SELECTOR, f'a.arcature-node[data-job="{charge.job_id}"]').click()
    wait.until(lambda driver: f"/job/{charge.job_id}/change/" in driver.current_url)
    browser.back()

    wait.until(expected_conditions.presence_of_element_located((By.ID, "arcature-cancel-reason")))
    browser.find_element(By.ID, "arcature-cancel-reason").send_keys("customer cancelled")
    browser.find_element(By.CSS_SELECTOR, "#arcature-cancel-form button").click()
    message = wait.until(
        expected_conditions.presence_of_element_located((By.CSS_SELECTOR, ".messagelist .success"))
    )
    assert message.text.startswith("Cancelled the workflow: 4 jobs cancelled")
    statuses = [Job.objects.get(pk=p.job_id).status for p in nodes["picks"]]
    assert statuses == ["succeeded", "succeeded", "cancelled", "cancelled"]
    assert "customer cancelled" in Job.objects.get(pk=nodes["ship"].job_id).last_error
    assert not browser.find_elements(By.ID, "arcature-cancel-form")  # nothing left to cancel

    batch = Batch(on_success=wf.batch_done, on_finish=wf.batch_done, name="nightly import")
    members = [batch.add(wf.step, f"row {i}") for i in range(8)]
    batch.enqueue()
    assert batch.run is not None
    for job_id in members[:4]:
        finish(job_id)
    finish(members[4], dead=True)
    browser.get(f"{live_server.url}/admin/django_arcature/batchrun/{batch.run.pk}/change/")
    progress = wait.until(
        expected_conditions.presence_of_element_located((By.ID, "arcature-progress"))
    )
    assert progress.get_attribute("value") == "5"
    assert progress.get_attribute("max") == "8"
    assert progress.size["width"] > 300
    assert "5 of 8 finished (62%)" in browser.find_element(By.ID, "arcature-batch-progress").text
    screenshot(browser, tmp_path, "batch.png")
    browser.find_element(By.CSS_SELECTOR, "#arcature-cancel-form button").click()
    message = wait.until(
        expected_conditions.presence_of_element_located((By.CSS_SELECTOR, ".messagelist .success"))
    )
    assert message.text.startswith("Cancelled the batch: 3 jobs cancelled")
    assert batch.counts() == {"total": 8, "succeeded": 4, "dead": 1, "cancelled": 3, "pending": 0}
    assert not Job.objects.filter(task_name="wf.batch_done").exists()
    assert Job.objects.filter(pk__in=members, status=JobStatus.CANCELLED).count() == 3


HOSTILE = "XSS-MARK<script>window.__pwned='s';document.title='PWNED'</script>"
BREAKOUT = "\"><svg onload=\"window.__pwned='svg';document.title='PWNED'\">"


@pytest.mark.heavy
# Escaping is the templates' (the SVG graph is drawn on the server): the database
# only stores the names, which test_workflow_and_batch_pages_draw_and_cancel reads
# back on every database.
@pytest.mark.only_on("sqlite", reason="escaping depends on the templates, not the database")
def test_hostile_workflow_text_never_runs(browser: Any, live_server: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from django_arcature.workflows.models import BatchRun, WorkflowNode

    User.objects.create_superuser("operator", "ops@example.com", PASSWORD)
    flow = Workflow(f"{HOSTILE}{BREAKOUT}", key=f"{HOSTILE}{BREAKOUT}")
    first = flow.add(wf.step, "a")
    second = flow.add(wf.step, "b", after=[first])
    flow.enqueue()
    assert flow.run is not None
    WorkflowNode.objects.filter(job_id=first.job_id).update(name=f"{HOSTILE}{BREAKOUT}")
    Job.objects.filter(pk=second.job_id).update(task_name=f"{HOSTILE}{BREAKOUT}")
    batch = Batch(on_finish=wf.batch_done, name=f"{HOSTILE}{BREAKOUT}")
    batch.add(wf.step, "x")
    batch.enqueue()
    assert batch.run is not None
    BatchRun.objects.filter(pk=batch.run.pk).update(on_finish=f"{HOSTILE}{BREAKOUT}")
    Job.objects.cancel_workflow(flow.run.id, reason=f"{HOSTILE}{BREAKOUT}")

    base = live_server.url
    login(browser, base, "/admin/")
    pages = {
        "workflow list": "/admin/django_arcature/workflowrun/",
        "workflow page": f"/admin/django_arcature/workflowrun/{flow.run.pk}/change/",
        "batch list": "/admin/django_arcature/batchrun/",
        "batch page": f"/admin/django_arcature/batchrun/{batch.run.pk}/change/",
    }
    for where, path in pages.items():
        browser.get(base + path)
        WebDriverWait(browser, 15).until(lambda d: d.find_elements(By.ID, "content"))
        assert_nothing_ran(browser, where)
        assert "XSS-MARK" in browser.find_element(By.TAG_NAME, "body").text, where
    browser.get(base + pages["workflow page"])
    graph = browser.find_element(By.ID, "arcature-workflow-graph")
    names = [e.text for e in graph.find_elements(By.CSS_SELECTOR, ".arcature-node-name")]
    assert any(name.startswith("XSS-MARK<script>") for name in names), names

"""The workflow and batch pages: graph, node table, progress, cancel and resume, on every database.

Every workflow is built and finished through the real manager (claim, fenced
completion, cancel, requeue); the pages are fetched through the admin with a
real session, and each POST is checked against the rows it should (or should
not) have changed.
"""

from __future__ import annotations

import functools
import re
import threading
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from django_arcature import Batch, Workflow
from django_arcature.admin.workflow_graph import longest_path_layers
from django_arcature.models import Job
from django_arcature.transitions import ClaimTransition
from django_arcature.workflows.build import Node
from django_arcature.workflows.models import BatchRun, WorkflowRun
from tests.integration.test_admin_support import client_for, messages_of, staff
from tests.testapp import workflow_jobs as wf

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def fast_passwords(settings: Any) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def status(job_id: uuid.UUID) -> str:
    return Job.objects.get(pk=job_id).status


def claim(job_id: uuid.UUID, worker: str = "w1") -> uuid.UUID:
    claimed = Job.objects.claim_job(job_id, worker, 60)
    assert claimed is not None, f"{job_id} was not claimable ({status(job_id)})"
    return claimed.claim_token


def succeed(job_id: uuid.UUID) -> None:
    assert Job.objects.mark_succeeded(job_id, claim(job_id), "ok") is ClaimTransition.UPDATED


def die(job_id: uuid.UUID, message: str = "boom") -> None:
    token = claim(job_id)
    assert Job.objects.mark_dead(job_id, token, "permanent", message) is ClaimTransition.UPDATED


def diamond(name: str = "diamond", key: str | None = None) -> tuple[Workflow, list[Node]]:
    flow = Workflow(name, key=key)
    a = flow.add(wf.step, "a")
    b = flow.add(wf.step, "b", after=[a])
    c = flow.add(wf.step, "c", after=[a])
    d = flow.add(wf.step, "d", after=[b, c])
    flow.enqueue()
    return flow, [a, b, c, d]


def page_url(run: Any) -> str:
    model = "workflowrun" if isinstance(run, WorkflowRun) else "batchrun"
    return reverse(f"admin:django_arcature_{model}_change", args=[run.pk])


def button_url(run: Any, name: str) -> str:
    model = "workflowrun" if isinstance(run, WorkflowRun) else "batchrun"
    return reverse(f"admin:django_arcature_{model}_{name}", args=[run.pk])


def operator(*codenames: str) -> Client:
    return client_for(staff(f"op-{uuid.uuid4().hex[:8]}", *codenames))


def full() -> Client:
    return operator("view_job", "cancel_job", "requeue_job")


# --- the layout --------------------------------------------------------------------------


def test_longest_path_layers_put_a_node_after_its_deepest_upstream() -> None:
    edges = [("a", "b"), ("b", "c"), ("a", "c"), ("c", "d"), ("a", "e")]
    assert longest_path_layers(["a", "b", "c", "d", "e"], edges) == {
        "a": 0,
        "b": 1,
        "c": 2,
        "d": 3,
        "e": 1,
    }
    # Hand-made cycles (refused at build time) still end, every node placed once.
    assert set(longest_path_layers(["x", "y"], [("x", "y"), ("y", "x")])) == {"x", "y"}


# --- the workflow page -------------------------------------------------------------------


def test_the_workflow_page_draws_every_node_with_its_state_and_job_link() -> None:
    flow, (a, b, c, d) = diamond()
    succeed(a.job_id)
    die(b.job_id)
    assert flow.run is not None
    response = operator("view_job").get(page_url(flow.run))
    assert response.status_code == 200
    html = response.content.decode()
    start = html.index('<svg id="arcature-workflow-graph"')
    svg = html[start : html.index("</svg>", start)]
    for node in (a, b, c, d):
        link = reverse("admin:django_arcature_job_change", args=[node.job_id])
        assert f'href="{link}"' in svg
    # State as text in each box, not colour only; d was cancelled by b's death.
    states = re.findall(r'class="arcature-node-state">([^<]*)<', svg)
    assert sorted(states) == sorted(["succeeded", "dead", "pending", "cancelled"])
    assert status(c.job_id) == "pending"
    assert status(d.job_id) == "cancelled"
    # Layers: a in the first column, b and c in the second, d in the third.
    xs = {
        m.group(1): int(m.group(2))
        for m in re.finditer(
            r'data-job="([0-9a-f-]+)">\s*<title>[^<]*</title>\s*<rect x="(\d+)"', svg
        )
    }
    assert xs[str(a.job_id)] < xs[str(b.job_id)] == xs[str(c.job_id)] < xs[str(d.job_id)]
    assert svg.count('class="arcature-edge ') == 4
    assert 'role="group"' in svg
    assert '<title id="arcature-graph-title">' in svg
    counts = dict(re.findall(r'data-status="(\w+)">(?:<a[^>]*>)?(\d+)', html))
    assert counts == {
        "waiting": "0",
        "pending": "1",
        "running": "0",
        "succeeded": "1",
        "dead": "1",
        "cancelled": "1",
    }
    table = html[html.index('id="arcature-node-table"') :]
    assert table.count("<tr data-job=") == 4


def test_a_node_whose_job_was_pruned_still_shows() -> None:
    """No foreign key holds a node's job: one deleted by hand (prune keeps a live
    workflow's jobs, and deletes the node rows with the jobs it deletes) shows as gone."""
    flow, (a, b, _c, _d) = diamond()
    assert flow.run is not None
    succeed(a.job_id)
    assert Job.objects.prune(timedelta(0), statuses=["succeeded"]) == 0
    Job.objects.filter(id=a.job_id).delete()
    html = operator("view_job").get(page_url(flow.run)).content.decode()
    row = re.search(rf'<tr data-job="{a.job_id}">.*?</tr>', html, re.S)
    assert row is not None
    assert "pruned" in row.group(0)
    assert 'class="arcature-node arcature-node-pruned"' in html
    assert str(b.job_id) in html


def test_the_workflow_list_needs_the_permission_to_view_jobs() -> None:
    flow, _ = diamond()
    assert flow.run is not None
    listing = reverse("admin:django_arcature_workflowrun_changelist")
    assert operator().get(listing).status_code == 403
    assert operator().get(page_url(flow.run)).status_code == 403
    seen = operator("view_job").get(listing)
    assert seen.status_code == 200
    assert "diamond" in seen.content.decode()
    # Nothing is added, edited or deleted by hand.
    add = reverse("admin:django_arcature_workflowrun_add")
    assert full().get(add).status_code == 403
    assert full().post(page_url(flow.run), {"name": "x"}).status_code == 405
    delete = reverse("admin:django_arcature_workflowrun_delete", args=[flow.run.pk])
    assert full().post(delete, {"post": "yes"}).status_code == 403
    assert WorkflowRun.objects.filter(pk=flow.run.pk, name="diamond").exists()


def big_workflow(width: int) -> Workflow:
    """1 → width → 1, as the issue's fan-out/fan-in."""
    flow = Workflow(f"fan {width}")
    first = flow.add(wf.step, "first")
    middle = [flow.add(wf.step, f"m{i}", after=[first]) for i in range(width)]
    flow.add(wf.step, "last", after=middle)
    flow.enqueue()
    return flow


def queries_for(client: Client, url: str) -> int:
    client.get(url)  # warm the session and content-type caches
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert response.status_code == 200
    return len(captured)


def test_the_workflow_page_query_count_does_not_grow_with_its_nodes() -> None:
    client = operator("view_job")
    small, medium, large = big_workflow(3), big_workflow(600), big_workflow(1_500)
    assert small.run is not None
    assert medium.run is not None
    assert large.run is not None
    few = queries_for(client, page_url(small.run))
    more = queries_for(client, page_url(medium.run))
    many = queries_for(client, page_url(large.run))
    # A small workflow reads all its nodes (one query more, to draw nodes without edges).
    assert many == more <= few, (few, more, many)
    html = client.get(page_url(large.run)).content.decode()
    drawn = int(re.search(r'data-drawn="(\d+)"', html).group(1))  # type: ignore[union-attr]
    assert 0 < drawn <= 256  # a bounded drawing...
    assert "more nodes" in html  # ...that says what it leaves out
    assert "nodes are not drawn: the table below lists every node" in html
    # The table pages through all 1,502 nodes, 50 at a time.
    assert "Page 1 of 31" in html
    last = client.get(page_url(large.run), {"page": "31"}).content.decode()
    assert last.count("<tr data-job=") == 1502 - 30 * 50
    waiting = client.get(page_url(large.run), {"status": "waiting"}).content.decode()
    assert "1501 jobs, waiting" in waiting


# --- cancel and resume -------------------------------------------------------------------


def test_cancel_cancels_waiting_pending_and_running_nodes_and_fences_the_worker() -> None:
    flow, (a, b, c, d) = diamond()
    assert flow.run is not None
    succeed(a.job_id)
    token = claim(b.job_id)  # running
    client = full()
    response = client.post(button_url(flow.run, "cancel"), {"reason": "customer left"})
    assert response.status_code == 302
    assert [status(n.job_id) for n in (a, b, c, d)] == [
        "succeeded",
        "cancelled",
        "cancelled",
        "cancelled",
    ]
    assert "customer left" in Job.objects.get(pk=d.job_id).last_error
    # The running node's worker is fenced out: its completion lands nowhere.
    assert Job.objects.mark_succeeded(b.job_id, token, "late") is ClaimTransition.LOST
    assert status(d.job_id) == "cancelled"
    follow = client.get(response["Location"])
    assert "Cancelled the workflow: 3 jobs cancelled" in " ".join(messages_of(follow))
    assert LogEntry.objects.filter(object_id=str(flow.run.pk)).count() == 1
    # A second click changes nothing and says so.
    again = client.post(button_url(flow.run, "cancel"), follow=True)
    assert "already cancelled" in " ".join(messages_of(again))
    assert WorkflowRun.objects.get(pk=flow.run.pk).cancelled_at is not None


def test_resume_requeues_dead_nodes_and_a_second_click_is_a_no_op() -> None:
    flow, (a, b, c, d) = diamond()
    assert flow.run is not None
    succeed(a.job_id)
    die(b.job_id)
    assert status(d.job_id) == "cancelled"
    client = full()
    page = client.get(page_url(flow.run)).content.decode()
    assert 'id="arcature-resume-form"' in page
    first = client.post(button_url(flow.run, "resume"), follow=True)
    assert "Requeued 1 dead job" in " ".join(messages_of(first))
    assert (status(b.job_id), status(d.job_id)) == ("pending", "waiting")
    second = client.post(button_url(flow.run, "resume"), follow=True)
    assert "Nothing to resume" in " ".join(messages_of(second))
    assert (status(b.job_id), status(d.job_id)) == ("pending", "waiting")
    succeed(b.job_id)
    succeed(c.job_id)
    assert status(d.job_id) == "pending"  # released once, by the last upstream


def test_resume_leaves_dead_a_node_whose_unique_key_a_live_job_holds() -> None:
    flow = Workflow("unique")
    node = flow.add("tests.unique_echo", "v")
    after = flow.add(wf.step, "after", after=[node])
    flow.enqueue()
    assert flow.run is not None
    die(node.job_id)
    assert status(after.job_id) == "cancelled"
    holder = Job.objects.enqueue("tests.unique_echo", args=["v"])  # the same work, live
    response = full().post(button_url(flow.run, "resume"), follow=True)
    assert "1 dead job stays dead: a live job holds its unique key." in " ".join(
        messages_of(response)
    )
    assert (status(node.job_id), status(after.job_id)) == ("dead", "cancelled")
    assert status(holder.pk) == "pending"


def test_a_cancelled_workflow_is_not_resumed() -> None:
    flow, (a, b, _c, _d) = diamond()
    assert flow.run is not None
    succeed(a.job_id)
    die(b.job_id)
    client = full()
    client.post(button_url(flow.run, "cancel"))
    response = client.post(button_url(flow.run, "resume"), follow=True)
    assert "cancelled workflow is not resumed" in " ".join(messages_of(response))
    assert status(b.job_id) == "dead"


@pytest.mark.parametrize(
    ("perms", "button", "allowed"),
    [
        (("view_job",), "cancel", False),
        (("view_job", "requeue_job"), "cancel", False),
        (("view_job", "cancel_job"), "cancel", True),
        (("view_job",), "resume", False),
        (("view_job", "cancel_job"), "resume", False),
        (("view_job", "requeue_job"), "resume", True),
        (("cancel_job", "requeue_job"), "cancel", False),  # no view_job: 403
    ],
)
def test_buttons_need_the_same_permissions_as_the_job_actions(
    perms: tuple[str, ...], button: str, allowed: bool
) -> None:
    flow, (a, b, c, d) = diamond()
    assert flow.run is not None
    succeed(a.job_id)
    die(b.job_id)
    before = {n.job_id: status(n.job_id) for n in (a, b, c, d)}
    client = operator(*perms)
    page = client.get(page_url(flow.run))
    if "view_job" in perms:
        assert (f'id="arcature-{button}-form"' in page.content.decode()) is allowed
    response = client.post(button_url(flow.run, button))
    after = {n.job_id: status(n.job_id) for n in (a, b, c, d)}
    if allowed:
        assert after != before
    else:
        assert after == before
        assert response.status_code in (302, 403)
        if response.status_code == 302:
            text = " ".join(messages_of(client.get(response["Location"])))
            assert "permission is required" in text
    assert client.get(button_url(flow.run, button)).status_code in (403, 405)


def test_buttons_refuse_a_post_without_the_csrf_token() -> None:
    flow, (a, *_rest) = diamond()
    assert flow.run is not None
    user = staff("csrf-op", "view_job", "cancel_job", "requeue_job")
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    assert client.post(button_url(flow.run, "cancel")).status_code == 403
    assert status(a.job_id) == "pending"
    page = client.get(page_url(flow.run)).content.decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)  # type: ignore[union-attr]
    done = client.post(button_url(flow.run, "cancel"), {"csrfmiddlewaretoken": token})
    assert done.status_code == 302
    assert status(a.job_id) == "cancelled"


# --- races -------------------------------------------------------------------------------


def test_cancel_after_a_completion_cancels_what_it_released_once() -> None:
    """The worker's fenced completion lands first: its release stands, then cancel stops it."""
    flow, (a, b, c, d) = diamond()
    assert flow.run is not None
    token = claim(a.job_id)
    assert Job.objects.mark_succeeded(a.job_id, token, "x") is ClaimTransition.UPDATED
    assert (status(b.job_id), status(c.job_id)) == ("pending", "pending")
    assert Job.objects.cancel_workflow(flow.run.id, reason="ops") == 3
    assert [status(n.job_id) for n in (a, b, c, d)] == ["succeeded"] + ["cancelled"] * 3
    # Repeating the acknowledgement (lost, retried) changes nothing.
    assert Job.objects.mark_succeeded(a.job_id, token, "x") is not ClaimTransition.UPDATED
    assert Job.objects.filter(status__in=["pending", "waiting"]).count() == 0


def test_a_completion_after_cancel_is_fenced_out_and_releases_nothing() -> None:
    flow, (a, b, c, d) = diamond()
    assert flow.run is not None
    token = claim(a.job_id)
    assert Job.objects.cancel_workflow(flow.run.id) == 4
    assert Job.objects.mark_succeeded(a.job_id, token, "x") is ClaimTransition.LOST
    assert [status(n.job_id) for n in (a, b, c, d)] == ["cancelled"] * 4
    assert Job.objects.filter(status__in=["pending", "waiting"]).count() == 0


def together(*calls: Callable[[], Any]) -> list[Any]:
    """Run the calls at the same instant, each on its own thread (and connection)."""
    from django.db import connections

    start = threading.Barrier(len(calls))
    results: list[Any] = [None] * len(calls)

    def run(index: int) -> None:
        try:
            start.wait()
            results[index] = calls[index]()
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return results


@pytest.mark.only_on("postgresql", "mysql", reason="SQLite runs one writer at a time")
def test_admin_cancel_racing_a_worker_completing_ends_one_way_or_the_other(vendor: str) -> None:
    """Both at once on two connections: the completion lands and releases, then is cancelled,
    or it is fenced out; either way nothing is left to run and nothing was released twice.
    (On SQLite the two sequential orders are tested above.)"""
    for round_ in range(6):
        flow, (a, b, c, d) = diamond(f"race {round_}")
        assert flow.run is not None
        token = claim(a.job_id)
        completion, cancelled = together(
            functools.partial(Job.objects.mark_succeeded, a.job_id, token, "x"),
            functools.partial(Job.objects.cancel_workflow, flow.run.id),
        )
        states = [status(n.job_id) for n in (a, b, c, d)]
        if completion is ClaimTransition.UPDATED:
            assert states == ["succeeded", "cancelled", "cancelled", "cancelled"]
            assert cancelled == 3
        else:
            assert completion is ClaimTransition.LOST
            assert states == ["cancelled"] * 4
            assert cancelled == 4
    assert Job.objects.filter(status__in=["pending", "waiting", "running"]).count() == 0


@pytest.mark.only_on("postgresql", "mysql", reason="SQLite runs one writer at a time")
def test_two_resumes_at_the_same_instant_requeue_once(vendor: str) -> None:
    """A double click that reaches two web processes: the workflow's row lock queues the
    second resume behind the first, which then finds nothing dead. (On SQLite the
    sequential double click is tested.)"""
    for round_ in range(4):
        flow, (a, b, c, d) = diamond(f"resume race {round_}")
        assert flow.run is not None
        succeed(a.job_id)
        die(b.job_id)
        first, second = together(
            functools.partial(Job.objects.resume_workflow, flow.run.id),
            functools.partial(Job.objects.resume_workflow, flow.run.id),
        )
        assert sorted([first.requeued, second.requeued]) == [0, 1]
        assert first.refused == second.refused == 0
        assert (status(b.job_id), status(c.job_id), status(d.job_id)) == (
            "pending",
            "pending",
            "waiting",
        )
        assert Job.objects.get(pk=b.job_id).attempts == 0


# --- batches -----------------------------------------------------------------------------


def make_batch(n: int, name: str = "import") -> Batch:
    batch = Batch(on_success=wf.batch_done, on_finish=wf.batch_done, name=name)
    for i in range(n):
        batch.add(wf.step, f"row {i}")
    return batch.enqueue()


def test_the_batch_page_shows_progress_from_the_counters_and_links_callbacks() -> None:
    batch = make_batch(4)
    assert batch.run is not None
    assert batch.id is not None
    members = list(Job.objects.filter(task_name="wf.step").values_list("id", flat=True))
    succeed(members[0])
    succeed(members[1])
    die(members[2])
    client = operator("view_job")
    html = client.get(page_url(batch.run)).content.decode()
    progress = re.search(r'<progress id="arcature-progress"[^>]*>', html).group(0)  # type: ignore[union-attr]
    assert 'max="4"' in progress
    assert 'value="3"' in progress
    assert 'data-dead="1"' in progress
    assert 'data-pending="1"' in progress
    assert "3 of 4 finished (75%)" in html
    assert "not yet: it is enqueued when the last member finishes" in html
    succeed(members[3])
    html = client.get(page_url(batch.run)).content.decode()
    [callback] = Job.objects.filter(task_name="wf.batch_done")  # on_finish only: one died
    link = reverse("admin:django_arcature_job_change", args=[callback.pk])
    assert f'href="{link}"' in html
    assert "4 of 4 finished (100%)" in html


def test_the_batch_page_links_the_stored_callback_jobs_not_lookalikes() -> None:
    """The page links the ids stored at the fire, not a job that merely looks like one
    (same task and argument, created at the same moment)."""
    batch = make_batch(1)
    assert batch.run is not None
    [member] = Job.objects.filter(task_name="wf.step").values_list("id", flat=True)
    succeed(member)
    run = BatchRun.objects.get(pk=batch.run.pk)
    assert run.on_success_job_id is not None
    assert run.on_finish_job_id is not None
    lookalike = wf.batch_done.enqueue(str(batch.id))
    html = operator("view_job").get(page_url(batch.run)).content.decode()
    for job_id in (run.on_success_job_id, run.on_finish_job_id):
        assert f'href="{reverse("admin:django_arcature_job_change", args=[job_id])}"' in html
    assert reverse("admin:django_arcature_job_change", args=[lookalike.pk]) not in html


def test_a_batch_fired_before_the_ids_were_stored_finds_its_callbacks_by_time() -> None:
    batch = make_batch(1)
    assert batch.run is not None
    [member] = Job.objects.filter(task_name="wf.step").values_list("id", flat=True)
    succeed(member)
    BatchRun.objects.filter(pk=batch.run.pk).update(on_success_job_id=None, on_finish_job_id=None)
    html = operator("view_job").get(page_url(batch.run)).content.decode()
    for job_id in Job.objects.filter(task_name="wf.batch_done").values_list("id", flat=True):
        assert f'href="{reverse("admin:django_arcature_job_change", args=[job_id])}"' in html


def test_the_batch_page_reads_counters_not_members() -> None:
    client = operator("view_job")
    small, large = make_batch(2, "small"), make_batch(600, "large")
    assert small.run is not None
    assert large.run is not None
    assert queries_for(client, page_url(small.run)) == queries_for(client, page_url(large.run))


def test_batch_cancel_and_resume() -> None:
    batch = make_batch(3)
    assert batch.run is not None
    assert batch.id is not None
    members = list(
        Job.objects.filter(task_name="wf.step").order_by("id").values_list("id", flat=True)
    )
    die(members[0])
    client = full()
    resumed = client.post(button_url(batch.run, "resume"), follow=True)
    assert "Requeued 1 dead job" in " ".join(messages_of(resumed))
    assert status(members[0]) == "pending"
    assert batch.counts()["dead"] == 0
    again = client.post(button_url(batch.run, "resume"), follow=True)
    assert "Nothing to resume" in " ".join(messages_of(again))
    token = claim(members[1])
    cancelled = client.post(button_url(batch.run, "cancel"), {"reason": "wrong file"}, follow=True)
    assert "Cancelled the batch: 3 jobs cancelled" in " ".join(messages_of(cancelled))
    assert Job.objects.mark_succeeded(members[1], token, "late") is ClaimTransition.LOST
    counts = batch.counts()
    assert counts == {"total": 3, "succeeded": 0, "dead": 0, "cancelled": 3, "pending": 0}
    assert not Job.objects.filter(task_name="wf.batch_done").exists()
    assert BatchRun.objects.get(pk=batch.id).fired_at is None


@pytest.mark.only_on("postgresql", "mysql", reason="SQLite runs one writer at a time")
def test_batch_cancel_racing_member_completions_counts_each_member_once(vendor: str) -> None:
    """Members completing while an operator cancels the batch: each member is counted once,
    as what it ended as, and the callbacks fire once if the batch finished first, else never."""
    for round_ in range(4):
        batch = make_batch(6, f"race {round_}")
        assert batch.id is not None
        members = list(
            Job.objects.filter(status="pending", task_name="wf.step").values_list("id", flat=True)
        )
        calls: list[Callable[[], Any]] = [
            functools.partial(Job.objects.mark_succeeded, job_id, claim(job_id), "x")
            for job_id in members
        ]
        calls.append(functools.partial(Job.objects.cancel_batch, batch.id))
        together(*calls)
        counts = batch.counts()
        succeeded = Job.objects.filter(id__in=members, status="succeeded").count()
        cancelled = Job.objects.filter(id__in=members, status="cancelled").count()
        assert (counts["succeeded"], counts["cancelled"]) == (succeeded, cancelled), counts
        assert succeeded + cancelled == 6
        assert counts["pending"] == 0
        callbacks = Job.objects.filter(task_name="wf.batch_done", payload__args=[str(batch.id)])
        assert callbacks.count() == (2 if cancelled == 0 else 0)


# --- escaping ----------------------------------------------------------------------------

SCRIPT = "<script>window.__pwned=1</script>"
BREAKOUT = '"><svg onload="window.__pwned=2">'
HOSTILE = f"{SCRIPT}{BREAKOUT}"


def hostile_workflow() -> tuple[Workflow, list[Node]]:
    """A workflow whose every user-given text is hostile (task and node names set directly:
    test data, as a renamed task's rows would hold whatever name they were given)."""
    from django_arcature.workflows.models import WorkflowNode

    flow, nodes = diamond(name=f"wf {HOSTILE}"[:200], key=f"key {HOSTILE}")
    for i, node in enumerate(nodes):
        WorkflowNode.objects.filter(job_id=node.job_id).update(name=f"n{i} {HOSTILE}")
    Job.objects.filter(pk__in=[n.job_id for n in nodes]).update(task_name=f"task {HOSTILE}")
    return flow, nodes


def assert_escaped(html: str) -> None:
    assert SCRIPT not in html
    assert BREAKOUT not in html
    assert "onload=" not in html.replace("onload=&quot;", "")
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in html
    assert "&quot;&gt;&lt;svg onload=&quot;window.__pwned=2&quot;&gt;" in html


def test_user_text_is_escaped_in_the_page_and_inside_the_svg() -> None:
    flow, (a, b, *_rest) = hostile_workflow()
    assert flow.run is not None
    succeed(a.job_id)
    client = full()
    client.post(button_url(flow.run, "cancel"), {"reason": f"reason {HOSTILE}"})
    html = client.get(page_url(flow.run)).content.decode()
    assert_escaped(html)
    start = html.index('<svg id="arcature-workflow-graph"')
    svg = html[start : html.index("</svg>", start)]
    texts = re.findall(r'<text x="\d+" y="\d+" class="arcature-node-name">([^<]*)</text>', svg)
    assert any("&lt;script&gt;" in text for text in texts), texts
    titles = re.findall(r"<title>([^<]*)</title>", svg)
    assert any("task task &lt;script&gt;" in title for title in titles), titles
    assert "reason &lt;script&gt;" in html  # the cancel reason, in the node table
    assert "reason " + SCRIPT in Job.objects.get(pk=b.job_id).last_error  # stored as given
    listing = client.get(reverse("admin:django_arcature_workflowrun_changelist")).content.decode()
    assert_escaped(listing)
    history = reverse("admin:django_arcature_workflowrun_history", args=[flow.run.pk])
    assert_escaped(client.get(history).content.decode())


def test_batch_text_is_escaped() -> None:
    batch = Batch(on_finish=wf.batch_done, name=f"b {HOSTILE}")
    member = batch.add(wf.step, "x")
    batch.enqueue()
    assert batch.run is not None
    Job.objects.filter(pk=member).update(task_name=f"task {HOSTILE}")
    BatchRun.objects.filter(pk=batch.run.pk).update(on_finish=f"cb {HOSTILE}")
    client = full()
    client.post(button_url(batch.run, "cancel"), {"reason": f"reason {HOSTILE}"})
    html = client.get(page_url(batch.run)).content.decode()
    assert_escaped(html)
    assert "cb &lt;script&gt;" in html
    assert_escaped(
        client.get(reverse("admin:django_arcature_batchrun_changelist")).content.decode()
    )

"""The job admin and the dead-letter page, through Django's test client, on every database.

Permissions, the three operator actions and what they report, the read-only
detail page with its per-job buttons, search and filters.
"""

from __future__ import annotations

import dataclasses
import uuid
from datetime import timedelta

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import User
from django.db.models import F
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from django_arcature import Workflow
from django_arcature.admin import actions as admin_actions
from django_arcature.admin.actions import REQUEUE, perform
from django_arcature.models import ErrorKind, Job, JobStatus
from django_arcature.transitions import ClaimTransition
from tests.testapp import workflow_jobs as wf

from .test_admin_support import (
    client_for,
    enqueue,
    make_dead,
    make_running,
    make_scheduled,
    make_succeeded,
    messages_of,
    staff,
    status_of,
)

pytestmark = pytest.mark.django_db

JOBS = reverse("admin:django_arcature_job_changelist")
DEAD = reverse("admin:django_arcature_deadjob_changelist")


def change_url(job_id: uuid.UUID, model: str = "job") -> str:
    return reverse(f"admin:django_arcature_{model}_change", args=[job_id])


def button_url(job_id: uuid.UUID, operation: str, model: str = "job") -> str:
    return reverse(f"admin:django_arcature_{model}_{operation}", args=[job_id])


def act(client: Client, url: str, action: str, ids: list[uuid.UUID], **extra: str) -> list[str]:
    data = {"action": action, "_selected_action": [str(i) for i in ids], "index": "0", **extra}
    response = client.post(url, data, follow=True)
    assert response.status_code == 200
    return messages_of(response)


@pytest.fixture
def root(admin_user: User) -> Client:
    return client_for(admin_user)


# --- who may do what -----------------------------------------------------------------------


def test_anonymous_users_are_sent_to_the_login_page(client: Client) -> None:
    response = client.get(DEAD)
    assert response.status_code == 302
    assert reverse("admin:login") in response["Location"]


def test_staff_without_view_permission_sees_nothing() -> None:
    client = client_for(staff("nobody"))
    assert client.get(JOBS).status_code == 403
    assert client.get(DEAD).status_code == 403
    assert client.get(reverse("admin:django_arcature_dashboard")).status_code == 403


def test_jobs_cannot_be_added_edited_or_deleted_by_hand(root: Client) -> None:
    [job_id] = make_dead(1)
    assert root.get(reverse("admin:django_arcature_job_add")).status_code == 403
    assert root.get(reverse("admin:django_arcature_job_delete", args=[job_id])).status_code == 403
    page = root.get(change_url(job_id))
    assert page.status_code == 200
    assert b'name="_save"' not in page.content  # a read-only view, no form to submit
    assert root.post(change_url(job_id), {"status": "pending"}).status_code == 403
    assert status_of(job_id) == JobStatus.DEAD


def test_a_viewer_gets_no_actions_and_a_clear_refusal_when_posting_one() -> None:
    [job_id] = make_dead(1)
    client = client_for(staff("viewer", "view_job"))
    page = client.get(DEAD)
    assert page.status_code == 200
    assert b"requeue_jobs" not in page.content
    refusal = act(client, DEAD, "requeue_jobs", [job_id])
    assert refusal == [
        "You do not have permission to requeue jobs. "
        "The django_arcature.requeue_job permission is required."
    ]
    assert status_of(job_id) == JobStatus.DEAD


def test_each_action_needs_its_own_permission() -> None:
    dead = make_dead(1)
    [pending] = enqueue(1, "q1")
    client = client_for(staff("requeuer", "view_job", "requeue_job"))
    page = client.get(JOBS).content
    assert b"requeue_jobs" in page
    assert b"cancel_jobs" not in page
    assert b"run_jobs_now" not in page
    assert act(client, JOBS, "cancel_jobs", [pending])[0].startswith(
        "You do not have permission to cancel jobs."
    )
    assert status_of(pending) == JobStatus.PENDING
    assert act(client, JOBS, "requeue_jobs", dead) == ["Requeued 1 job."]
    assert status_of(dead[0]) == JobStatus.PENDING


def test_the_detail_buttons_follow_permissions_and_state() -> None:
    [dead] = make_dead(1)
    [running] = make_running(1)
    viewer = client_for(staff("viewer", "view_job"))
    assert b"arcature-button" not in viewer.get(change_url(dead)).content
    response = viewer.post(button_url(dead, "requeue"), follow=True)
    assert messages_of(response) == [
        "You do not have permission to requeue jobs. "
        "The django_arcature.requeue_job permission is required."
    ]
    assert status_of(dead) == JobStatus.DEAD

    operator = client_for(staff("operator", "view_job", "requeue_job", "cancel_job"))
    dead_page = operator.get(change_url(dead)).content.decode()
    assert 'class="arcature-button arcature-button-requeue"' in dead_page
    assert "arcature-button-cancel" not in dead_page  # a dead job cannot be cancelled
    running_page = operator.get(change_url(running)).content.decode()
    assert "arcature-button-cancel" in running_page
    assert "arcature-button-requeue" not in running_page


# --- the actions and their reports ------------------------------------------------------------


def test_requeue_from_the_dead_letter_page(root: Client) -> None:
    ids = make_dead(3)
    assert act(root, DEAD, "requeue_jobs", ids[:2]) == ["Requeued 2 jobs."]
    for job_id in ids[:2]:
        job = Job.objects.get(pk=job_id)
        assert (job.status, job.attempts, job.error_kind, job.last_error) == ("pending", 0, "", "")
        assert job.failed_at is None
    assert status_of(ids[2]) == JobStatus.DEAD
    listed = root.get(DEAD).content.decode()
    assert ids[2].hex[-8:] in listed
    assert ids[0].hex[-8:] not in listed


def test_actions_leave_an_entry_in_each_changed_jobs_admin_history(
    root: Client, admin_user: User
) -> None:
    dead = make_dead(2)
    [pending] = enqueue(1, "q1")
    act(root, JOBS, "requeue_jobs", [*dead, pending])

    entries = LogEntry.objects.filter(content_type__model="job")
    assert sorted(str(entry.object_id) for entry in entries) == sorted(str(i) for i in dead)
    for entry in entries:
        assert (entry.user_id, entry.action_flag) == (admin_user.pk, CHANGE)
        assert entry.get_change_message() == "Requeue"
    history = root.get(reverse("admin:django_arcature_job_history", args=[dead[0]]))
    assert "Requeue" in history.content.decode()


def test_requeue_reports_what_it_skipped_and_why(root: Client) -> None:
    dead = make_dead(2)
    [pending] = enqueue(1, "q1")
    [done] = make_succeeded(1)
    assert act(root, JOBS, "requeue_jobs", [*dead, pending, done]) == [
        "Requeued 2 jobs. Skipped 2 jobs: 1 pending, 1 succeeded (only dead jobs can be requeued)."
    ]
    assert status_of(pending) == JobStatus.PENDING
    assert status_of(done) == JobStatus.SUCCEEDED


def test_cancel_fences_out_the_worker_of_a_running_job(root: Client) -> None:
    [pending] = enqueue(1, "q1")
    enqueue(1, "run-q")
    [(running, token)] = [
        (job.id, job.claim_token) for job in Job.objects.claim("w", 60, 1, queues=["run-q"])
    ]
    [dead] = make_dead(1)
    assert act(root, JOBS, "cancel_jobs", [pending, running, dead]) == [
        "Cancelled 2 jobs. Skipped 1 job: 1 dead "
        "(only pending, waiting or running jobs can be cancelled)."
    ]
    assert status_of(pending) == status_of(running) == JobStatus.CANCELLED
    assert Job.objects.mark_succeeded(running, token) is ClaimTransition.LOST
    assert status_of(running) == JobStatus.CANCELLED


def test_run_now_moves_only_scheduled_jobs(root: Client) -> None:
    [scheduled] = make_scheduled(1)
    [due] = enqueue(1, "q1")
    due_at = Job.objects.get(pk=due).available_at
    [dead] = make_dead(1)
    assert act(root, JOBS, "run_jobs_now", [scheduled, due, dead]) == [
        "Made 1 job available now. Skipped 2 jobs: 1 already due, 1 dead "
        "(only scheduled pending jobs can be made to run now)."
    ]
    assert Job.objects.get(pk=scheduled).available_at <= timezone.now() + timedelta(seconds=5)
    assert Job.objects.get(pk=due).available_at == due_at
    claimed = Job.objects.claim("w", 60, 5, queues=["later-q"])
    assert [job.id for job in claimed] == [scheduled]


def test_nothing_changed_is_a_warning_not_a_success(root: Client) -> None:
    [done] = make_succeeded(1)
    response = root.post(
        DEAD.replace("deadjob", "job"),
        {"action": "requeue_jobs", "_selected_action": [str(done)], "index": "0"},
        follow=True,
    )
    [message] = list(response.context["messages"])
    assert message.level_tag == "warning"
    assert str(message) == ("Skipped 1 job: 1 succeeded (only dead jobs can be requeued).")


def test_select_all_across_pages_requeues_every_dead_job(root: Client) -> None:
    ids = make_dead(4)
    [pending] = enqueue(1, "q1")
    messages = act(root, DEAD, "requeue_jobs", ids[:1], select_across="1")
    assert messages == ["Requeued 4 jobs."]
    assert {status_of(i) for i in ids} == {JobStatus.PENDING}
    assert status_of(pending) == JobStatus.PENDING


def test_an_action_stops_at_its_limit_and_says_so(
    root: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(admin_actions, "ACTION_LIMIT", 3)
    ids = make_dead(5)
    assert act(root, DEAD, "requeue_jobs", ids[:1], select_across="1") == [
        "Requeued 3 jobs. Only 3 jobs are handled per action; run it again for the rest."
    ]
    assert sum(status_of(i) == JobStatus.DEAD for i in ids) == 2


def test_a_job_changed_meanwhile_is_skipped_not_forced() -> None:
    [job_id] = make_dead(1)

    def someone_else_first(target: uuid.UUID) -> int:
        assert Job.objects.requeue_dead(target) == 1  # another operator wins the race
        return Job.objects.requeue_dead(target)

    racing = dataclasses.replace(REQUEUE, apply=someone_else_first)
    report = perform(racing, Job.objects.filter(pk=job_id))
    assert (report.changed, dict(report.skipped)) == (0, {"changed-meanwhile": 1})
    assert report.message(racing) == (
        "Skipped 1 job: 1 changed by someone else meanwhile (only dead jobs can be requeued)."
    )


def test_the_requeue_button_on_a_dead_jobs_page(root: Client) -> None:
    [job_id] = make_dead(1)
    assert root.get(button_url(job_id, "requeue", "deadjob")).status_code == 405
    response = root.post(button_url(job_id, "requeue", "deadjob"))
    assert response.status_code == 302
    assert response["Location"] == change_url(job_id)  # the job left the dead-letter page
    assert status_of(job_id) == JobStatus.PENDING
    followed = root.get(response["Location"])
    assert "Requeued 1 job." in [str(m) for m in followed.context["messages"]]
    again = root.post(button_url(job_id, "requeue", "deadjob"), follow=True)
    assert messages_of(again) == ["That job is no longer on this page."]


def test_the_cancel_and_run_now_buttons(root: Client) -> None:
    [scheduled] = make_scheduled(1)
    response = root.post(button_url(scheduled, "run_now"), follow=True)
    assert messages_of(response) == ["Made 1 job available now."]
    assert Job.objects.get(pk=scheduled).available_at <= timezone.now() + timedelta(seconds=5)
    response = root.post(button_url(scheduled, "cancel"), follow=True)
    assert messages_of(response) == ["Cancelled 1 job."]
    assert status_of(scheduled) == JobStatus.CANCELLED
    response = root.post(button_url(scheduled, "cancel"), follow=True)
    assert messages_of(response) == [
        "Skipped 1 job: 1 cancelled (only pending, waiting or running jobs can be cancelled)."
    ]


# --- the detail page ----------------------------------------------------------------------


def test_detail_shows_payload_result_error_traceback_and_lease(root: Client) -> None:
    [dead] = make_dead(1, message="SMTP 550: mailbox <x@example.com> unavailable")
    page = root.get(change_url(dead, "deadjob")).content.decode()
    assert "SMTP 550: mailbox &lt;x@example.com&gt; unavailable" in page
    assert "RuntimeError: no" in page
    assert "&quot;args&quot;: [\n    0,\n    1\n  ]" in page  # pretty-printed, indented JSON
    assert "Permanent" in page or "permanent" in page

    [done] = make_succeeded(1)
    assert "&quot;note&quot;: &quot;ok&quot;" in root.get(change_url(done)).content.decode()

    [running] = make_running(1, worker="host-7:pid-42")
    page = root.get(change_url(running)).content.decode()
    assert "held by host-7:pid-42, expires in" in page
    assert str(Job.objects.get(pk=running).claim_token) in page


# --- search, filters, ordering ----------------------------------------------------------------


def listed(client: Client, url: str, **params: str) -> set[str]:
    response = client.get(url, params)
    assert response.status_code == 200, response.content[:500]
    return {str(job.pk) for job in response.context["cl"].result_list}


def test_search_by_id_task_and_error_text(root: Client) -> None:
    [boom] = make_dead(1, message="connection refused by smtp.example.com")
    [other] = make_dead(1, message="quota exceeded")
    [noop] = enqueue(1, "q1", task="tests.noop")
    assert listed(root, JOBS, q=str(other)) == {str(other)}
    assert listed(root, JOBS, q=other.hex) == {str(other)}
    assert listed(root, JOBS, q="smtp.example") == {str(boom)}
    assert listed(root, DEAD, q="QUOTA") == {str(other)}
    assert str(noop) in listed(root, JOBS, q="tests.noop")
    assert str(boom) not in listed(root, JOBS, q="tests.noop")


def test_filters_by_status_queue_task_and_error_kind(root: Client) -> None:
    [permanent] = make_dead(1, queue="mail", kind=ErrorKind.PERMANENT)
    [timeout] = make_dead(1, queue="reports", kind=ErrorKind.TIMEOUT)
    [pending] = enqueue(1, "mail", task="tests.noop")
    assert listed(root, JOBS, status="pending") == {str(pending)}
    assert listed(root, JOBS, queue="mail") == {str(permanent), str(pending)}
    assert listed(root, JOBS, task="tests.noop") == {str(pending)}
    assert listed(root, DEAD, error_kind="timeout") == {str(timeout)}
    assert listed(root, DEAD, queue="mail") == {str(permanent)}
    page = root.get(DEAD).content.decode()
    assert "?queue=reports" in page  # choices from the newest rows
    assert "?queue=mail" in page
    assert "?task=tests.always_fails" in page  # and from the registry


def test_lists_are_newest_first_and_dead_letters_by_failure_time(root: Client) -> None:
    first = make_dead(1, queue="a")
    second = make_dead(1, queue="b")
    # SQLite's clock counts milliseconds: two jobs written in one would tie.
    # Moving the first back a second makes the order the test's, not chance's.
    earlier = {
        "created_at": F("created_at") - timedelta(seconds=1),
        "finished_at": F("finished_at") - timedelta(seconds=1),
    }
    Job.objects.filter(pk=first[0]).update(**earlier)
    ids = [str(job.pk) for job in root.get(DEAD).context["cl"].result_list]
    assert ids == [str(second[0]), str(first[0])]
    ids = [str(job.pk) for job in root.get(JOBS).context["cl"].result_list]
    assert ids == [str(second[0]), str(first[0])]


def test_the_date_hierarchy_offers_the_days_between_first_and_last(root: Client) -> None:
    make_dead(2)
    page = root.get(DEAD).content.decode()
    today = timezone.localtime().date()
    assert f"finished_at__day={today.day}" in page
    drilled = root.get(DEAD, {"finished_at__year": str(today.year)})
    assert drilled.status_code == 200
    assert f"finished_at__month={today.month}" in drilled.content.decode()


def test_cancel_takes_a_waiting_workflow_node_and_cancels_what_needed_it(root: Client) -> None:
    flow = Workflow("admin cancel")
    first = flow.add(wf.step, "a")
    middle = flow.add(wf.step, "b", after=[first])
    last = flow.add(wf.step, "c", after=[middle])
    flow.enqueue()
    assert status_of(middle.job_id) == JobStatus.WAITING
    assert act(root, JOBS, "cancel_jobs", [middle.job_id]) == ["Cancelled 1 job."]
    assert status_of(middle.job_id) == status_of(last.job_id) == JobStatus.CANCELLED
    assert f"(job {middle.job_id})" in Job.objects.get(pk=last.job_id).last_error
    assert status_of(first.job_id) == JobStatus.PENDING

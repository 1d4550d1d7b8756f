"""Who may see and do what in the admin: every view, button and action, for every kind of user.

The matrix covers anonymous visitors, staff without permissions, view-only
staff, staff holding one operator permission each (with and without
``view_job``), and operators holding them all. For each page the status code is
pinned; for each POST (list actions, per-job buttons, the change and delete
forms) the whole job table is compared before and after, so a refused request
that still changed a row fails. CSRF is enforced on every POST: without the
token nothing runs, with it the same request does.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from django_arcature.models import Job, JobStatus
from tests.integration.test_admin_support import (
    enqueue,
    make_dead,
    make_running,
    make_scheduled,
    make_succeeded,
    staff,
)

pytestmark = pytest.mark.django_db

OPERATOR_PERMS = ("cancel_job", "requeue_job", "run_job_now")
#: Who holds what. None: not logged in; otherwise the codenames of a staff user.
USERS: dict[str, tuple[str, ...] | None] = {
    "anonymous": None,
    "no-permissions": (),
    "viewer": ("view_job",),
    "canceller": ("view_job", "cancel_job"),
    "requeuer": ("view_job", "requeue_job"),
    "runner": ("view_job", "run_job_now"),
    "operators-without-view": OPERATOR_PERMS,
    "full": ("view_job", *OPERATOR_PERMS),
    "not-staff-full": ("view_job", *OPERATOR_PERMS),
    "inactive-full": ("view_job", *OPERATOR_PERMS),
}
#: Users holding every permission whom the admin must still treat as logged out.
NOT_ADMIN: dict[str, dict[str, bool]] = {
    "not-staff-full": {"is_staff": False},
    "inactive-full": {"is_active": False},
}
#: What each operation changes, and the permission it needs.
ACTIONS = {
    "cancel_jobs": "cancel_job",
    "requeue_jobs": "requeue_job",
    "run_jobs_now": "run_job_now",
}
BUTTONS = {"cancel": "cancel_job", "requeue": "requeue_job", "run-now": "run_job_now"}


@pytest.fixture(autouse=True)
def fast_passwords(settings: Any) -> None:
    """Each case makes its own users; the default hasher would spend most of the run hashing."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@dataclass
class World:
    """One job in each state the operator actions care about."""

    due: uuid.UUID
    scheduled: uuid.UUID
    running: uuid.UUID
    dead: uuid.UUID
    succeeded: uuid.UUID

    @property
    def ids(self) -> list[uuid.UUID]:
        return [self.due, self.scheduled, self.running, self.dead, self.succeeded]


@pytest.fixture
def world() -> World:
    [due] = enqueue(1, "due-q")
    [scheduled] = make_scheduled(1)
    [running] = make_running(1)
    [dead] = make_dead(1)
    [succeeded] = make_succeeded(1)
    return World(due, scheduled, running, dead, succeeded)


def snapshot() -> dict[Any, tuple[Any, ...]]:
    """Everything an operator action could change, for every job; plus the admin log size."""
    rows = Job.objects.values_list(
        "id", "status", "attempts", "available_at", "claim_token", "unique_key", "last_error"
    )
    state: dict[Any, tuple[Any, ...]] = {row[0]: row[1:] for row in rows}
    state["log entries"] = (LogEntry.objects.count(),)
    return state


def client_as(name: str) -> Client:
    codenames = USERS[name]
    client = Client()
    if codenames is not None:
        user = staff(name, *codenames)
        for flag, value in NOT_ADMIN.get(name, {}).items():
            setattr(user, flag, value)
        user.save()
        client.force_login(user)
    return client


def logged_out(name: str) -> bool:
    """Anonymous, or a user the admin does not let in (not staff, or inactive)."""
    return USERS[name] is None or name in NOT_ADMIN


def holds(name: str, codename: str) -> bool:
    return not logged_out(name) and codename in (USERS[name] or ())


def can_view(name: str) -> bool:
    return holds(name, "view_job")


def expect_login_redirect(response: Any) -> None:
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("admin:login"))


# --- pages (GET) ------------------------------------------------------------------------------


def pages(world: World) -> dict[str, str]:
    """Every admin page of the app that a GET can reach."""
    return {
        "job list": reverse("admin:django_arcature_job_changelist"),
        "dead letters": reverse("admin:django_arcature_deadjob_changelist"),
        "dashboard": reverse("admin:django_arcature_dashboard"),
        "job detail": reverse("admin:django_arcature_job_change", args=[world.running]),
        "dead detail": reverse("admin:django_arcature_deadjob_change", args=[world.dead]),
        "job history": reverse("admin:django_arcature_job_history", args=[world.dead]),
        "dead history": reverse("admin:django_arcature_deadjob_history", args=[world.dead]),
        "app index": reverse("admin:app_list", args=["django_arcature"]),
    }


@pytest.mark.parametrize("user", list(USERS))
def test_every_page_answers_as_the_users_permissions_say(user: str, world: World) -> None:
    client = client_as(user)
    for name, url in pages(world).items():
        response = client.get(url)
        if logged_out(user):
            expect_login_redirect(response)
        elif name == "app index":
            # Django answers 404 for an app the user may not see anything of.
            assert response.status_code == (200 if can_view(user) else 404), name
        else:
            assert response.status_code == (200 if can_view(user) else 403), (name, user)


@pytest.mark.parametrize("user", list(USERS))
def test_nobody_adds_edits_or_deletes_jobs_by_hand(user: str, world: World) -> None:
    client = client_as(user)
    before = snapshot()
    urls = [
        reverse("admin:django_arcature_job_add"),
        reverse("admin:django_arcature_deadjob_add"),
        reverse("admin:django_arcature_job_delete", args=[world.dead]),
        reverse("admin:django_arcature_deadjob_delete", args=[world.dead]),
    ]
    for url in urls:
        for response in (client.get(url), client.post(url, {"post": "yes"})):
            if logged_out(user):
                expect_login_redirect(response)
            else:
                assert response.status_code == 403, url
    edit = reverse("admin:django_arcature_job_change", args=[world.dead])
    response = client.post(edit, {"status": "pending", "attempts": "0"})
    if logged_out(user):
        expect_login_redirect(response)
    else:
        assert response.status_code == 403
    assert snapshot() == before


# --- list actions (POST) ----------------------------------------------------------------------


def post_action(client: Client, url: str, action: str, ids: list[uuid.UUID]) -> Any:
    return client.post(
        url, {"action": action, "_selected_action": [str(i) for i in ids], "index": "0"}
    )


def expected_after(action: str, world: World, before: dict[Any, tuple[Any, ...]]) -> set[Any]:
    """The ids whose row an allowed ``action`` over every job must change."""
    return {
        "cancel_jobs": {world.due, world.scheduled, world.running},
        "requeue_jobs": {world.dead},
        "run_jobs_now": {world.scheduled},
    }[action]


@pytest.mark.parametrize("action", [*ACTIONS, "delete_selected"])
@pytest.mark.parametrize("user", list(USERS))
@pytest.mark.parametrize("page", ["job", "deadjob"])
def test_list_actions_change_jobs_only_with_their_permission(
    user: str, action: str, page: str, world: World
) -> None:
    client = client_as(user)
    url = reverse(f"admin:django_arcature_{page}_changelist")
    before = snapshot()
    response = post_action(client, url, action, world.ids)
    after = snapshot()
    changed = {key for key in before if before[key] != after.get(key)}
    if logged_out(user):
        expect_login_redirect(response)
    elif not can_view(user):
        assert response.status_code == 403
    else:
        assert response.status_code in (200, 302)
    offered = {"job": set(ACTIONS), "deadjob": {"requeue_jobs"}}[page]
    allowed = (
        action in offered and can_view(user) and holds(user, ACTIONS.get(action, "delete_job"))
    )
    if not allowed:
        assert changed == set(), f"{user} changed {changed} with {action} on {page}"
        return
    targets = expected_after(action, world, before)
    if page == "deadjob":  # the dead-letter page lists, and so acts on, dead jobs only
        targets = targets & {world.dead}
    assert changed == targets | {"log entries"}


@pytest.mark.parametrize("user", list(USERS))
def test_the_list_offers_exactly_the_permitted_actions(user: str, world: World) -> None:
    page = client_as(user).get(reverse("admin:django_arcature_job_changelist"))
    if not can_view(user):
        assert page.status_code in (302, 403)  # no list, so no actions either
        assert b'name="action"' not in page.content
        return
    content = page.content
    offered = set(re.findall(rb'<option value="([a-z_]+)"', content)) - {b""}
    assert offered == {a.encode() for a, perm in ACTIONS.items() if holds(user, perm)}


# --- per-job buttons (POST) -------------------------------------------------------------------


@pytest.mark.parametrize("button", list(BUTTONS))
@pytest.mark.parametrize("user", list(USERS))
@pytest.mark.parametrize("page", ["job", "deadjob"])
def test_buttons_change_a_job_only_with_their_permission(
    user: str, button: str, page: str, world: World
) -> None:
    client = client_as(user)
    operation = button.replace("-", "_")
    fitting = {"cancel": world.running, "requeue": world.dead, "run-now": world.scheduled}[button]
    url = reverse(f"admin:django_arcature_{page}_{operation}", args=[fitting])
    before = snapshot()
    got = client.get(url)
    if logged_out(user):
        expect_login_redirect(got)
    else:
        assert got.status_code == 405, "a button never acts on a GET"
    assert snapshot() == before
    response = client.post(url)
    after = snapshot()
    changed = {key for key in before if before[key] != after.get(key)}
    if logged_out(user):
        expect_login_redirect(response)
    elif not can_view(user):
        assert response.status_code == 403
    else:
        assert response.status_code == 302
    on_page = page == "job" or fitting == world.dead
    if can_view(user) and holds(user, BUTTONS[button]) and on_page:
        assert changed == {fitting, "log entries"}
    else:
        assert changed == set(), f"{user} changed {changed} with {button} on {page}"


@pytest.mark.parametrize("user", list(USERS))
def test_the_detail_page_shows_only_permitted_fitting_buttons(user: str, world: World) -> None:
    client = client_as(user)
    if not can_view(user):
        page = client.get(reverse("admin:django_arcature_job_change", args=[world.dead]))
        assert page.status_code in (302, 403)
        assert b"arcature-button" not in page.content
        return
    for job_id, fits in (
        (world.running, "cancel"),
        (world.dead, "requeue"),
        (world.scheduled, None),  # pending and scheduled: cancel and run-now fit
        (world.succeeded, ""),
    ):
        page = client.get(reverse("admin:django_arcature_job_change", args=[job_id]))
        shown = set(re.findall(r"arcature-button-([a-z_]+)", page.content.decode()))
        if fits is None:
            fitting = {"cancel", "run_now"}
        elif fits == "":
            fitting = set()
        else:
            fitting = {fits}
        permitted = {b.replace("-", "_") for b, perm in BUTTONS.items() if holds(user, perm)}
        assert shown == fitting & permitted, (job_id, shown)


# --- CSRF ------------------------------------------------------------------------------------


def csrf_client() -> tuple[Client, User]:
    user = staff("csrf-full", *USERS["full"] or ())
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    return client, user


def token_of(client: Client) -> str:
    client.get(reverse("admin:django_arcature_job_changelist"))
    return str(client.cookies["csrftoken"].value)


def posts(world: World) -> list[tuple[str, str, dict[str, Any]]]:
    """Every POST the app's admin accepts: (name, url, form data without the token)."""
    jobs = reverse("admin:django_arcature_job_changelist")
    dead = reverse("admin:django_arcature_deadjob_changelist")
    everything = [str(i) for i in world.ids]
    out: list[tuple[str, str, dict[str, Any]]] = [
        (
            f"job list {action}",
            jobs,
            {"action": action, "_selected_action": everything, "index": "0"},
        )
        for action in ACTIONS
    ]
    out.append(
        (
            "dead letters requeue_jobs",
            dead,
            {"action": "requeue_jobs", "_selected_action": [str(world.dead)], "index": "0"},
        )
    )
    for page in ("job", "deadjob"):
        for button, job_id in (
            ("cancel", world.running),
            ("requeue", world.dead),
            ("run_now", world.scheduled),
        ):
            url = reverse(f"admin:django_arcature_{page}_{button}", args=[job_id])
            out.append((f"{page} button {button}", url, {}))
    return out


def test_every_post_without_a_csrf_token_is_refused(world: World) -> None:
    client, _ = csrf_client()
    before = snapshot()
    for name, url, data in posts(world):
        response = client.post(url, data)
        assert response.status_code == 403, name
        assert b"CSRF" in response.content, name
        assert snapshot() == before, f"{name} changed jobs without a CSRF token"


def test_the_same_posts_with_the_token_go_through(world: World) -> None:
    """The refusal above is the CSRF check, not something else: with the token they act."""
    client, _ = csrf_client()
    token = token_of(client)
    before = snapshot()
    for name, url, data in posts(world):
        response = client.post(url, {**data, "csrfmiddlewaretoken": token})
        assert response.status_code in (200, 302), name
    after = snapshot()
    assert after[world.dead][0] == JobStatus.PENDING or after[world.dead] != before[world.dead]
    assert after[world.running][0] == JobStatus.CANCELLED
    assert after["log entries"] != before["log entries"]

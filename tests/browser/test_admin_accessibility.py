"""axe-core over every admin page of ours, in light and dark mode, in one headless Chromium.

The pages are not listed by hand: every URL pattern of every ModelAdmin registered
for the ``django_arcature`` app (its own views such as the dashboard included) is
filled in with a row of that model and fetched; each one that answers a GET with
an HTML page is checked. A page added later is checked without touching this
file; a model whose pages need a row this file does not make fails here, saying
which, instead of going unchecked.

axe-core comes from the npm registry, pinned in ``tests/browser/axe/`` and
installed into ``var/npm`` by ``scripts/install-axe.sh`` (``make test`` runs it).
Without it the test fails in CI and skips with a banner elsewhere.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.contrib import admin
from django.contrib.auth.models import User
from django.db import models
from django.test import Client
from django.urls import URLPattern, reverse

from django_arcature import Batch, Workflow
from django_arcature.models import DeadJob, ErrorKind, Job, JobStatus
from django_arcature.queues.control import ensure_rows, pause
from django_arcature.schedules.models import Schedule
from tests.browser.test_admin_browser import PASSWORD, an_hour_of_history, login

# The shared Chromium fixture, imported under its own name so pytest finds it here.
from tests.browser.test_admin_browser import browser as browser
from tests.conftest import IN_CI
from tests.integration.test_admin_support import make_dead, make_running
from tests.testapp import workflow_jobs as wf

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    # What is checked comes from our templates and Django's admin, not from the
    # database: it runs on SQLite in every Python x Django environment.
    pytest.mark.only_on(
        "sqlite", reason="accessibility depends on the templates, not the database"
    ),
]

ROOT = Path(__file__).resolve().parents[2]
AXE_JS = Path(os.environ.get("ARCATURE_AXE_JS", ROOT / "var/npm/node_modules/axe-core/axe.min.js"))
APP_LABEL = "django_arcature"
#: What fails the test; axe's "moderate" and "minor" findings are reported, not fatal.
FATAL_IMPACTS = {"serious", "critical"}
#: Answers to a GET that mean "not a page": a redirect, a refusal, a POST-only view.
NOT_PAGES = {301, 302, 403, 405}
#: The body's background in each theme (Django admin's --body-bg): proof the theme applied.
BODY_BACKGROUND = {"light": "rgb(255, 255, 255)", "dark": "rgb(18, 18, 18)"}


@pytest.fixture
def axe_js() -> str:
    """axe.min.js, asked for before the browser starts: a missing one says so at once."""
    if AXE_JS.is_file():
        return AXE_JS.read_text(encoding="utf-8")
    why = f"axe-core is not installed at {AXE_JS}: run scripts/install-axe.sh (needs npm)"
    if IN_CI:
        pytest.fail(f"CI=true and {why}: the accessibility check never skips in CI")
    print("\n" + "!" * 78 + f"\n!! SKIPPING THE ACCESSIBILITY CHECK: {why}\n" + "!" * 78)
    pytest.skip(why)


@dataclass(frozen=True)
class Page:
    name: str
    url: str


def sample_rows() -> dict[type[models.Model], list[Any]]:
    """Rows whose pages are checked: a job of each kind a change page shows differently,
    and a workflow, a batch, a schedule and a paused queue, so that every model of ours
    has a row for its change page (any other model's first row is taken)."""
    dead = make_dead(1, queue="reports", kind=ErrorKind.TIMEOUT, message="took longer than 30 s")
    running = make_running(1, queue="email", worker="web-3:4713")
    flow = Workflow("accessibility")
    first = flow.add(wf.step, "a")
    flow.add(wf.step, "b", after=[first])
    flow.enqueue()
    waiting = Job.objects.filter(status=JobStatus.WAITING).values_list("pk", flat=True)[:1]
    batch = Batch(on_finish=wf.batch_done, name="accessibility batch")
    batch.add(wf.step, "c")
    batch.enqueue()
    Schedule.objects.create(name="nightly report", task_name="tests.add", cron="0 3 * * *")
    ensure_rows(["email"], "default")
    pause("email", "default")
    return {Job: [running[0], *waiting, dead[0]], DeadJob: dead}


def our_pages(rows: dict[type[models.Model], list[Any]]) -> tuple[list[Page], list[str]]:
    """Every page of our ModelAdmins that a GET renders as HTML, and the patterns left out.

    Patterns with an object id take each sample row (or the model's first row);
    a pattern that answers a GET with a redirect, a refusal (a read-only model's
    add and delete) or 405 (a POST-only button), or with something other than
    HTML, is not a page and is left out, with its status. Any other answer (404,
    500) means the test filled the pattern wrongly, and fails it.
    """
    client = Client()
    client.force_login(User.objects.get(username="operator"))
    pages = [Page("app index", reverse("admin:app_list", kwargs={"app_label": APP_LABEL}))]
    left_out: list[str] = []
    missing: list[str] = []
    for model, model_admin in admin.site._registry.items():
        if model._meta.app_label != APP_LABEL:
            continue
        for pattern in model_admin.get_urls():
            if not isinstance(pattern, URLPattern) or not pattern.name:
                continue
            params = list(pattern.pattern.converters)
            if not params:
                kwarg_sets: list[dict[str, Any]] = [{}]
            elif len(params) == 1:
                # One parameter: the object's id (object_id, or a view of our own's name).
                pks = rows.get(model) or list(
                    model._default_manager.order_by("pk").values_list("pk", flat=True)[:1]
                )
                if not pks:
                    missing.append(f"{model._meta.label} ({pattern.name})")
                    continue
                # Every sample row on the change page (it differs by the row's state),
                # the first one on the others (history …): the same template each time.
                if not pattern.name.endswith("_change"):
                    pks = pks[:1]
                kwarg_sets = [{params[0]: str(pk)} for pk in pks]
            else:
                missing.append(f"{pattern.name}: parameters {params}, which this test cannot fill")
                continue
            for kwargs in kwarg_sets:
                url = reverse(f"admin:{pattern.name}", kwargs=kwargs)
                response = client.get(url)
                html = response.get("Content-Type", "").startswith("text/html")
                if response.status_code == 200 and html:
                    pages.append(Page(pattern.name, url))
                elif response.status_code in NOT_PAGES or response.status_code == 200:
                    left_out.append(f"{url} ({response.status_code})")
                else:  # a 404 or 500: the parameter was filled with the wrong row
                    missing.append(f"{pattern.name}: GET {url} answered {response.status_code}")
    assert not missing, (
        "these admin pages need a row to be checked; make one in sample_rows(): "
        + ", ".join(missing)
    )
    return pages, left_out


RUN_AXE = """
const done = arguments[arguments.length - 1];
axe.run(document, {resultTypes: ["violations"]}).then(
  (results) => done(results.violations.map((v) => ({
    id: v.id, impact: v.impact, help: v.help, helpUrl: v.helpUrl,
    targets: v.nodes.map((n) => ({target: n.target.join(" "), impact: n.impact,
                                  summary: n.failureSummary})),
  }))),
  (error) => done({error: String(error)}),
);
"""

#: Transitions would let axe read a colour halfway between two themes.
NO_TRANSITIONS = """
const style = document.createElement("style");
style.textContent = "*, *::before, *::after { transition: none !important; "
  + "animation: none !important; }";
document.head.appendChild(style);
"""


def set_scheme(driver: Any, scheme: str) -> None:
    driver.execute_cdp_cmd(
        "Emulation.setEmulatedMedia",
        {"features": [{"name": "prefers-color-scheme", "value": scheme}]},
    )


def describe(findings: list[tuple[str, str, dict[str, Any]]]) -> str:
    lines = []
    for page, scheme, violation in findings:
        lines.append(
            f"{page} [{scheme}] {violation['id']} ({violation['impact']}): {violation['help']}"
            f" — {violation['helpUrl']}"
        )
        for node in violation["targets"][:8]:
            lines.append(f"    {node['target']}  ({node['impact']})")
        if len(violation["targets"]) > 8:
            lines.append(f"    … and {len(violation['targets']) - 8} more")
    return "\n".join(lines)


def test_every_admin_page_of_ours_passes_axe_in_light_and_dark_mode(
    axe_js: str, browser: Any, live_server: Any
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    source = axe_js
    User.objects.create_superuser("operator", "ops@example.com", PASSWORD)
    an_hour_of_history()
    rows = sample_rows()
    pages, left_out = our_pages(rows)
    names = {page.name for page in pages}
    # The pages the issue names must be among those found (discovery must not go blind).
    for expected in (
        "django_arcature_dashboard",
        "django_arcature_job_changelist",
        "django_arcature_job_change",
        "django_arcature_deadjob_changelist",
        "django_arcature_deadjob_change",
        "django_arcature_queuestate_changelist",
        "django_arcature_queuestate_change",
        "django_arcature_schedule_changelist",
        "django_arcature_schedule_add",
        "django_arcature_schedule_change",
    ):
        assert expected in names, f"{expected} not found among the admin pages ({left_out=})"

    wait = WebDriverWait(browser, 15)
    browser.set_script_timeout(60)
    login(browser, live_server.url, "/admin/")
    wait.until(expected_conditions.presence_of_element_located((By.ID, "content")))
    findings: list[tuple[str, str, dict[str, Any]]] = []
    minor: list[tuple[str, str, dict[str, Any]]] = []
    try:
        for page in pages:
            set_scheme(browser, "light")
            browser.get(live_server.url + page.url)
            wait.until(expected_conditions.presence_of_element_located((By.ID, "content")))
            assert "/login/" not in browser.current_url, page
            browser.execute_script(NO_TRANSITIONS)
            browser.execute_script(source)
            for scheme in ("light", "dark"):
                set_scheme(browser, scheme)
                background = browser.execute_script(
                    "return getComputedStyle(document.body).backgroundColor"
                )
                assert background == BODY_BACKGROUND[scheme], (page, scheme, background)
                result = browser.execute_async_script(RUN_AXE)
                assert isinstance(result, list), f"axe failed on {page.url}: {result}"
                for violation in result:
                    where = (f"{page.name} {page.url}", scheme, violation)
                    (findings if violation["impact"] in FATAL_IMPACTS else minor).append(where)
    finally:
        set_scheme(browser, "")
    if minor:
        print("axe, moderate or minor (not fatal):\n" + describe(minor))
    print(f"axe checked {len(pages)} pages in light and dark mode; left out: {left_out}")
    assert not findings, "serious or critical accessibility violations:\n" + describe(findings)

"""Handler-controlled text is shown, never run: script payloads in every field, in a real Chromium.

A handler (or whoever can enqueue) controls much of what the admin shows: the
error message and traceback, the result, the attempt log, the payload, the
task and queue names, the worker id. Each of those fields is filled with
script payloads (a ``<script>`` element, ``<img onerror>``, an attribute
break-out into ``<svg onload>``, a ``javascript:`` URL, a ``</pre>`` escape).
Each payload, if it ever ran, would set ``window.__pwned`` or the page title or
open an alert. The test opens every page that shows those fields and checks
that none of that happened, that no link points at a ``javascript:`` URL, and
that the text itself is on the page (so the check is not passing because the
field was never rendered).
"""

from __future__ import annotations

import time
import uuid
from typing import Any
from urllib.parse import quote

import pytest
from django.contrib.auth.models import User

from django_arcature.models import ErrorKind, Job
from tests.browser.test_admin_browser import PASSWORD, browser, login

pytestmark = [
    pytest.mark.browser,
    pytest.mark.heavy,
    pytest.mark.django_db(transaction=True),
    # Whether text is escaped is decided by our templates and Django's admin, not by
    # the database; that hostile text is stored and read back unchanged on every
    # database is tests/properties/test_payload_roundtrip.py's, and the pages are
    # drawn in Chromium on every database by test_admin_browser.py.
    pytest.mark.only_on("sqlite", reason="escaping depends on the templates, not the database"),
]

__all__ = ["browser"]  # the fixture, imported for this module's tests

MARK = "XSS-MARK"
PAYLOADS = (
    f"{MARK}<script>window.__pwned='script';document.title='PWNED'</script>",
    "<img src=x onerror=\"window.__pwned='img';document.title='PWNED'\">",
    "\"><svg onload=\"window.__pwned='svg';document.title='PWNED'\">",
    "'><img src=x onerror=window.__pwned='quote'>",
    "javascript:window.__pwned='url'",
    "</pre></textarea></title><script>alert('pre')</script>",
)
#: For the long text fields: every payload at once.
EVERYTHING = " ".join(PAYLOADS)
#: For the short columns (queue: 100 characters, task and worker: 255).
QUEUE = f"{MARK}<img src=x onerror=window.__pwned='q'>"[:100]
TASK = f"{MARK}\"><svg onload=window.__pwned='task'><script>alert('t')</script>"
WORKER = f"{MARK}<script>window.__pwned='worker'</script>\"><img src=x onerror=alert(1)>"


def hostile_jobs() -> dict[str, uuid.UUID]:
    """A dead, a succeeded, a running and a pending job, every text field hostile.

    Written through the manager as a worker would write them; only the task name
    is then set directly (test data: the manager enqueues registered names only,
    but the admin must show whatever name a row holds, e.g. a renamed task's).
    """
    jobs: dict[str, uuid.UUID] = {}
    log = [
        {
            "worker": EVERYTHING,
            "error": {"exception_class_path": EVERYTHING, "traceback": EVERYTHING},
        }
    ]
    dead = Job.objects.enqueue("tests.fail_permanently", args=[EVERYTHING], queue=QUEUE)
    [claimed] = Job.objects.claim(WORKER, lease=60, batch=1, queues=[QUEUE])
    Job.objects.mark_dead(
        claimed.id,
        claimed.claim_token,
        ErrorKind.PERMANENT,
        EVERYTHING,
        traceback=EVERYTHING,
        attempt_log=log,
    )
    jobs["dead"] = dead.pk
    done = Job.objects.enqueue("tests.fail_permanently", args=[EVERYTHING], queue=QUEUE)
    [claimed] = Job.objects.claim(WORKER, lease=60, batch=1, queues=[QUEUE])
    Job.objects.mark_succeeded(
        claimed.id,
        claimed.claim_token,
        {"html": EVERYTHING, EVERYTHING: [EVERYTHING, 1]},
        attempt_log=log,
    )
    jobs["succeeded"] = done.pk
    running = Job.objects.enqueue(
        "tests.fail_permanently", kwargs={"reason": EVERYTHING}, queue=QUEUE
    )
    Job.objects.claim(WORKER, lease=60, batch=1, queues=[QUEUE])
    jobs["running"] = running.pk
    pending = Job.objects.enqueue(
        "tests.fail_permanently",
        args=[EVERYTHING],
        queue=QUEUE,
        delay=3600,
        unique_key=TASK,
    )
    jobs["pending"] = pending.pk
    Job.objects.filter(pk__in=jobs.values()).update(task_name=TASK)
    return jobs


def assert_nothing_ran(driver: Any, where: str) -> None:
    from selenium.common.exceptions import NoAlertPresentException

    time.sleep(0.4)  # an <img onerror> fires after its load fails, just after the page loads
    try:
        alert = driver.switch_to.alert
        text = alert.text
        alert.dismiss()
        raise AssertionError(f"{where}: an alert opened: {text!r}")
    except NoAlertPresentException:
        pass
    assert driver.execute_script("return window.__pwned === undefined"), (
        f"{where}: a payload ran ({driver.execute_script('return window.__pwned')!r})"
    )
    assert driver.title != "PWNED", where
    links = driver.execute_script(
        "return Array.from(document.querySelectorAll('[href],[src],[action],[formaction]'))"
        ".map(e => e.getAttribute('href') || e.getAttribute('src') || e.getAttribute('action')"
        " || e.getAttribute('formaction') || '')"
    )
    assert not [u for u in links if u.strip().lower().startswith("javascript:")], where
    handlers = driver.execute_script(
        "return Array.from(document.querySelectorAll('*')).flatMap(e => "
        "Array.from(e.attributes).filter(a => a.name.startsWith('on') && "
        "a.value.includes('pwned')).map(a => e.tagName + ' ' + a.name))"
    )
    assert handlers == [], f"{where}: event handlers from the data: {handlers}"
    scripts = driver.execute_script(
        "return Array.from(document.scripts).filter(s => s.text.includes('pwned')).length"
    )
    assert scripts == 0, f"{where}: a <script> element from the data"


def test_no_handler_text_runs_on_any_admin_page(browser: Any, live_server: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    User.objects.create_superuser("operator", "ops@example.com", PASSWORD)
    jobs = hostile_jobs()
    base = live_server.url
    login(browser, base, "/admin/")
    assert_nothing_ran(browser, "login")

    pages = {
        "job list": "/admin/django_arcature/job/",
        "job list, filtered by the hostile queue and task": (
            f"/admin/django_arcature/job/?queue={quote(QUEUE)}&task={quote(TASK)}"
        ),
        "job list, searching for a payload": f"/admin/django_arcature/job/?q={quote(PAYLOADS[0])}",
        "dead letters": "/admin/django_arcature/deadjob/",
        "dashboard": "/admin/django_arcature/job/dashboard/",
    }
    for name, job_id in jobs.items():
        pages[f"{name} job's page"] = f"/admin/django_arcature/job/{job_id}/change/"
        pages[f"{name} job's history"] = f"/admin/django_arcature/job/{job_id}/history/"
    pages["dead letter's page"] = f"/admin/django_arcature/deadjob/{jobs['dead']}/change/"

    shown_on = []
    for where, path in pages.items():
        browser.get(base + path)
        browser.find_element(By.ID, "content")
        assert_nothing_ran(browser, where)
        if MARK in browser.find_element(By.TAG_NAME, "body").text:
            shown_on.append(where)
    # The text is there, as text, on every page that shows these fields.
    expected = set(pages) - {"job list, searching for a payload"}
    assert set(shown_on) >= expected, sorted(expected - set(shown_on))

    # The operator's buttons still work on a hostile job (no broken markup).
    browser.get(f"{base}/admin/django_arcature/job/{jobs['dead']}/change/")
    browser.find_element(By.CSS_SELECTOR, ".arcature-button-requeue").click()
    # The click submits a form: wait for the page it leads to, which says what happened.
    WebDriverWait(browser, 20).until(
        lambda driver: driver.find_elements(By.CSS_SELECTOR, ".messagelist")
    )
    assert_nothing_ran(browser, "after requeue")
    assert Job.objects.get(pk=jobs["dead"]).status == "pending"

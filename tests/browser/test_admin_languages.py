"""The admin in French and Japanese, in a real headless Chromium.

The language comes from the ``django_language`` cookie that Django's
``LocaleMiddleware`` reads (tests/settings.py), so the shared ``browser``
fixture of test_admin_browser.py serves every language unchanged. Each page is
checked for translated headings, counts grouped the locale's way and dates in
the locale's format: what an operator reading their own language would see.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import dates, timezone, translation

from django_arcature.models import Job
from tests.browser.test_admin_browser import PASSWORD, login

# The shared Chromium fixture, imported under its own name so pytest finds it here.
from tests.browser.test_admin_browser import browser as browser
from tests.integration.test_admin_support import enqueue, make_dead

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    # The words, number grouping and date formats come from our catalogues and
    # Django's locale formats, not from the database; the counts themselves are
    # read on every database by tests/integration/test_admin_dashboard.py and the
    # pages are drawn in Chromium on every database by test_admin_browser.py.
    pytest.mark.only_on(
        "sqlite", reason="the translations depend on the catalogues, not the database"
    ),
]

READY = 1234

#: Per language: what the pages must show. The month name is looked up in
#: Django's own catalogue at run time (the pages show today's date).
LANGUAGES: dict[str, dict[str, Any]] = {
    "fr": {
        "ready": "1\xa0234",  # French groups thousands with a non-breaking space
        "summary": "1\xa0234 prêtes, 0 en cours",
        "home": "Accueil",
        "dashboard_title": "Tableau de bord des files",
        "queues_heading": "Files",
        "read_at": re.compile(r"relevés le (\d{1,2}) (\w+) (\d{4}) \d{2}:\d{2}"),
        "status_column": "STATUT",
        "pending": "en attente",
        "fieldset": "Arguments et résultat",
        "created_label": "Créée le",
        "date": re.compile(r"(\d{1,2}) (\w+) (\d{4}) \d{2}:\d{2}"),
        "cancel_button": "Annuler",
        "requeue_action": "Remettre en file les tâches abandonnées sélectionnées",
        "dead_breadcrumb": "Tâches abandonnées",
    },
    "ja": {
        "ready": "1,234",
        "summary": "実行可能 1,234 件、実行中 0 件",
        "home": "ホーム",
        "dashboard_title": "キューのダッシュボード",
        "queues_heading": "キュー",
        "read_at": re.compile(r"\((\d{4})年(\d{1,2})月(\d{1,2})日\d{1,2}:\d{2} 時点\)"),
        "status_column": "ステータス",
        "pending": "待機中",
        "fieldset": "引数と結果",
        "created_label": "作成日時",
        "date": re.compile(r"(\d{4})年(\d{1,2})月(\d{1,2})日\d{1,2}:\d{2}"),
        "cancel_button": "キャンセル",
        "requeue_action": "選択されたデッドジョブをキューに戻す",
        "dead_breadcrumb": "デッドレター",
    },
}


def in_language(language: str, today: Any) -> str:
    """Today's month as the page prints it in ``language`` (French name, Japanese number)."""
    if language == "ja":
        return str(today.month)
    with translation.override(language):
        return str(dates.MONTHS[today.month])


@pytest.mark.parametrize("language", sorted(LANGUAGES))
def test_pages_in_the_operators_language(browser: Any, live_server: Any, language: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.select import Select
    from selenium.webdriver.support.ui import WebDriverWait

    expect = LANGUAGES[language]
    User.objects.create_superuser("operator", "ops@example.com", PASSWORD)
    pending = enqueue(READY, "email", run_at=None)
    make_dead(2, queue="reports")  # its own queue: it claims the oldest pending jobs of it
    today = timezone.localdate()
    month = in_language(language, today)
    wait = WebDriverWait(browser, 15)

    login(browser, live_server.url, "/admin/")
    wait.until(expected_conditions.presence_of_element_located((By.ID, "content")))
    browser.add_cookie({"name": "django_language", "value": language, "path": "/"})

    # The dashboard: translated headings, a grouped count, the reading time's date.
    browser.get(f"{live_server.url}/admin/django_arcature/job/dashboard/")
    queues = wait.until(expected_conditions.presence_of_element_located((By.ID, "arcature-queues")))
    assert browser.find_element(By.TAG_NAME, "html").get_attribute("lang") == language
    assert expect["home"] in browser.find_element(By.CSS_SELECTOR, ".breadcrumbs").text
    assert expect["dashboard_title"] in browser.title
    headings = [h.text for h in browser.find_elements(By.CSS_SELECTOR, "#content-main h2")]
    assert expect["queues_heading"] in headings
    ready_cell = queues.find_element(By.CSS_SELECTOR, 'tr[data-queue="email"] td')
    # textContent, not .text: WebDriver's visible text turns a non-breaking space into a space.
    assert ready_cell.get_attribute("textContent") == expect["ready"]
    summary = browser.find_element(By.CSS_SELECTOR, ".arcature-summary")
    assert expect["summary"] in (summary.get_attribute("textContent") or "")
    read_at = expect["read_at"].search(browser.find_element(By.ID, "content-main").text)
    assert read_at is not None, "the dashboard's reading time is not in the locale's format"
    assert month in read_at.groups()
    assert str(today.year) in read_at.groups()

    # The job list: translated column headers and status labels.
    browser.get(f"{live_server.url}/admin/django_arcature/job/?status=pending")
    table = wait.until(expected_conditions.presence_of_element_located((By.ID, "result_list")))
    header = table.find_element(By.CSS_SELECTOR, "thead").text
    assert expect["status_column"] in header.upper()
    assert expect["pending"] in table.find_element(By.CSS_SELECTOR, "tbody tr").text
    assert expect["home"] in browser.find_element(By.CSS_SELECTOR, ".breadcrumbs").text

    # A job's page: fieldset headings, field labels, dates in the locale's format, the buttons.
    browser.get(f"{live_server.url}/admin/django_arcature/job/{pending[0]}/change/")
    wait.until(expected_conditions.presence_of_element_located((By.ID, "content-main")))
    fieldsets = [h.text for h in browser.find_elements(By.CSS_SELECTOR, "fieldset h2")]
    assert expect["fieldset"] in fieldsets
    created = browser.find_element(By.CSS_SELECTOR, ".field-created_at")
    assert expect["created_label"] in created.text
    shown = expect["date"].search(created.text)
    assert shown is not None, f"{created.text!r} is not a date in the locale's format"
    assert month in shown.groups()
    buttons = [
        (b.get_attribute("textContent") or "").strip()
        for b in browser.find_elements(By.CSS_SELECTOR, ".arcature-operation button")
    ]
    assert expect["cancel_button"] in buttons

    # The dead-letter page: breadcrumbs and the translated action.
    browser.get(f"{live_server.url}/admin/django_arcature/deadjob/")
    wait.until(expected_conditions.presence_of_element_located((By.ID, "result_list")))
    assert expect["dead_breadcrumb"] in browser.find_element(By.CSS_SELECTOR, ".breadcrumbs").text
    options = [o.text for o in Select(browser.find_element(By.NAME, "action")).options]
    assert expect["requeue_action"] in options
    assert Job.objects.count() == READY + 2

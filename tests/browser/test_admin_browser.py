"""The operator's console in a real headless Chromium, against the configured database.

Log in, open the dead-letter page, select jobs, requeue them and find them
pending; open the dashboard and check the chart is drawn, in light and dark
themes. Screenshots go to a temporary directory, or to ``docs/screenshots/``
with ``ARCATURE_SAVE_SCREENSHOTS=1`` (how the pictures in the README and docs/ are made).
"""

from __future__ import annotations

import base64
import os
import shutil
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.db.models import F

from django_arcature.models import ErrorKind, Job, JobStatus
from tests.integration.test_admin_support import (
    enqueue,
    make_dead,
    make_running,
    make_scheduled,
    make_succeeded,
)

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
PASSWORD = "correct horse battery staple"


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Any]:
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        pytest.skip("needs Debian's chromium and chromium-driver (apt-get install chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1440,900",
        "--force-device-scale-factor=1",
        "--lang=en-US",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def screenshot(driver: Any, tmp_path: Path, name: str) -> Path:
    """A full-page PNG (through the DevTools protocol); copied to docs/screenshots/ if asked."""
    size = driver.execute_cdp_cmd("Page.getLayoutMetrics", {})["cssContentSize"]
    shot = driver.execute_cdp_cmd(
        "Page.captureScreenshot",
        {
            "format": "png",
            "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1},
        },
    )
    target = tmp_path / name
    target.write_bytes(base64.b64decode(shot["data"]))
    assert target.read_bytes().startswith(b"\x89PNG")
    if os.environ.get("ARCATURE_SAVE_SCREENSHOTS") == "1":
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(target, SCREENSHOTS / name)
    return target


def an_hour_of_history() -> list[uuid.UUID]:
    """Jobs in every state, finished over the last hour so the chart has a shape.

    The manager stamps finish times with the database's now; the test then moves
    them back in time (test data only: the admin itself never writes rows).
    """
    dead = make_dead(3, queue="email", message="SMTP 550: mailbox unavailable")
    dead += make_dead(1, queue="reports", kind=ErrorKind.TIMEOUT, message="took longer than 30 s")
    dead += make_dead(1, queue="email", kind=ErrorKind.EXHAUSTED, message="connection refused")
    for minutes_ago in range(0, 60, 3):
        finished = make_succeeded(2 + (minutes_ago * 7) % 9, queue="email", worker="web-1:4711")
        Job.objects.filter(pk__in=finished).update(
            finished_at=F("finished_at") - timedelta(minutes=minutes_ago)
        )
    for minutes_ago in (50, 31, 12, 4):
        failed = make_dead(1, queue="reports", kind=ErrorKind.PANIC, message="worker crashed")
        Job.objects.filter(pk__in=failed).update(
            finished_at=F("finished_at") - timedelta(minutes=minutes_ago)
        )
    make_running(2, queue="email", worker="web-2:4712")
    enqueue(6, "email", run_at=None)
    make_scheduled(3, queue="reports")
    return dead


def login(driver: Any, base: str, next_url: str) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(f"{base}/admin/login/?next={next_url}")
    driver.find_element(By.NAME, "username").send_keys("operator")
    driver.find_element(By.NAME, "password").send_keys(PASSWORD)
    driver.find_element(By.CSS_SELECTOR, "input[type=submit], button[type=submit]").click()
    # The click returns before the POST's redirect lands: a caller's next get() could
    # be overtaken by it and read the admin index instead of the page it asked for.
    WebDriverWait(driver, 15).until(
        lambda d: (
            "/admin/login/" not in d.current_url
            and d.execute_script("return document.readyState") == "complete"
        )
    )


def test_requeue_dead_jobs_and_read_the_dashboard(
    browser: Any, live_server: Any, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.select import Select
    from selenium.webdriver.support.ui import WebDriverWait

    User.objects.create_superuser("operator", "ops@example.com", PASSWORD)
    dead = an_hour_of_history()
    chosen = dead[:2]
    wait = WebDriverWait(browser, 15)

    login(browser, live_server.url, "/admin/django_arcature/deadjob/")
    wait.until(expected_conditions.presence_of_element_located((By.ID, "result_list")))
    assert "Dead letters" in browser.title or "dead job" in browser.title
    rows = browser.find_elements(By.CSS_SELECTOR, "#result_list tbody tr")
    assert len(rows) == Job.objects.filter(status=JobStatus.DEAD).count() == 9
    assert "SMTP 550: mailbox unavailable" in browser.find_element(By.ID, "result_list").text
    screenshot(browser, tmp_path, "dead-letters.png")

    for job_id in chosen:
        browser.find_element(
            By.CSS_SELECTOR, f'input[name="_selected_action"][value="{job_id}"]'
        ).click()
    Select(browser.find_element(By.NAME, "action")).select_by_value("requeue_jobs")
    browser.find_element(By.CSS_SELECTOR, 'button[name="index"]').click()
    message = wait.until(
        expected_conditions.presence_of_element_located((By.CSS_SELECTOR, ".messagelist .success"))
    )
    assert message.text == "Requeued 2 jobs."
    listed = browser.find_element(By.ID, "result_list").text
    for job_id in chosen:
        assert job_id.hex[-8:] not in listed
    assert dead[2].hex[-8:] in listed

    browser.get(f"{live_server.url}/admin/django_arcature/job/?status=pending&queue=email")
    table = wait.until(expected_conditions.presence_of_element_located((By.ID, "result_list")))
    for job_id in chosen:
        row = table.find_element(By.XPATH, f'.//tr[.//input[@value="{job_id}"]]')
        assert "pending" in row.text
        assert "0 / " in row.text  # attempts start again
    assert {Job.objects.get(pk=i).status for i in chosen} == {JobStatus.PENDING}

    browser.get(f"{live_server.url}/admin/django_arcature/job/dashboard/")
    chart = wait.until(
        expected_conditions.presence_of_element_located((By.ID, "arcature-throughput-chart"))
    )
    assert chart.tag_name == "svg"
    assert len(chart.find_elements(By.CSS_SELECTOR, "g.arcature-minute")) == 60
    succeeded_bars = chart.find_elements(By.CSS_SELECTOR, "rect.arcature-bar-succeeded")
    failed_bars = chart.find_elements(By.CSS_SELECTOR, "rect.arcature-bar-failed")
    assert len(succeeded_bars) >= 18  # one every third minute, over the hour
    assert len(failed_bars) >= 4
    succeeded = Job.objects.filter(status=JobStatus.SUCCEEDED).count()
    assert int(chart.get_attribute("data-succeeded") or "-1") == succeeded
    assert int(chart.get_attribute("data-failed") or "-1") == 9 - 2  # the two requeued left
    assert chart.size["width"] > 500  # laid out, not collapsed
    assert succeeded_bars[0].size["height"] > 0
    light_fill = browser.execute_script(
        "return getComputedStyle(arguments[0]).fill", succeeded_bars[0]
    )
    assert light_fill == "rgb(65, 120, 147)"  # the admin's --link-fg in the light theme
    queues = browser.find_element(By.ID, "arcature-queues").text
    assert "email" in queues
    assert "reports" in queues
    assert "web-2:4712" in browser.find_element(By.ID, "arcature-workers").text
    screenshot(browser, tmp_path, "dashboard.png")

    browser.execute_script("document.documentElement.dataset.theme = 'dark'")
    dark_fill = browser.execute_script(
        "return getComputedStyle(arguments[0]).fill", succeeded_bars[0]
    )
    assert dark_fill != light_fill  # the chart follows the admin's dark theme
    screenshot(browser, tmp_path, "dashboard-dark.png")

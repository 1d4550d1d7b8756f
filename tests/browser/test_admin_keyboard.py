"""Every action of our pages reached with the Tab key alone, each with a visible focus ring.

On the dashboard, the job list and a job's page, Tab is pressed until the focus
comes round again; every link, button, select, input and disclosure that the
page's content shows must have been focused once, in an order the page gives
(no positive tabindex), and drawn with an outline or a shadow while focused.
Then the keyboard acts: Enter on a job's Cancel button cancels it, and the
admin action select and its Go button run an action from the keyboard.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User

from django_arcature.models import Job, JobStatus
from tests.browser.test_admin_browser import PASSWORD, login

# The shared Chromium fixture, imported under its own name so pytest finds it here.
from tests.browser.test_admin_browser import browser as browser
from tests.integration.test_admin_support import (
    enqueue,
    make_dead,
    make_running,
    make_scheduled,
    make_succeeded,
)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.django_db(transaction=True),
    # What is checked comes from our templates and Django's admin, not from the
    # database: it runs on SQLite in every Python x Django environment.
    pytest.mark.only_on(
        "sqlite", reason="accessibility depends on the templates, not the database"
    ),
]

#: What a keyboard user must be able to reach in the page's content.
TARGETS = """
const selector = 'a[href], button, select, textarea, summary, input:not([type="hidden"]),'
  + ' [tabindex]:not([tabindex="-1"])';
const content = document.getElementById("content");
const shown = (el) => el.getClientRects().length > 0
  && getComputedStyle(el).visibility !== "hidden";
const targets = [...content.querySelectorAll(selector)].filter((el) => !el.disabled && shown(el));
targets.forEach((el, index) => el.setAttribute("data-keyboard-target", String(index)));
return targets.map((el) => ({
  index: targets.indexOf(el),
  what: el.tagName.toLowerCase() + (el.name ? "[name=" + el.name + "]" : "")
        + " " + (el.innerText || el.value || el.getAttribute("aria-label") || "")
          .trim().slice(0, 40),
  tabindex: el.getAttribute("tabindex"),
}));
"""

FOCUSED = """
const el = document.activeElement;
if (!el || el === document.body) return null;
const style = getComputedStyle(el);
return {
  target: el.getAttribute("data-keyboard-target"),
  outline: style.outlineStyle !== "none" && parseFloat(style.outlineWidth) > 0,
  shadow: style.boxShadow !== "none",
  what: el.tagName.toLowerCase() + " " + (el.innerText || el.value || "").trim().slice(0, 40),
};
"""


def tab_through(driver: Any, limit: int = 400) -> tuple[list[dict[str, Any]], list[str]]:
    """Press Tab until the focus comes back to the first element; the targets and the
    ones never reached or reached without a focus indicator."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    targets = driver.execute_script(TARGETS)
    assert targets, "no focusable element in #content"
    driver.execute_script("document.activeElement && document.activeElement.blur()")
    reached: dict[str, dict[str, Any]] = {}
    first = None
    for _ in range(limit):
        ActionChains(driver).send_keys(Keys.TAB).perform()
        focused = driver.execute_script(FOCUSED)
        if focused is None:
            continue  # the browser's own chrome, between the page's last and first stop
        key = f"{focused['target']}:{focused['what']}"
        if key == first:
            break
        first = first or key
        if focused["target"] is not None:
            reached[focused["target"]] = focused
    problems = []
    for target in targets:
        if target["tabindex"] not in (None, "0"):
            problems.append(f"{target['what']}: tabindex={target['tabindex']} changes the order")
        seen = reached.get(str(target["index"]))
        if seen is None:
            problems.append(f"{target['what']}: never reached with Tab")
        elif not (seen["outline"] or seen["shadow"]):
            problems.append(f"{target['what']}: no visible focus indicator")
    return targets, problems


def focus_by_tab(driver: Any, css: str, limit: int = 400) -> Any:
    """Tab from the top of the page until ``css`` has the focus (never a click)."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    wanted = driver.find_element("css selector", css)
    driver.execute_script("document.activeElement && document.activeElement.blur()")
    for _ in range(limit):
        ActionChains(driver).send_keys(Keys.TAB).perform()
        if driver.switch_to.active_element == wanted:
            return wanted
    raise AssertionError(f"{css} was not reached with Tab")


def test_every_action_is_reachable_and_usable_by_keyboard(browser: Any, live_server: Any) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    User.objects.create_superuser("operator", "ops@example.com", PASSWORD)
    make_succeeded(3, queue="email")
    make_dead(2, queue="reports")
    make_running(1, queue="email")
    [to_cancel, *_] = enqueue(3, "email", run_at=None)
    [to_run_now] = make_scheduled(1, queue="email")
    wait = WebDriverWait(browser, 15)
    login(browser, live_server.url, "/admin/")
    wait.until(expected_conditions.presence_of_element_located((By.ID, "content")))
    problems: dict[str, list[str]] = {}

    def page(path: str, ready: str) -> None:
        browser.get(live_server.url + path)
        wait.until(expected_conditions.presence_of_element_located((By.CSS_SELECTOR, ready)))

    # The dashboard: its links, and the disclosure of the chart's numbers, opened by Enter.
    page("/admin/django_arcature/job/dashboard/", "#arcature-throughput-chart")
    targets, problems["dashboard"] = tab_through(browser)
    assert any(t["what"].startswith("summary") for t in targets)
    summary = focus_by_tab(browser, ".arcature-chart-data summary")
    summary.send_keys(Keys.ENTER)
    assert browser.find_element(By.ID, "arcature-chart-table").is_displayed()

    # The job list: the search box, filters, every row's checkbox and links, action + Go.
    page("/admin/django_arcature/job/?status=pending", "#result_list")
    targets, problems["job list"] = tab_through(browser)
    whats = " | ".join(t["what"] for t in targets)
    assert "select[name=action]" in whats
    assert "button[name=index]" in whats
    box = focus_by_tab(browser, f'input[name="_selected_action"][value="{to_run_now}"]')
    box.send_keys(Keys.SPACE)
    action = focus_by_tab(browser, 'select[name="action"]')
    # Typing a label's first letters picks it in a focused select, as a keyboard user would.
    ActionChains(browser).send_keys("Run selected").perform()
    assert action.get_attribute("value") == "run_jobs_now"
    ActionChains(browser).send_keys(Keys.TAB).perform()
    go = browser.switch_to.active_element
    assert go.get_attribute("name") == "index"
    go.send_keys(Keys.ENTER)
    wait.until(
        expected_conditions.presence_of_element_located((By.CSS_SELECTOR, ".messagelist .success"))
    )
    assert (
        browser.find_element(By.CSS_SELECTOR, ".messagelist .success").text
        == "Made 1 job available now."
    )

    # A job's page: the Cancel and Run now buttons, reached and pressed with the keyboard.
    page(f"/admin/django_arcature/job/{to_cancel}/change/", "#content-main")
    targets, problems["job page"] = tab_through(browser)
    whats = " | ".join(t["what"] for t in targets)
    assert "button[name=operation] Cancel" in whats or "button[name=operation] CANCEL" in whats
    cancel = focus_by_tab(browser, "button.arcature-button-cancel")
    cancel.send_keys(Keys.ENTER)
    wait.until(
        expected_conditions.presence_of_element_located((By.CSS_SELECTOR, ".messagelist li"))
    )
    assert Job.objects.get(pk=to_cancel).status == JobStatus.CANCELLED

    # A dead job's page: its Requeue button.
    dead = Job.objects.filter(status=JobStatus.DEAD).values_list("pk", flat=True)[0]
    page(f"/admin/django_arcature/deadjob/{dead}/change/", "#content-main")
    targets, problems["dead job page"] = tab_through(browser)
    assert any("requeue" in t["what"].lower() for t in targets)

    found = {name: found for name, found in problems.items() if found}
    assert not found, "keyboard problems:\n" + "\n".join(
        f"{name}: {problem}" for name, items in found.items() for problem in items
    )

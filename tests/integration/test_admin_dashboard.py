"""The queue dashboard: counts, lag, the per-minute chart and the workers, on every database."""

from __future__ import annotations

import datetime
import re
from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from django_arcature.admin.dashboard import Minute, build_chart, collect, format_age, nice_ceiling
from django_arcature.models import Job

from .test_admin_support import enqueue, make_dead, make_running, make_scheduled, make_succeeded

DASHBOARD = reverse("admin:django_arcature_dashboard")


@pytest.mark.django_db
def test_counts_per_queue_lag_and_workers() -> None:
    make_dead(2, queue="mail", worker="host-1")
    make_succeeded(3, queue="mail", worker="host-1")
    make_running(1, queue="mail", worker="host-2")
    enqueue(4, "mail", run_at=timezone.now() - timedelta(minutes=5))
    make_scheduled(2, queue="reports")
    [cancelled] = enqueue(1, "reports")
    Job.objects.cancel(cancelled)

    data = collect()
    queues = {q.queue: q for q in data.queues}
    mail, reports = queues["mail"], queues["reports"]
    assert (mail.ready, mail.scheduled, mail.running, mail.dead) == (4, 0, 1, 2)
    assert (mail.succeeded_last_hour, mail.failed_last_hour) == (3, 2)
    assert mail.lag.startswith("5 min")
    assert (reports.ready, reports.scheduled, reports.cancelled_last_hour) == (0, 2, 1)
    assert reports.lag == ""
    assert data.totals == {"succeeded": 3, "failed": 2, "ready": 4, "running": 1, "dead": 2}
    assert len(data.minutes) == 60
    assert (data.minutes[-1].succeeded, data.minutes[-1].failed) == (3, 2)
    workers = {w.name: w for w in data.workers}
    assert (workers["host-1"].running, workers["host-1"].finished_last_hour) == (0, 5)
    assert (workers["host-2"].running, workers["host-2"].finished_last_hour) == (1, 0)
    assert workers["host-2"].last_seen is not None


@pytest.mark.django_db
def test_the_page_draws_the_chart_inline(admin_client: Client) -> None:
    make_succeeded(3)
    make_dead(1)
    page = admin_client.get(DASHBOARD).content.decode()
    start = page.index('<svg id="arcature-throughput-chart"')
    svg = page[start : page.index("</svg>", start)]
    assert 'data-succeeded="3" data-failed="1"' in svg
    assert svg.count('class="arcature-minute"') == 60
    assert svg.count("arcature-bar-succeeded") == 1
    assert svg.count("arcature-bar-failed") == 1
    assert not re.search(r"""(src|href)=["']https?://""", page)  # works offline: no CDN


@pytest.mark.django_db
def test_viewers_may_open_the_dashboard(client: Client) -> None:
    from .test_admin_support import client_for, staff

    assert client_for(staff("viewer", "view_job")).get(DASHBOARD).status_code == 200
    assert client.get(DASHBOARD).status_code == 302


def test_nice_ceiling() -> None:
    assert [nice_ceiling(v) for v in (0, 1, 2, 3, 7, 11, 99, 101, 4000)] == [
        1,
        1,
        2,
        5,
        10,
        20,
        100,
        200,
        5000,
    ]


def test_format_age() -> None:
    assert [format_age(s) for s in (0, 42.9, 185, 7800, 90000, -3)] == [
        "0 s",
        "42 s",
        "3 min 5 s",
        "2 h 10 min",
        "1 d 1 h",
        "0 s",
    ]


def test_chart_geometry_stacks_failed_on_succeeded() -> None:
    start = datetime.datetime(2026, 1, 1, 12, 0, tzinfo=datetime.UTC)
    minutes = [Minute(start + timedelta(minutes=i), i % 3, 1 if i == 59 else 0) for i in range(60)]
    chart = build_chart(minutes, width=720, height=220)
    assert chart.y_max == 5  # tallest bar is 2 + 1 = 3 → 5
    last = chart.bars[-1]
    bottom = chart.plot_bottom
    assert float(last.succeeded_y) + float(last.succeeded_height) == pytest.approx(bottom)
    assert float(last.failed_y) + float(last.failed_height) == pytest.approx(
        float(last.succeeded_y)
    )
    plot = bottom - chart.plot_top
    assert float(last.succeeded_height) == pytest.approx(plot * 2 / 5)
    assert float(last.failed_height) == pytest.approx(plot * 1 / 5)
    assert [t.label for t in chart.x_ticks] == ["-60 min", "-45 min", "-30 min", "-15 min", "now"]
    assert float(chart.x_ticks[0].position) == pytest.approx(chart.plot_left)
    assert float(chart.x_ticks[-1].position) == pytest.approx(chart.plot_right)
    assert not chart.empty
    assert build_chart([Minute(start, 0, 0)] * 60).empty


@pytest.mark.django_db
def test_per_task_failure_rate_and_run_time_percentiles(admin_client: Client) -> None:
    """Twelve first-attempt runs (two instant deaths, ten of 100 ms … 1 s): p50 is the 6th,
    400 ms, and p95 the 12th, 1 s (nearest rank)."""
    done = make_succeeded(10, queue="timed")
    dead = make_dead(2, queue="timed")  # tests.add too: 2 of 12 died
    now = timezone.now()
    Job.objects.filter(pk__in=dead).update(started_at=now, finished_at=now)
    for index, job_id in enumerate(done, start=1):
        Job.objects.filter(pk=job_id).update(
            started_at=now - timedelta(seconds=index / 10), finished_at=now
        )
    # A retried job's started_at is its first claim's: it does not count for run time.
    [retried] = make_succeeded(1, queue="slow-retried")
    Job.objects.filter(pk=retried).update(
        task_name="tests.noop", attempts=2, started_at=now - timedelta(hours=0.5), finished_at=now
    )
    data = collect()
    tasks = {row.task: row for row in data.tasks}
    add = tasks["tests.add"]
    assert (add.succeeded, add.dead, add.failure_rate) == (10, 2, "16.7%")
    assert (add.p50, add.p95) == ("400 ms", "1.0 s")
    noop = tasks["tests.noop"]
    assert (noop.succeeded, noop.failure_rate, noop.p50) == (1, "0.0%", "")
    page = admin_client.get(DASHBOARD).content.decode()
    start = page.index('<tr data-task="tests.add">')
    row = page[start : page.index("</tr>", start)]
    assert "16.7%" in row
    assert "400 ms" in row
    assert "1.0 s" in row


@pytest.mark.django_db
def test_past_the_limit_dead_counts_are_estimates_not_a_count_of_every_dead_row(
    admin_client: Client, monkeypatch: pytest.MonkeyPatch, vendor: str
) -> None:
    """An all-time COUNT of dead rows reads them all (2 s for 200,000 in a table of
    10,000,000): past the limit the dashboard asks the planner instead, per queue."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from django_arcature.admin import dashboard

    monkeypatch.setattr(dashboard, "DEAD_COUNT_LIMIT", 3)
    make_dead(4, queue="mail")
    make_dead(1, queue="reports")
    with CaptureQueriesContext(connection) as captured:
        response = admin_client.get(DASHBOARD)
    assert response.status_code == 200
    data = response.context["dashboard"]
    dead_counts = [
        q["sql"]
        for q in captured.captured_queries
        if "COUNT(" in q["sql"].upper()
        and "'dead'" in q["sql"]
        and 'finished_at" >=' not in q["sql"]
        and "finished_at` >=" not in q["sql"]
    ]
    queues = {q.queue: q.dead for q in data.queues}
    if vendor == "sqlite":  # no estimates to ask for: counted exactly
        assert not data.dead_estimated
        assert (queues["mail"], queues["reports"]) == (4, 1)
        assert data.dead_total_label == "5"
    else:
        assert data.dead_estimated
        assert [q for q in dead_counts if "LIMIT 4" in q], dead_counts  # the bounded count
        assert all("LIMIT 4" in q for q in dead_counts), dead_counts  # and no other count
        assert queues["mail"] >= 1  # the planner's guesses
        assert queues["reports"] >= 1
        assert data.dead_total_label.startswith("~")
        assert b"Dead counts marked ~ are the database" in response.content


@pytest.mark.django_db
def test_under_the_limit_dead_counts_are_exact() -> None:
    make_dead(2, queue="mail")
    data = collect()
    assert not data.dead_estimated
    assert {q.queue: q.dead for q in data.queues}["mail"] == 2
    assert data.dead_total_label == "2"


@pytest.mark.django_db
def test_the_chart_has_a_text_alternative_and_a_table_of_the_same_numbers(
    admin_client: Client,
) -> None:
    """A screen reader hears the chart's name and summary and can read every minute's numbers;
    the failed series is hatched, so it is told from the succeeded one without its colour."""
    make_succeeded(3)
    make_dead(1)
    page = admin_client.get(DASHBOARD).content.decode()
    start = page.index('<svg id="arcature-throughput-chart"')
    svg = page[start : page.index("</svg>", start)]
    assert 'role="img"' in svg
    assert 'aria-labelledby="arcature-chart-title"' in svg
    assert 'aria-describedby="arcature-chart-desc"' in svg
    assert '<title id="arcature-chart-title">Jobs finished per minute, last hour</title>' in svg
    assert "3 jobs succeeded and 1 failed in the last 60 minutes." in svg
    assert re.search(
        r'<rect class="arcature-bar-failed" fill="url\(#arcature-failed-pattern\)"', svg
    )
    assert '<pattern id="arcature-failed-pattern"' in svg
    assert "arcature-bar-succeeded" in svg
    assert not re.search(r'class="arcature-bar-succeeded"[^>]*fill=', svg)  # solid: CSS fill

    table_at = page.index('<table id="arcature-chart-table">')
    table = page[table_at : page.index("</table>", table_at)]
    assert page.rfind("<details", 0, table_at) > page.rfind("</details>", 0, table_at)
    assert "<caption>Jobs finished per minute, last hour</caption>" in table
    assert table.count('<th scope="col"') == 3
    rows = re.findall(
        r'<tr>\s*<th scope="row"><time datetime="([^"]+)">(\d\d:\d\d)</time></th>\s*'
        r'<td class="arcature-num">(\d+)</td>\s*<td class="arcature-num">(\d+)</td>',
        table,
    )
    assert len(rows) == 60
    minutes = re.findall(
        r'<g class="arcature-minute" data-succeeded="(\d+)" data-failed="(\d+)"', svg
    )
    assert [(s, f) for _, _, s, f in rows] == minutes
    assert (rows[-1][2], rows[-1][3]) == ("3", "1")
    assert datetime.datetime.fromisoformat(rows[-1][0]) <= timezone.now()

"""The queue dashboard: per-queue counts, lag, throughput over the last hour, workers.

Grouped queries, each bounded by an index instead of the table's size:
live jobs by ``(status, queue, …)``, dead jobs counted up to a limit and then
estimated (``_dead_counts``), the last hour's finished jobs by
``(status, finished_at)`` (per queue and minute, then per task), and running
jobs by ``(status, lease_expires_at)``; and one sample of at most
``RUN_TIME_SAMPLE`` of the last hour's finished jobs, newest first on the same
index, for each task's p50/p95 run time.
Succeeded and cancelled jobs are counted over the last hour only: an all-time
count of them would read the whole table, and ``prune`` deletes them anyway.
The chart is drawn here as SVG geometry and rendered inline by a template, so
the page needs no script and works offline.
"""

from __future__ import annotations

import datetime
import logging
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Count, Max, Min, Q
from django.db.models.functions import TruncMinute
from django.utils import formats, timezone
from django.utils.formats import time_format
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from django_arcature.db import DatabaseNow
from django_arcature.db.counts import count_up_to, planner_estimate
from django_arcature.models import Job, JobStatus

from .lists import EXACT_COUNT_LIMIT

logger = logging.getLogger(__name__)

WINDOW_MINUTES = 60
#: The newest finished first-attempt jobs of the last hour read for the run-time percentiles.
RUN_TIME_SAMPLE = 2000
#: Dead jobs counted exactly; past this many, per queue the planner's estimate.
DEAD_COUNT_LIMIT = EXACT_COUNT_LIMIT
#: The newest dead jobs whose queues get an estimate past ``DEAD_COUNT_LIMIT``.
DEAD_QUEUE_SAMPLE = 200


@dataclass
class QueueRow:
    """One queue's line in the table."""

    queue: str
    ready: int = 0
    scheduled: int = 0
    running: int = 0
    dead: int = 0
    succeeded_last_hour: int = 0
    failed_last_hour: int = 0
    cancelled_last_hour: int = 0
    oldest_ready: datetime.datetime | None = None
    lag: str = ""


@dataclass
class WorkerRow:
    """A worker id seen in ``locked_by`` of a running job or one finished in the last hour."""

    name: str
    running: int = 0
    finished_last_hour: int = 0
    last_seen: datetime.datetime | None = None
    last_seen_ago: str = ""


@dataclass
class TaskRow:
    """One task's last hour: how many finished, how many died, how long runs took."""

    task: str
    succeeded: int = 0
    dead: int = 0
    p50: str = ""
    p95: str = ""
    sampled: int = 0

    @property
    def failure_rate(self) -> str:
        finished = self.succeeded + self.dead
        return f"{100 * self.dead / finished:.1f}%" if finished else ""


@dataclass(frozen=True)
class Minute:
    start: datetime.datetime
    succeeded: int
    failed: int


@dataclass
class Dashboard:
    now: datetime.datetime
    queues: list[QueueRow]
    workers: list[WorkerRow]
    minutes: list[Minute]
    chart: Chart
    totals: dict[str, int] = field(default_factory=dict)
    tasks: list[TaskRow] = field(default_factory=list)
    #: The dead counts are the planner's estimates (more than ``DEAD_COUNT_LIMIT``).
    dead_estimated: bool = False

    @property
    def dead_total_label(self) -> str:
        """The total of dead jobs, marked ``~`` when it is an estimate."""
        total = self.totals.get("dead", 0)
        # Grouped per the active locale, as the template's other counts are (floatformat:"g").
        shown = formats.number_format(total, force_grouping=True)
        return f"~{shown}" if self.dead_estimated else shown


def collect(now: datetime.datetime | None = None, using: str = "default") -> Dashboard:
    """Read everything the dashboard shows; ``now`` is the web server's clock."""
    now = now or timezone.now()
    since = _minute_floor(now) - datetime.timedelta(minutes=WINDOW_MINUTES - 1)
    jobs = Job.objects.using(using)
    queues: dict[str, QueueRow] = {}

    def row(name: str) -> QueueRow:
        return queues.setdefault(name, QueueRow(queue=name))

    live = (
        jobs.filter(status__in=(JobStatus.PENDING, JobStatus.RUNNING))
        .values("queue", "status")
        .annotate(
            total=Count("*"),
            scheduled=Count("available_at", filter=Q(available_at__gt=DatabaseNow())),
            oldest_ready=Min("available_at", filter=Q(available_at__lte=DatabaseNow())),
        )
        .order_by()
    )
    for item in live:
        line = row(item["queue"])
        if item["status"] == JobStatus.PENDING:
            line.scheduled = item["scheduled"]
            line.ready = item["total"] - item["scheduled"]
            line.oldest_ready = item["oldest_ready"]
        else:
            line.running = item["total"]
    dead, dead_estimated = _dead_counts(jobs)
    for name, total in dead.items():
        row(name).dead = total

    per_minute: dict[datetime.datetime, list[int]] = {}
    finished = (
        jobs.filter(
            _finished_since(since),
            status__in=(JobStatus.SUCCEEDED, JobStatus.DEAD, JobStatus.CANCELLED),
        )
        .annotate(minute=TruncMinute("finished_at", tzinfo=datetime.UTC))
        .values("queue", "status", "minute")
        .annotate(total=Count("*"))
        .order_by()
    )
    for group in finished:
        line = row(group["queue"])
        counts = per_minute.setdefault(group["minute"], [0, 0])
        if group["status"] == JobStatus.SUCCEEDED:
            line.succeeded_last_hour += group["total"]
            counts[0] += group["total"]
        elif group["status"] == JobStatus.DEAD:
            line.failed_last_hour += group["total"]
            counts[1] += group["total"]
        else:
            line.cancelled_last_hour += group["total"]

    for line in queues.values():
        if line.oldest_ready is not None:
            line.lag = format_age((now - line.oldest_ready).total_seconds())

    minutes = [
        Minute(start, *per_minute.get(start, (0, 0)))
        for start in (since + datetime.timedelta(minutes=n) for n in range(WINDOW_MINUTES))
    ]
    workers = _workers(jobs, since, now)
    ordered = sorted(queues.values(), key=lambda q: q.queue)
    totals = {
        "succeeded": sum(m.succeeded for m in minutes),
        "failed": sum(m.failed for m in minutes),
        "ready": sum(q.ready for q in ordered),
        "running": sum(q.running for q in ordered),
        "dead": sum(q.dead for q in ordered),
    }
    tasks = _tasks(jobs, since)
    return Dashboard(
        now, ordered, workers, minutes, build_chart(minutes), totals, tasks, dead_estimated
    )


def _finished_since(since: datetime.datetime) -> Q:
    """Finished at ``since`` or later, as a range closed on both sides.

    The upper end (a day on, so that a database clock ahead of the web server's
    loses nothing) changes no result; it is there for SQLite's planner, which
    without value statistics guesses that a one-sided range holds a quarter of
    the rows and a two-sided one a sixty-fourth. With the one-sided range it read
    every finished row along the claim index ``(status, queue, …)``, whose order
    spares the GROUP BY a sort (319 ms with 1,000,000 rows); with both ends it reads
    the last hour along ``(status, finished_at)`` (1 ms).
    """
    return Q(finished_at__gte=since, finished_at__lt=since + datetime.timedelta(days=1))


def _dead_counts(jobs: Any) -> tuple[dict[str, int], bool]:
    """Dead jobs per queue: exact up to ``DEAD_COUNT_LIMIT``, past it the planner's estimate.

    Dead jobs are kept until an operator requeues or prunes them, so their count
    has no bound: an exact ``COUNT(*)`` of 200,000 dead rows spread over a table
    of 10,000,000 read them all (2 s here, against 0.07 s for the rest of the
    page). As the job list's paginator does, a count that stops at the limit
    decides; past it, each queue seen among the newest dead jobs gets the
    planner's estimate (True in the result says so); a queue whose dead jobs all
    died before the newest ``DEAD_QUEUE_SAMPLE`` is then left out. SQLite keeps no
    estimates and is counted exactly.
    """
    dead = jobs.filter(status=JobStatus.DEAD).order_by()
    if count_up_to(dead, DEAD_COUNT_LIMIT + 1) > DEAD_COUNT_LIMIT:
        newest = dead.order_by("-finished_at").values_list("queue", flat=True)
        estimates: dict[str, int] = {}
        for name in sorted(set(newest[:DEAD_QUEUE_SAMPLE])):
            estimate = planner_estimate(dead.filter(queue=name))
            if estimate is None:
                break
            estimates[name] = estimate
        else:
            return estimates, True
    grouped = dead.values("queue").annotate(total=Count("*")).order_by()
    return {item["queue"]: item["total"] for item in grouped}, False


def _tasks(jobs: Any, since: datetime.datetime) -> list[TaskRow]:
    """Per task over the last hour: finished counts, failure rate, p50/p95 run time.

    Counts are grouped on the ``(status, finished_at)`` index range of the last
    hour. Run times come from a sample: the newest ``RUN_TIME_SAMPLE`` jobs that
    finished in the hour on their first attempt, where ``finished_at -
    started_at`` is that attempt's run (a later attempt's ``started_at`` is
    still the first claim's). On a busy hour the percentiles describe the most
    recent jobs, which is what an operator looking now wants.
    """
    finished = (JobStatus.SUCCEEDED, JobStatus.DEAD)
    rows: dict[str, TaskRow] = {}
    counts = (
        jobs.filter(_finished_since(since), status__in=finished)
        .values("task_name", "status")
        .annotate(total=Count("*"))
        .order_by()
    )
    for item in counts:
        line = rows.setdefault(item["task_name"], TaskRow(task=item["task_name"]))
        if item["status"] == JobStatus.SUCCEEDED:
            line.succeeded = item["total"]
        else:
            line.dead = item["total"]
    sample = (
        jobs.filter(_finished_since(since), status__in=finished, attempts=1)
        .order_by("-finished_at")
        .values_list("task_name", "started_at", "finished_at")[:RUN_TIME_SAMPLE]
    )
    runs: dict[str, list[float]] = {}
    for task, started, ended in sample:
        if started is not None and ended is not None:
            runs.setdefault(task, []).append(max(0.0, (ended - started).total_seconds()))
    for task, seconds in runs.items():
        line = rows.setdefault(task, TaskRow(task=task))
        seconds.sort()
        line.sampled = len(seconds)
        line.p50 = format_duration(_percentile(seconds, 50))
        line.p95 = format_duration(_percentile(seconds, 95))
    return sorted(rows.values(), key=lambda row: (-row.dead, row.task))


def _percentile(ordered: list[float], pct: int) -> float:
    """Nearest-rank percentile of an ascending, non-empty list."""
    return ordered[max(0, -(-len(ordered) * pct // 100) - 1)]


def format_duration(seconds: float) -> str:
    """A run time for a table cell: milliseconds below a second, then seconds, minutes."""
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    return format_age(seconds)


def _workers(jobs: Any, since: datetime.datetime, now: datetime.datetime) -> list[WorkerRow]:
    """Workers by ``locked_by``; ``locked_at`` is their last claim or heartbeat."""
    workers: dict[str, WorkerRow] = {}
    running = (
        jobs.filter(status=JobStatus.RUNNING)
        .values("locked_by")
        .annotate(total=Count("*"), last=Max("locked_at"))
        .order_by()
    )
    recent = (
        jobs.filter(_finished_since(since), status__in=(JobStatus.SUCCEEDED, JobStatus.DEAD))
        .exclude(locked_by="")
        .values("locked_by")
        .annotate(total=Count("*"), last=Max("locked_at"))
        .order_by()
    )
    for rows, attribute in ((running, "running"), (recent, "finished_last_hour")):
        for item in rows:
            worker = workers.setdefault(item["locked_by"], WorkerRow(name=item["locked_by"]))
            setattr(worker, attribute, item["total"])
            last = item["last"]
            if last is not None and (worker.last_seen is None or last > worker.last_seen):
                worker.last_seen = last
    for worker in workers.values():
        if worker.last_seen is not None:
            worker.last_seen_ago = format_age(max(0.0, (now - worker.last_seen).total_seconds()))
    return sorted(workers.values(), key=lambda w: (-w.running, w.name))


def _minute_floor(moment: datetime.datetime) -> datetime.datetime:
    return moment.astimezone(datetime.UTC).replace(second=0, microsecond=0)


def format_age(seconds: float) -> str:
    """A short age for operators: "42 s", "3 min 5 s", "2 h 10 min", "3 d 4 h"."""
    whole = max(0, int(seconds))
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return _("%(days)d d %(hours)d h") % {"days": days, "hours": hours}
    if hours:
        return _("%(hours)d h %(minutes)d min") % {"hours": hours, "minutes": minutes}
    if minutes:
        return _("%(minutes)d min %(seconds)d s") % {"minutes": minutes, "seconds": secs}
    return _("%(seconds)d s") % {"seconds": secs}


# --- The chart ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Bar:
    """One minute's stacked bar; coordinates are preformatted so no locale touches them."""

    x: str
    width: str
    succeeded_y: str
    succeeded_height: str
    failed_y: str
    failed_height: str
    succeeded: int
    failed: int
    label: str
    #: The minute's local clock time and its instant, for the chart's data table.
    time: str = ""
    start: str = ""


@dataclass(frozen=True)
class Tick:
    position: str
    label: str
    anchor: str = "middle"


@dataclass(frozen=True)
class Chart:
    width: int
    height: int
    plot_left: int
    plot_right: int
    plot_top: int
    plot_bottom: int
    bars: list[Bar]
    y_ticks: list[Tick]
    x_ticks: list[Tick]
    y_max: int
    y_label_x: str
    x_label_y: str
    empty: bool
    title: str
    description: str


def nice_ceiling(value: int) -> int:
    """The smallest of 1, 2, 5, 10, 20, 50 … that is at least ``value`` (at least 1)."""
    step = 1
    while True:
        for factor in (1, 2, 5):
            if step * factor >= value:
                return step * factor
        step *= 10


def build_chart(minutes: list[Minute], width: int = 720, height: int = 220) -> Chart:
    """Stacked bars, succeeded below failed, one per minute, with a 0 … max y axis."""
    left, right, top, bottom = 44, width - 8, 12, height - 26
    plot_height = bottom - top
    y_max = nice_ceiling(max((m.succeeded + m.failed for m in minutes), default=0))
    slot = (right - left) / max(len(minutes), 1)
    bar_width = max(slot * 0.75, 1.0)

    def y_of(value: float) -> float:
        return bottom - plot_height * value / y_max

    bars = []
    for index, minute in enumerate(minutes):
        x = left + index * slot + (slot - bar_width) / 2
        succeeded_top = y_of(minute.succeeded)
        failed_top = y_of(minute.succeeded + minute.failed)
        clock = time_format(timezone.localtime(minute.start), "H:i")
        bars.append(
            Bar(
                x=f"{x:.2f}",
                width=f"{bar_width:.2f}",
                succeeded_y=f"{succeeded_top:.2f}",
                succeeded_height=f"{bottom - succeeded_top:.2f}",
                failed_y=f"{failed_top:.2f}",
                failed_height=f"{succeeded_top - failed_top:.2f}",
                succeeded=minute.succeeded,
                failed=minute.failed,
                label=_("%(time)s: %(succeeded)d succeeded, %(failed)d failed")
                % {"time": clock, "succeeded": minute.succeeded, "failed": minute.failed},
                time=clock,
                start=minute.start.isoformat(),
            )
        )
    y_ticks = [Tick(f"{y_of(v):.2f}", str(v)) for v in sorted({0, y_max // 2, y_max})]
    # The plot's right edge is the end of the current minute, its left edge an hour before.
    x_ticks = [
        Tick(
            f"{right - minutes_ago * slot:.2f}",
            _("now") if minutes_ago == 0 else _("-%(minutes)d min") % {"minutes": minutes_ago},
            # The outermost labels stay inside the picture.
            {60: "start", 0: "end"}.get(minutes_ago, "middle"),
        )
        for minutes_ago in (60, 45, 30, 15, 0)
        if minutes_ago <= len(minutes)
    ]
    total_succeeded = sum(m.succeeded for m in minutes)
    total_failed = sum(m.failed for m in minutes)
    description = ngettext(
        "%(succeeded)d job succeeded and %(failed)d failed in the last %(minutes)d minute.",
        "%(succeeded)d jobs succeeded and %(failed)d failed in the last %(minutes)d minutes.",
        len(minutes),
    ) % {"succeeded": total_succeeded, "failed": total_failed, "minutes": len(minutes)}
    return Chart(
        width=width,
        height=height,
        plot_left=left,
        plot_right=right,
        plot_top=top,
        plot_bottom=bottom,
        bars=bars,
        y_ticks=y_ticks,
        x_ticks=x_ticks,
        y_max=y_max,
        y_label_x=str(left - 6),
        x_label_y=str(height - 6),
        empty=total_succeeded + total_failed == 0,
        title=_("Jobs finished per minute, last hour"),
        description=description,
    )

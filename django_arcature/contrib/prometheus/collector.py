"""Per-queue gauges read from the database when a scrape asks, cheaply and at most so often.

A scrape must not cost a COUNT(*) over millions of rows. Per queue, the ready
and scheduled counts are exact up to ``count_limit`` (reading at most that many
index entries) and the planner's estimate past it, as the admin's job list
counts; running jobs are few (at most what the workers hold) and are grouped
exactly. The oldest ready job's age is a MIN over the ``(status, queue, …,
available_at)`` claim index. Queues are those with running jobs, those among
the next ``sample_size`` jobs to be claimed, those the registered handlers
name, the default queue, and any seen before by this collector: no DISTINCT
scan. The result is kept ``sample_seconds``, so several scrapers (or a
Prometheus with a short interval) cost one sample.

Workflows and batches are counted from their own rows, never their nodes: the
``outcome`` column is empty while one is in progress and is written in the
transaction that finished (or cancelled) it, and each outcome is a bounded count
over the ``(outcome, …)`` index.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from django.db import DatabaseError, connections
from django.db.models import Count, Min
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

logger = logging.getLogger(__name__)

#: Exact counts up to this many rows per queue and state; the planner's estimate past it.
COUNT_LIMIT = 10_000
#: How many of the next jobs to be claimed are read to discover queue names.
SAMPLE_SIZE = 1_000
#: How long one sample serves scrapes.
SAMPLE_SECONDS = 5.0


@dataclass
class QueueSample:
    ready: int = 0
    scheduled: int = 0
    running: int = 0
    oldest_ready_age: float = 0.0
    estimated: bool = False


#: The finished outcomes of a workflow or batch ("" is in progress).
OUTCOMES = ("succeeded", "failed", "cancelled")


@dataclass
class Sample:
    taken: float
    queues: dict[str, QueueSample] = field(default_factory=dict)
    seconds: float = 0.0
    #: "workflows"/"batches" → outcome ("" for in progress) → rows.
    runs: dict[str, dict[str, int]] = field(default_factory=dict)


class QueueCollector(Collector):
    """A prometheus-client collector of the ``arcature_queue_*`` gauges."""

    def __init__(
        self,
        using: str = "default",
        *,
        count_limit: int = COUNT_LIMIT,
        sample_size: int = SAMPLE_SIZE,
        sample_seconds: float = SAMPLE_SECONDS,
    ) -> None:
        self.using = using
        self.count_limit = count_limit
        self.sample_size = sample_size
        self.sample_seconds = sample_seconds
        self._known: set[str] = set()
        self._sample: Sample | None = None
        self._lock = threading.Lock()

    def collect(self) -> Iterator[GaugeMetricFamily]:
        sample = self.sample()
        if sample is None:
            return
        families = {
            "ready": GaugeMetricFamily(
                "arcature_queue_ready_jobs",
                "Pending jobs available now (exact up to a bound, then the planner's estimate).",
                labels=["queue"],
            ),
            "scheduled": GaugeMetricFamily(
                "arcature_queue_scheduled_jobs",
                "Pending jobs waiting for their available_at (delayed or backing off).",
                labels=["queue"],
            ),
            "running": GaugeMetricFamily(
                "arcature_queue_running_jobs", "Jobs claimed by a worker.", labels=["queue"]
            ),
            "oldest_ready_age": GaugeMetricFamily(
                "arcature_queue_oldest_ready_age_seconds",
                "Seconds since the oldest ready job became available (0 when none is ready).",
                labels=["queue"],
            ),
        }
        for name, line in sorted(sample.queues.items()):
            for key, family in families.items():
                family.add_metric([name], float(getattr(line, key)))
        yield from families.values()
        for kind, counts in sorted(sample.runs.items()):
            yield GaugeMetricFamily(
                f"arcature_{kind}_in_progress",
                f"{kind.capitalize()} not finished yet (exact up to a bound, then the "
                "planner's estimate).",
                value=float(counts.get("", 0)),
            )
            finished = GaugeMetricFamily(
                f"arcature_{kind}_finished",
                f"Finished {kind} still stored (until pruned), by outcome.",
                labels=["outcome"],
            )
            for outcome in OUTCOMES:
                finished.add_metric([outcome], float(counts.get(outcome, 0)))
            yield finished
        yield GaugeMetricFamily(
            "arcature_queue_sample_duration_seconds",
            "How long the last database sample of the queue gauges took.",
            value=sample.seconds,
        )

    def sample(self) -> Sample | None:
        """The current sample, taken now if the last one is older than ``sample_seconds``."""
        with self._lock:
            if self._sample is not None and (
                time.monotonic() - self._sample.taken < self.sample_seconds
            ):
                return self._sample
            try:
                self._sample = self._take()
            except DatabaseError as exc:
                logger.warning("could not sample the job queues for metrics: %s", exc)
                return None
            finally:
                # Scrapes run on the metrics server's own threads: never keep a
                # connection open between them.
                if not connections[self.using].in_atomic_block:
                    connections[self.using].close()
            return self._sample

    def _take(self) -> Sample:
        from django_arcature.db import DatabaseNow
        from django_arcature.db.counts import bounded_count
        from django_arcature.models import Job, JobStatus

        started = time.perf_counter()
        jobs = Job.objects.using(self.using)
        pending = jobs.filter(status=JobStatus.PENDING)
        queues: dict[str, QueueSample] = {}
        running = (
            jobs.filter(status=JobStatus.RUNNING)
            .values("queue")
            .annotate(total=Count("*"))
            .order_by()
        )
        for item in running:
            queues.setdefault(item["queue"], QueueSample()).running = item["total"]
        upcoming = pending.order_by("-priority", "available_at").values_list("queue", flat=True)
        names = set(upcoming[: self.sample_size]) | self._known | set(queues) | _declared()
        for name in names:
            line = queues.setdefault(name, QueueSample())
            mine = pending.filter(queue=name)
            ready = mine.filter(available_at__lte=DatabaseNow())
            line.ready, ready_estimated = bounded_count(ready, self.count_limit)
            line.scheduled, scheduled_estimated = bounded_count(
                mine.filter(available_at__gt=DatabaseNow()), self.count_limit
            )
            line.estimated = ready_estimated or scheduled_estimated
            if line.ready:
                oldest = ready.order_by().aggregate(oldest=Min("available_at"))["oldest"]
                if oldest is not None:
                    line.oldest_ready_age = max(0.0, (timezone.now() - oldest).total_seconds())
        self._known |= names
        runs = self._runs()
        return Sample(time.monotonic(), queues, time.perf_counter() - started, runs)

    def _runs(self) -> dict[str, dict[str, int]]:
        """Workflows and batches per outcome, from their rows' indexed ``outcome``."""
        from django_arcature.db.counts import bounded_count
        from django_arcature.workflows.models import BatchRun, WorkflowRun

        runs: dict[str, dict[str, int]] = {}
        for kind, model in (("workflows", WorkflowRun), ("batches", BatchRun)):
            rows = model.objects.using(self.using)
            runs[kind] = {
                outcome: bounded_count(rows.filter(outcome=outcome), self.count_limit)[0]
                for outcome in ("", *OUTCOMES)
            }
        return runs


def _declared() -> set[str]:
    """The default queue and the queues registered handlers name."""
    from django_arcature import registry
    from django_arcature.conf import get_settings

    names = {get_settings().default_queue}
    for name in registry.registered_names():
        queue = getattr(registry.get(name), "queue", None)
        if queue:
            names.add(queue)
    return names

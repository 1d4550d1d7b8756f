"""``manage.py arcature_status``: queue depths, oldest waiting job, recent failures."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from django.core.management.base import CommandParser
from django.db.models import Count, Min, Q

from django_arcature.db.clock import database_now
from django_arcature.management.database import add_database_argument
from django_arcature.management.options import minutes
from django_arcature.management.ready import RefusedDatabaseStopsCommand
from django_arcature.models import Job, JobStatus
from django_arcature.queues.control import paused_queues


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = max(seconds, 0.0)
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    if seconds < 172800:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


class Command(RefusedDatabaseStopsCommand):
    help = (
        "Show each queue's depth (ready, scheduled, running), how long its oldest ready job "
        "has waited and whether it is paused, and how many jobs failed recently, by error kind."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--since",
            type=minutes,
            default=60.0,
            metavar="MINUTES",
            help="Count failures from this many minutes back. Default: 60.",
        )
        parser.add_argument("--json", action="store_true", help="Print JSON instead of a table.")
        add_database_argument(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        using = self.migrated_database(options)
        report = self.collect(using, timedelta(minutes=options["since"]))
        if options["json"]:
            self.stdout.write(json.dumps(report, indent=2))
        else:
            self.print_table(report)

    def collect(self, using: str, since: timedelta) -> dict[str, Any]:
        now = database_now(using)  # the clock that stamped every time in the table
        jobs = Job.objects.using(using)
        per_queue = (
            jobs.filter(status__in=(JobStatus.PENDING, JobStatus.RUNNING))
            .values("queue")
            .annotate(
                ready=Count("id", filter=Q(status=JobStatus.PENDING, available_at__lte=now)),
                scheduled=Count("id", filter=Q(status=JobStatus.PENDING, available_at__gt=now)),
                running=Count("id", filter=Q(status=JobStatus.RUNNING)),
                oldest=Min(
                    "available_at", filter=Q(status=JobStatus.PENDING, available_at__lte=now)
                ),
            )
            .order_by("queue")
        )
        queues = [
            {
                "queue": row["queue"],
                "ready": row["ready"],
                "scheduled": row["scheduled"],
                "running": row["running"],
                "oldest_ready_seconds": (
                    (now - row["oldest"]).total_seconds() if row["oldest"] else None
                ),
            }
            for row in per_queue
        ]
        # A paused queue's ready jobs would otherwise read as a stuck queue, and a
        # paused queue without jobs would not show at all.
        paused = paused_queues(using)
        listed = {q["queue"] for q in queues}
        queues += [
            {"queue": name, "ready": 0, "scheduled": 0, "running": 0, "oldest_ready_seconds": None}
            for name in paused - listed
        ]
        for q in queues:
            q["paused"] = q["queue"] in paused
        queues.sort(key=lambda q: str(q["queue"]))
        failures = (
            jobs.filter(status=JobStatus.DEAD, failed_at__gte=now - since)
            .values("error_kind")
            .annotate(count=Count("id"))
            .order_by("-count", "error_kind")
        )
        return {
            "queues": queues,
            "failures_since_minutes": since.total_seconds() / 60,
            "failures": {row["error_kind"]: row["count"] for row in failures},
            "dead_total": jobs.filter(status=JobStatus.DEAD).count(),
        }

    def print_table(self, report: dict[str, Any]) -> None:
        queues = report["queues"]
        if not queues:
            self.stdout.write("No pending or running jobs.")
        else:
            width = max(5, *(len(q["queue"]) for q in queues))
            header = (
                f"{'queue':<{width}}  {'ready':>7}  {'scheduled':>9}  {'running':>7}  "
                "oldest ready  paused"
            )
            self.stdout.write(header)
            for q in queues:
                self.stdout.write(
                    f"{q['queue']:<{width}}  {q['ready']:>7}  {q['scheduled']:>9}  "
                    f"{q['running']:>7}  {_age(q['oldest_ready_seconds']):<12}  "
                    f"{'yes' if q['paused'] else '-'}"
                )
        minutes = report["failures_since_minutes"]
        failures = report["failures"]
        if failures:
            kinds = ", ".join(f"{count} {kind}" for kind, count in failures.items())
            self.stdout.write(f"Failed in the last {minutes:g} minutes: {kinds}.")
        else:
            self.stdout.write(f"No failures in the last {minutes:g} minutes.")
        self.stdout.write(f"Dead jobs kept for inspection: {report['dead_total']}.")

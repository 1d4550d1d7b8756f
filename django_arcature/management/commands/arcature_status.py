"""``manage.py arcature_status``: queue depths, oldest waiting job, recent failures.

The table speaks the project's ``LANGUAGE_CODE`` (``management/wording.py``);
``--json`` does not: its keys, queue names and error kinds (``timeout``,
``exhausted``...) are data for scripts and dashboards, the same in every language.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from django.core.management.base import CommandParser
from django.db.models import Count, Min, Q
from django.utils.translation import gettext, gettext_lazy, ngettext, pgettext

from django_arcature.db.clock import database_now
from django_arcature.management.database import add_database_argument
from django_arcature.management.options import minutes
from django_arcature.management.ready import RefusedDatabaseStopsCommand
from django_arcature.management.wording import Translated, ljust, rjust, width
from django_arcature.models import Job, JobStatus
from django_arcature.queues.control import paused_queues


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = max(seconds, 0.0)
    if seconds < 120:
        return pgettext("age in seconds", "%(value).0fs") % {"value": seconds}
    if seconds < 7200:
        return pgettext("age in minutes", "%(value).0fm") % {"value": seconds / 60}
    if seconds < 172800:
        return pgettext("age in hours", "%(value).1fh") % {"value": seconds / 3600}
    return pgettext("age in days", "%(value).1fd") % {"value": seconds / 86400}


class Command(RefusedDatabaseStopsCommand):
    help = Translated(
        gettext_lazy(
            "Show each queue's depth (ready, scheduled, running), how long its oldest ready job "
            "has waited and whether it is paused, and how many jobs failed recently, by error kind."
        )
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--since",
            type=minutes,
            default=60.0,
            metavar="MINUTES",
            help=gettext("Count failures from this many minutes back. Default: 60."),
        )
        parser.add_argument(
            "--json", action="store_true", help=gettext("Print JSON instead of a table.")
        )
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
            self.stdout.write(gettext("No pending or running jobs."))
        else:
            headings = [
                pgettext("status column", "queue"),
                pgettext("status column", "ready"),
                pgettext("status column", "scheduled"),
                pgettext("status column", "running"),
                pgettext("status column", "oldest ready"),
                pgettext("status column", "paused"),
            ]
            rows = [
                [
                    q["queue"],
                    str(q["ready"]),
                    str(q["scheduled"]),
                    str(q["running"]),
                    _age(q["oldest_ready_seconds"]),
                    pgettext("queue is paused", "yes") if q["paused"] else "-",
                ]
                for q in queues
            ]
            # Each column as wide as its heading or its widest cell, in terminal columns
            # (a Japanese heading takes two per character); counts right-aligned.
            widths = [max(width(row[i]) for row in [headings, *rows]) for i in range(6)]
            widths[1] = max(widths[1], 7)
            widths[3] = max(widths[3], 7)
            for row in [headings, *rows]:
                cells = [
                    ljust(cell, widths[i]) if i in (0, 4) else rjust(cell, widths[i])
                    for i, cell in enumerate(row[:5])
                ]
                self.stdout.write("  ".join([*cells, row[5]]))
        minutes = report["failures_since_minutes"]
        # The plural form for a whole count; a fraction of minutes reads as a plural.
        plural = int(minutes) if float(minutes).is_integer() else 2
        failures = report["failures"]
        if failures:
            # The error kinds stay as stored: they are the values the admin filters on.
            kinds = pgettext("list separator", ", ").join(
                f"{number} {kind}" for kind, number in failures.items()
            )
            self.stdout.write(
                ngettext(
                    "Failed in the last %(minutes)s minute: %(kinds)s.",
                    "Failed in the last %(minutes)s minutes: %(kinds)s.",
                    plural,
                )
                % {"minutes": f"{minutes:g}", "kinds": kinds}
            )
        else:
            self.stdout.write(
                ngettext(
                    "No failures in the last %(minutes)s minute.",
                    "No failures in the last %(minutes)s minutes.",
                    plural,
                )
                % {"minutes": f"{minutes:g}"}
            )
        self.stdout.write(
            gettext("Dead jobs kept for inspection: %(count)d.") % {"count": report["dead_total"]}
        )

"""``manage.py arcature_schedules``: every schedule with its next fire times."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from django_arcature import registry
from django_arcature.db.clock import database_now
from django_arcature.management.database import add_database_argument
from django_arcature.management.options import whole_number
from django_arcature.management.ready import RefusedDatabaseStopsCommand
from django_arcature.schedules.cron import InvalidSchedule, next_slots, zone


class Command(RefusedDatabaseStopsCommand):
    help = "List every schedule (code and admin) with its next fire times, on the database clock."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--next",
            type=whole_number(0, 1000),
            default=3,
            metavar="N",
            help="Fire times to show, 0 to 1000 (default 3).",
        )
        parser.add_argument(
            "--sync",
            action="store_true",
            help="Write this code's @periodic schedules to the database first (workers do it "
            "when they start).",
        )
        add_database_argument(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        from django_arcature.schedules.models import Schedule
        from django_arcature.schedules.periodic import declared
        from django_arcature.schedules.sync import sync_code_schedules

        using = self.migrated_database(options)
        registry.autodiscover()
        if options["sync"]:
            created, updated = sync_code_schedules(using)
            self.stdout.write(f"synced from code: {created} created, {updated} updated")
        now = database_now(using)
        schedules = list(Schedule.objects.using(using).order_by("name"))
        # Code schedules reach the table when a worker starts (or with --sync): until
        # then, name them rather than let the listing claim there are none.
        unsynced = sorted(set(declared()) - {s.name for s in schedules})
        if unsynced:
            self.stdout.write(
                f"declared in code, not synced yet: {', '.join(unsynced)} "
                "(a worker writes them when it starts; --sync does it now)"
            )
        if not schedules:
            if not unsynced:
                self.stdout.write("no schedules")
            return
        self.stdout.write(f"database now: {now.isoformat()}")
        for schedule in schedules:
            state = "enabled" if schedule.enabled else "disabled"
            self.stdout.write(
                f"{schedule.name}  [{schedule.source}, {state}]  {schedule.cron!r} "
                f"{schedule.timezone} -> {schedule.task_name}"
                + (f" on queue {schedule.queue}" if schedule.queue else "")
                + f"  missed: {schedule.missed}"
            )
            try:
                tz = zone(schedule.timezone)
                upcoming = next_slots(schedule.cron, schedule.timezone, now, options["next"])
            except (InvalidSchedule, ImportError) as exc:
                self.stdout.write(f"    cannot evaluate: {exc}")
                continue
            for slot in upcoming:
                self.stdout.write(
                    f"    next {slot.astimezone(tz).isoformat()}  ({slot.isoformat()})"
                )
            if schedule.last_slot_at is not None:
                self.stdout.write(
                    f"    last slot {schedule.last_slot_at.isoformat()}"
                    + (f", job {schedule.last_job_id}" if schedule.last_job_id else "")
                )

"""``manage.py arcature_schedules``: every schedule with its next fire times.

The sentences follow the project's ``LANGUAGE_CODE`` (``management/wording.py``);
the values between them stay as stored, since they are what the settings, the
admin's fields and ``@periodic`` are written with: a schedule's name, source
(``code``/``admin``), cron line, time zone, task and ``missed`` policy, and the
ISO 8601 times.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser
from django.utils.translation import gettext, gettext_lazy, pgettext

from django_arcature import registry
from django_arcature.db.clock import database_now
from django_arcature.management.database import add_database_argument
from django_arcature.management.options import whole_number
from django_arcature.management.ready import RefusedDatabaseStopsCommand
from django_arcature.management.wording import Translated
from django_arcature.schedules.cron import InvalidSchedule, next_slots, zone


class Command(RefusedDatabaseStopsCommand):
    help = Translated(
        gettext_lazy(
            "List every schedule (code and admin) with its next fire times, on the database clock."
        )
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--next",
            type=whole_number(0, 1000),
            default=3,
            metavar="N",
            help=gettext("Fire times to show, 0 to 1000 (default 3)."),
        )
        parser.add_argument(
            "--sync",
            action="store_true",
            help=gettext(
                "Write this code's @periodic schedules to the database first (workers do it "
                "when they start)."
            ),
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
            self.stdout.write(
                gettext("synced from code: %(created)d created, %(updated)d updated")
                % {"created": created, "updated": updated}
            )
        now = database_now(using)
        schedules = list(Schedule.objects.using(using).order_by("name"))
        # Code schedules reach the table when a worker starts (or with --sync): until
        # then, name them rather than let the listing claim there are none.
        unsynced = sorted(set(declared()) - {s.name for s in schedules})
        if unsynced:
            self.stdout.write(
                gettext(
                    "declared in code, not synced yet: %(names)s "
                    "(a worker writes them when it starts; --sync does it now)"
                )
                % {"names": ", ".join(unsynced)}
            )
        if not schedules:
            if not unsynced:
                self.stdout.write(gettext("no schedules"))
            return
        self.stdout.write(gettext("database now: %(now)s") % {"now": now.isoformat()})
        for schedule in schedules:
            values = {
                "name": schedule.name,
                "source": schedule.source,
                "state": (
                    pgettext("schedule state", "enabled")
                    if schedule.enabled
                    else pgettext("schedule state", "disabled")
                ),
                "cron": repr(schedule.cron),
                "timezone": schedule.timezone,
                "task": schedule.task_name,
                "queue": schedule.queue,
                "missed": schedule.missed,
            }
            if schedule.queue:
                line = gettext(
                    "%(name)s  [%(source)s, %(state)s]  %(cron)s %(timezone)s -> %(task)s "
                    "on queue %(queue)s  missed: %(missed)s"
                )
            else:
                line = gettext(
                    "%(name)s  [%(source)s, %(state)s]  %(cron)s %(timezone)s -> %(task)s  "
                    "missed: %(missed)s"
                )
            self.stdout.write(line % values)
            try:
                tz = zone(schedule.timezone)
                upcoming = next_slots(schedule.cron, schedule.timezone, now, options["next"])
            except (InvalidSchedule, ImportError) as exc:
                self.stdout.write(
                    "    " + gettext("cannot evaluate: %(problem)s") % {"problem": exc}
                )
                continue
            for slot in upcoming:
                self.stdout.write(
                    "    "
                    + gettext("next %(local)s  (%(utc)s)")
                    % {"local": slot.astimezone(tz).isoformat(), "utc": slot.isoformat()}
                )
            if schedule.last_slot_at is not None:
                at = schedule.last_slot_at.isoformat()
                self.stdout.write(
                    "    "
                    + (
                        gettext("last slot %(at)s, job %(job)s")
                        % {"at": at, "job": schedule.last_job_id}
                        if schedule.last_job_id
                        else gettext("last slot %(at)s") % {"at": at}
                    )
                )

"""``manage.py arcature_queue pause|resume|list [NAME]``: queue control from the shell."""

from __future__ import annotations

import difflib
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.db.models import Count, Q

from django_arcature.management.database import add_database_argument
from django_arcature.management.options import queue_name
from django_arcature.management.ready import RefusedDatabaseStopsCommand
from django_arcature.queues.control import pause, resume
from django_arcature.queues.limits import read_limits
from django_arcature.queues.names import named_queues


class Command(RefusedDatabaseStopsCommand):
    help = "Pause or resume a queue across every worker, or list queues with their state."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=["pause", "resume", "list"])
        parser.add_argument(
            "name",
            nargs="?",
            type=queue_name,
            help="The queue (required for pause and resume); the names --queue of "
            "arcature_worker takes.",
        )
        parser.add_argument(
            "--force",
            action="store_true",
            help="Pause a queue that nothing names yet (no @job, ARCATURE['QUEUES'] entry or "
            "live job), e.g. ahead of its first job. Without it such a name is refused as a "
            "likely typo.",
        )
        add_database_argument(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        using = self.migrated_database(options)
        action, name = options["action"], options["name"]
        if action == "list":
            self._list(using, name)
            return
        if not name:
            raise CommandError(f"arcature_queue {action} needs a queue name")
        if action == "pause":
            unnamed = _spelling_note(name, named_queues(using))
            if unnamed and not options["force"]:
                # Refused rather than paused with a note: the row would outlive the typo,
                # and the real queue would keep running.
                raise CommandError(f"not pausing {name!r}{unnamed}; pass --force to pause it")
            changed = pause(name, using)
            self.stdout.write(
                f"queue {name} paused" if changed else f"queue {name} was already paused"
            )
        else:
            changed = resume(name, using)
            self.stdout.write(
                f"queue {name} resumed" if changed else f"queue {name} was not paused"
            )

    def _list(self, using: str, only: str | None) -> None:
        from django_arcature.models import Job, JobStatus
        from django_arcature.queues.models import QueueState

        counts: dict[str, Any] = {
            row["queue"]: row
            for row in Job.objects.using(using)
            .filter(status__in=[JobStatus.PENDING, JobStatus.RUNNING])
            .values("queue")
            .annotate(
                pending=Count("id", filter=Q(status=JobStatus.PENDING)),
                running=Count("id", filter=Q(status=JobStatus.RUNNING)),
            )
        }
        states = {row.name: row for row in QueueState.objects.using(using)}
        limits = read_limits()
        names = sorted(set(counts) | set(states) | set(limits))
        if only:
            if only not in names and only not in named_queues(using):
                self.stdout.write(
                    f"{only}: no such queue (no @job, ARCATURE['QUEUES'] entry, pause flag "
                    "or live job)"
                )
                return
            names = [only]
        if not names:
            self.stdout.write("no queues")
            return
        for queue in names:
            state = states.get(queue)
            row = counts.get(queue, {})
            paused = "paused" if state is not None and state.paused else "running"
            limit = limits.get(queue)
            self.stdout.write(
                f"{queue}: {paused}, {row.get('pending', 0)} pending, "
                f"{row.get('running', 0)} running"
                + (f"; limits: {limit.describe()}" if limit else "")
            )


def _spelling_note(name: str, named: set[str]) -> str:
    """Pausing ahead of any job is allowed; a typo would leave the real queue running."""
    if name in named:
        return ""
    nearest = difflib.get_close_matches(name, sorted(named), n=1)
    hint = f"; did you mean {nearest[0]!r}?" if nearest else "; check the spelling"
    return f": no @job, ARCATURE['QUEUES'] entry or live job names it{hint}"

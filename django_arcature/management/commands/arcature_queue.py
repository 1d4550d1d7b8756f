"""``manage.py arcature_queue pause|resume|list [NAME]``: queue control from the shell.

It speaks the project's ``LANGUAGE_CODE`` (``management/wording.py``); the action
names ``pause``, ``resume`` and ``list`` are arguments, not words, and stay as typed.
"""

from __future__ import annotations

import difflib
from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.db.models import Count, Q
from django.utils.translation import gettext, gettext_lazy, pgettext

from django_arcature.management.database import add_database_argument
from django_arcature.management.options import queue_name
from django_arcature.management.ready import RefusedDatabaseStopsCommand
from django_arcature.management.wording import Translated, describe_limit
from django_arcature.queues.control import pause, resume
from django_arcature.queues.limits import read_limits
from django_arcature.queues.names import named_queues


class Command(RefusedDatabaseStopsCommand):
    help = Translated(
        gettext_lazy(
            "Pause or resume a queue across every worker, or list queues with their state."
        )
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=["pause", "resume", "list"])
        parser.add_argument(
            "name",
            nargs="?",
            type=queue_name,
            help=gettext(
                "The queue (required for pause and resume); the names --queue of "
                "arcature_worker takes."
            ),
        )
        parser.add_argument(
            "--force",
            action="store_true",
            help=gettext(
                "Pause a queue that nothing names yet (no @job, ARCATURE['QUEUES'] entry or "
                "live job), e.g. ahead of its first job. Without it such a name is refused as "
                "a likely typo."
            ),
        )
        add_database_argument(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        using = self.migrated_database(options)
        action, name = options["action"], options["name"]
        if action == "list":
            self._list(using, name)
            return
        if not name:
            raise CommandError(
                gettext("arcature_queue %(action)s needs a queue name") % {"action": action}
            )
        if action == "pause":
            refusal = _unnamed_refusal(name, named_queues(using))
            if refusal and not options["force"]:
                # Refused rather than paused with a note: the row would outlive the typo,
                # and the real queue would keep running.
                raise CommandError(refusal)
            changed = pause(name, using)
            self.stdout.write(
                (
                    gettext("queue %(name)s paused")
                    if changed
                    else gettext("queue %(name)s was already paused")
                )
                % {"name": name}
            )
        else:
            changed = resume(name, using)
            self.stdout.write(
                (
                    gettext("queue %(name)s resumed")
                    if changed
                    else gettext("queue %(name)s was not paused")
                )
                % {"name": name}
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
                    gettext(
                        "%(name)s: no such queue (no @job, ARCATURE['QUEUES'] entry, pause "
                        "flag or live job)"
                    )
                    % {"name": only}
                )
                return
            names = [only]
        if not names:
            self.stdout.write(gettext("no queues"))
            return
        for queue in names:
            state = states.get(queue)
            row = counts.get(queue, {})
            values = {
                "name": queue,
                "state": (
                    pgettext("queue state", "paused")
                    if state is not None and state.paused
                    else pgettext("queue state", "running")
                ),
                "pending": row.get("pending", 0),
                "running": row.get("running", 0),
            }
            limit = limits.get(queue)
            if limit:
                values["limits"] = describe_limit(limit)
                line = gettext(
                    "%(name)s: %(state)s, %(pending)d pending, %(running)d running; "
                    "limits: %(limits)s"
                )
            else:
                line = gettext("%(name)s: %(state)s, %(pending)d pending, %(running)d running")
            self.stdout.write(line % values)


def _unnamed_refusal(name: str, named: set[str]) -> str:
    """Why pausing ``name`` is refused without --force, or "" when something names it.

    Pausing ahead of any job is allowed; a typo would leave the real queue running.
    Whole sentences, not a note glued to a prefix, so that each language can order them.
    """
    if name in named:
        return ""
    nearest = difflib.get_close_matches(name, sorted(named), n=1)
    if nearest:
        return gettext(
            "not pausing %(name)r: no @job, ARCATURE['QUEUES'] entry or live job names it; "
            "did you mean %(nearest)r?; pass --force to pause it"
        ) % {"name": name, "nearest": nearest[0]}
    return gettext(
        "not pausing %(name)r: no @job, ARCATURE['QUEUES'] entry or live job names it; "
        "check the spelling; pass --force to pause it"
    ) % {"name": name}

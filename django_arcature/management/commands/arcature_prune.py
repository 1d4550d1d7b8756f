"""``manage.py arcature_prune``: delete finished jobs by age, in small batches.

It reports in the project's ``LANGUAGE_CODE`` (``management/wording.py``); the
worker's own prune duty logs the same facts in English (``worker/duties.py``).
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser
from django.utils.translation import gettext, gettext_lazy, ngettext

from django_arcature.core.durations import parse_duration
from django_arcature.management.database import add_database_argument
from django_arcature.management.options import queue_name, whole_number
from django_arcature.management.ready import RefusedDatabaseStopsCommand
from django_arcature.management.wording import Translated, describe_rule
from django_arcature.retention.prune import count_prunable, prune
from django_arcature.retention.rules import FINISHED, MAX_BATCH, PruneRule, read_retention


class Command(RefusedDatabaseStopsCommand):
    help = Translated(
        gettext_lazy(
            "Delete succeeded, cancelled and dead jobs older than ARCATURE['RETENTION'] (or "
            "--older-than). Pending and running jobs are never touched."
        )
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--dry-run", action="store_true", help=gettext("Count, delete nothing.")
        )
        parser.add_argument(
            "--older-than",
            metavar="DURATION",
            help=gettext(
                "Age instead of the settings, for every status chosen (e.g. 7d, 12h, 90m)."
            ),
        )
        parser.add_argument(
            "--status",
            action="append",
            choices=FINISHED,
            help=gettext("Only this status (repeatable; default: every finished status)."),
        )
        parser.add_argument(
            "--queue",
            action="append",
            type=queue_name,
            help=gettext("Only this queue (repeatable; default: all)."),
        )
        parser.add_argument(
            "--batch-size",
            type=whole_number(1, MAX_BATCH),
            default=1000,
            metavar="N",
            # %% for argparse, which %-formats help texts itself.
            help=gettext(
                "Rows per delete, 1 to %(most)d (as RETENTION['batch_size']). Default: 1000."
            ).replace("%", "%%")
            % {"most": MAX_BATCH},
        )
        add_database_argument(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        statuses = options["status"] or list(FINISHED)
        queues = tuple(options["queue"]) if options["queue"] else None
        if options["older_than"] is not None:
            try:
                age = parse_duration(options["older_than"])
            except ValueError as exc:
                raise CommandError(
                    gettext("--older-than: %(problem)s") % {"problem": exc}
                ) from None
            rules = [PruneRule(status, age, queues=queues) for status in statuses]
        else:
            try:
                configured = read_retention().rules()
            except ValueError as exc:
                raise CommandError(str(exc)) from None
            narrowed = [_narrow(rule, queues) for rule in configured if rule.status in statuses]
            rules = [rule for rule in narrowed if rule is not None]
            if not rules:
                raise CommandError(
                    gettext(
                        "nothing to prune: ARCATURE['RETENTION'] sets no age for these "
                        "statuses; pass --older-than"
                    )
                )
        using = self.migrated_database(options)
        total = 0
        if options["dry_run"]:
            for rule in rules:
                count = count_prunable(rule, using)
                total += count
                self.stdout.write(
                    ngettext(
                        "would delete %(count)d job: %(rule)s",
                        "would delete %(count)d jobs: %(rule)s",
                        count,
                    )
                    % {"count": count, "rule": describe_rule(rule)}
                )
            self.stdout.write(
                ngettext(
                    "would delete %(count)d job in all (dry run)",
                    "would delete %(count)d jobs in all (dry run)",
                    total,
                )
                % {"count": total}
            )
            return
        for result in prune(rules, using, batch=options["batch_size"]):
            total += result.deleted
            # Two counts, two plurals: the sentence is chosen by the job count, the
            # batch count is a phrase of its own.
            batches = ngettext("%(count)d batch", "%(count)d batches", result.batches) % {
                "count": result.batches
            }
            self.stdout.write(
                ngettext(
                    "deleted %(count)d job in %(batches)s: %(rule)s",
                    "deleted %(count)d jobs in %(batches)s: %(rule)s",
                    result.deleted,
                )
                % {"count": result.deleted, "batches": batches, "rule": describe_rule(result.rule)}
            )
        self.stdout.write(
            ngettext("deleted %(count)d job in all", "deleted %(count)d jobs in all", total)
            % {"count": total}
        )


def _narrow(rule: PruneRule, queues: tuple[str, ...] | None) -> PruneRule | None:
    """Restrict a configured rule to the --queue options."""
    if queues is None:
        return rule
    if rule.queues is not None:
        kept = tuple(q for q in rule.queues if q in queues)
    else:
        kept = tuple(q for q in queues if q not in rule.except_queues)
    return PruneRule(rule.status, rule.older_than, queues=kept) if kept else None

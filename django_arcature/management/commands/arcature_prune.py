"""``manage.py arcature_prune``: delete finished jobs by age, in small batches."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from django_arcature.core.durations import parse_duration
from django_arcature.management.database import add_database_argument
from django_arcature.management.options import queue_name, whole_number
from django_arcature.management.ready import RefusedDatabaseStopsCommand
from django_arcature.retention.prune import count_prunable, prune
from django_arcature.retention.rules import FINISHED, MAX_BATCH, PruneRule, read_retention


class Command(RefusedDatabaseStopsCommand):
    help = (
        "Delete succeeded, cancelled and dead jobs older than ARCATURE['RETENTION'] (or "
        "--older-than). Pending and running jobs are never touched."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--dry-run", action="store_true", help="Count, delete nothing.")
        parser.add_argument(
            "--older-than",
            metavar="DURATION",
            help="Age instead of the settings, for every status chosen (e.g. 7d, 12h, 90m).",
        )
        parser.add_argument(
            "--status",
            action="append",
            choices=FINISHED,
            help="Only this status (repeatable; default: every finished status).",
        )
        parser.add_argument(
            "--queue",
            action="append",
            type=queue_name,
            help="Only this queue (repeatable; default: all).",
        )
        parser.add_argument(
            "--batch-size",
            type=whole_number(1, MAX_BATCH),
            default=1000,
            metavar="N",
            help=f"Rows per delete, 1 to {MAX_BATCH} (as RETENTION['batch_size']). Default: 1000.",
        )
        add_database_argument(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        statuses = options["status"] or list(FINISHED)
        queues = tuple(options["queue"]) if options["queue"] else None
        if options["older_than"] is not None:
            try:
                age = parse_duration(options["older_than"])
            except ValueError as exc:
                raise CommandError(f"--older-than: {exc}") from None
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
                    "nothing to prune: ARCATURE['RETENTION'] sets no age for these statuses; "
                    "pass --older-than"
                )
        using = self.migrated_database(options)
        total = 0
        if options["dry_run"]:
            for rule in rules:
                count = count_prunable(rule, using)
                total += count
                self.stdout.write(f"would delete {count} job(s): {rule.describe()}")
            self.stdout.write(f"would delete {total} job(s) in all (dry run)")
            return
        for result in prune(rules, using, batch=options["batch_size"]):
            total += result.deleted
            self.stdout.write(
                f"deleted {result.deleted} job(s) in {result.batches} batch(es): "
                f"{result.rule.describe()}"
            )
        self.stdout.write(f"deleted {total} job(s) in all")


def _narrow(rule: PruneRule, queues: tuple[str, ...] | None) -> PruneRule | None:
    """Restrict a configured rule to the --queue options."""
    if queues is None:
        return rule
    if rule.queues is not None:
        kept = tuple(q for q in rule.queues if q in queues)
    else:
        kept = tuple(q for q in queues if q not in rule.except_queues)
    return PruneRule(rule.status, rule.older_than, queues=kept) if kept else None

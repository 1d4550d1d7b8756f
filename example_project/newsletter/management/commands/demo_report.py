"""``manage.py demo_report``: where every example job ended, as text or JSON."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from django_arcature.models import Job

#: Characters of result or error shown per line, so a row fits a 150-column terminal.
OUTCOME_WIDTH = 100


def shorten(text: str, width: int = OUTCOME_WIDTH) -> str:
    """One line of at most ``width`` characters, cut between words and marked with " …".

    Cutting at a fixed index split words ("…does not fit the handl"), which reads
    like a corrupted message. Newlines (a multi-line error) are folded to spaces
    so a row stays a row. Only a single word longer than half the width (a URL,
    a token) is cut inside itself, since there is no space to cut at.
    """
    text = " ".join(text.split())
    if len(text) <= width:
        return text
    cut = text[: width - 1]
    head, space, _ = cut.rpartition(" ")
    if not space or len(head) < width // 2:
        head = cut[: width - 2]
    return head.rstrip(" ,;:") + " …"


class Command(BaseCommand):
    help = "Print each job's task, status, attempts and result or error (oldest first)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--json", action="store_true", help="Print JSON instead of a table.")

    def handle(self, *args: Any, **options: Any) -> None:
        rows = [
            {
                "id": str(job.pk),
                "task": job.task_name,
                "status": job.status,
                "attempts": job.attempts,
                "error_kind": job.error_kind,
                "last_error": job.last_error,
                "result": job.result,
                "payload": job.payload,
            }
            for job in Job.objects.order_by("created_at")
        ]
        if options["json"]:
            self.stdout.write(json.dumps(rows, indent=2, default=str))
            return
        for row in rows:
            outcome = (
                f"{row['error_kind']}: {row['last_error']}"
                if row["status"] == "dead"
                else json.dumps(row["result"])
                if row["status"] == "succeeded"
                else row["last_error"]
            )
            self.stdout.write(
                f"{row['task']:<28} {row['status']:<10} attempts={row['attempts']}  "
                f"{shorten(str(outcome))}".rstrip()
            )
        by_status = Counter(row["status"] for row in rows)
        summary = ", ".join(f"{count} {status}" for status, count in sorted(by_status.items()))
        self.stdout.write(f"\nBy status: {summary} ({len(rows)} jobs)")

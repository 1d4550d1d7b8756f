"""``manage.py tasks_demo``: enqueue django.tasks tasks, run a worker, print their results."""

from __future__ import annotations

import time
from typing import Any

from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandParser

from tasks_demo.tasks import TaskResult, flaky_fetch, greet, word_count


class Command(BaseCommand):
    help = (
        "Enqueue three django.tasks tasks (sync, async, and one that fails once), run "
        "arcature_worker in burst mode until they finish, and print each TaskResult."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--wait",
            type=float,
            default=30.0,
            help="Give up after this many seconds if a task has not finished. Default: 30.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        results: list[TaskResult[Any, Any]] = [
            word_count.enqueue("the quick brown fox jumps over the lazy dog"),
            greet.enqueue("Ada"),
            flaky_fetch.enqueue("https://example.com/feed.xml"),
        ]
        for result in results:
            self.stdout.write(f"enqueued {result.task.name:12} id={result.id} {result.status}")

        deadline = time.monotonic() + options["wait"]
        while True:
            call_command("arcature_worker", "--burst", verbosity=0)
            for result in results:
                result.refresh()
            if all(r.is_finished for r in results) or time.monotonic() > deadline:
                break
            time.sleep(0.5)  # the failed attempt waits for its retry delay

        for result in results:
            self.stdout.write("")
            self.stdout.write(f"{result.task.name}: {result.status}")
            self.stdout.write(f"  attempts:   {result.attempts} (workers {result.worker_ids})")
            if result.status == "SUCCESSFUL":
                self.stdout.write(f"  returned:   {result.return_value!r}")
            for error in result.errors:
                last_line = error.traceback.strip().splitlines()[-1]
                self.stdout.write(f"  error:      {last_line} ({error.exception_class_path})")

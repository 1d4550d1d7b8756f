"""``manage.py seed_demo``: enqueue a mixed batch that shows every path a job can take."""

from __future__ import annotations

import os
import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction
from django.utils import timezone

from django_arcature.models import Job
from newsletter import jobs
from newsletter.models import Subscriber


class Command(BaseCommand):
    help = (
        "Enqueue a mixed batch of example jobs: welcome mails (plain), feed fetches (async), "
        "a digest enqueued twice (unique: one job), a reminder for later (delayed), a CRM "
        "sync that fails once and then succeeds, a card charge that fails permanently, a "
        "slow export, and one poison row written straight to the table (it ends dead "
        "'malformed'). Run a worker afterwards: manage.py arcature_worker."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--subscribers",
            type=int,
            default=3,
            metavar="N",
            help="How many new subscribers (one welcome mail each). Default: 3.",
        )
        parser.add_argument(
            "--slow-seconds",
            type=float,
            default=2.0,
            metavar="SECONDS",
            help="How long the slow export job takes. Default: 2.",
        )
        parser.add_argument(
            "--reminder-delay",
            type=float,
            default=3600.0,
            metavar="SECONDS",
            help="How far ahead the reminder is scheduled. Default: 3600.",
        )
        parser.add_argument(
            "--superuser",
            metavar="USERNAME",
            help=(
                "Also create an admin superuser with this name, to log in at /admin/. The "
                "password is $DJANGO_SUPERUSER_PASSWORD, or a random one printed once."
            ),
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["superuser"]:
            self._create_superuser(options["superuser"])
        stamp = timezone.now().strftime("%H%M%S%f")

        # The subscribers and their welcome mails commit together, or not at all.
        with transaction.atomic():
            subscribers = [
                Subscriber.objects.create(email=f"reader{i}-{stamp}@example.com")
                for i in range(options["subscribers"])
            ]
            welcomes = jobs.send_welcome.enqueue_many([(s.pk,) for s in subscribers])
        self._say(f"{len(welcomes)} welcome mail(s)", "plain, queue 'email'")

        first = subscribers[0].pk if subscribers else 0
        feeds = jobs.fetch_feed.enqueue_many(
            ["https://example.com/feed.xml", "https://example.org/news.rss"]
        )
        self._say(f"{len(feeds)} feed fetch(es)", "async def handler")

        today = timezone.now().date().isoformat()
        digest = jobs.rebuild_digest.enqueue(today)
        again = jobs.rebuild_digest.enqueue(today)
        same = "the same job" if again.pk == digest.pk else "a second job (?)"
        self._say("digest, twice", f"unique: {same} ({digest.pk})")

        reminder = jobs.send_reminder.using(delay=options["reminder_delay"]).enqueue(first)
        self._say("reminder", f"delayed until {reminder.available_at:%Y-%m-%d %H:%M:%S} UTC")

        crm = jobs.sync_to_crm.enqueue(first)
        self._say("CRM sync", f"fails on attempt 1, succeeds on attempt 2 ({crm.pk})")

        charge = jobs.charge_card.using(priority=5).enqueue(first, amount_cents=25_000)
        self._say("card charge", f"raises Permanent: dead at once ({charge.pk})")

        export = jobs.export_archive.enqueue(options["slow_seconds"])
        self._say("archive export", f"slow: {options['slow_seconds']:g}s ({export.pk})")

        # A row no enqueue() would accept ("abc" is not an int): as an older deploy, a
        # data migration or a hand-written INSERT could leave it. The worker refuses
        # it before calling the handler and never retries it.
        poison = Job(
            task_name=jobs.send_welcome.name,
            queue="email",
            payload={"args": ["abc"], "kwargs": {}},
            available_at=timezone.now(),
            created_at=timezone.now(),
        )
        poison.save(force_insert=True)
        self._say("poison payload", f"written directly; will end dead 'malformed' ({poison.pk})")

        pending = Job.objects.filter(status="pending").count()
        self.stdout.write(
            self.style.SUCCESS(f"{pending} job(s) pending. Now run: manage.py arcature_worker")
        )

    def _say(self, what: str, how: str) -> None:
        self.stdout.write(f"  enqueued {what:<28} {how}")

    def _create_superuser(self, username: str) -> None:
        user_model = get_user_model()
        if user_model.objects.filter(username=username).exists():
            self.stdout.write(f"superuser {username!r} exists already")
            return
        password = os.environ.get("DJANGO_SUPERUSER_PASSWORD")
        generated = password is None
        if password is None:
            password = secrets.token_urlsafe(12)
        user_model.objects.create_superuser(username, f"{username}@example.com", password)
        shown = f" with password {password}" if generated else ""
        self.stdout.write(self.style.SUCCESS(f"created superuser {username!r}{shown}"))

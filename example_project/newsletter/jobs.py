"""The example's jobs: one of each kind django-arcature supports.

Each takes plain JSON values (a subscriber's pk, never the Subscriber itself),
so what a job sees when it runs is the row as it is then, not a stale copy.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import date

from django.core.mail import send_mail
from django.db import transaction
from django.utils import timezone

from django_arcature import Permanent, RetryPolicy, job
from django_arcature.context import current_job

from .models import Subscriber

logger = logging.getLogger(__name__)


# Plain: runs once, returns a JSON result that is stored on the job.
@job(name="newsletter.send_welcome", queue="email", max_attempts=5, timeout=30)
def send_welcome(subscriber_id: int) -> dict[str, object]:
    subscriber = Subscriber.objects.get(pk=subscriber_id)
    # Idempotent: delivery is at-least-once, so a second run must not mail twice.
    # The flag and the mail succeed or fail together.
    with transaction.atomic():
        first_time = Subscriber.objects.filter(pk=subscriber_id, welcomed_at__isnull=True).update(
            welcomed_at=timezone.now()
        )
        if first_time:
            send_mail("Welcome!", "Thanks for subscribing.", None, [subscriber.email])
    return {"sent_to": subscriber.email, "first_time": bool(first_time)}


# Async: an ``async def`` handler runs on an event loop; await I/O freely.
@job(name="newsletter.fetch_feed")
async def fetch_feed(url: str) -> dict[str, object]:
    await asyncio.sleep(0.05)  # stands in for an HTTP request
    return {"url": url, "items": len(url) % 7 + 1}


# Unique: at most one pending or running digest per day, however often it is enqueued.
@job(name="newsletter.rebuild_digest", unique=True)
def rebuild_digest(day: str) -> dict[str, object]:
    date.fromisoformat(day)  # dates travel as ISO text
    return {"day": day, "subscribers": Subscriber.objects.count()}


# Delayed: enqueued with send_reminder.using(delay=...) so it runs later.
@job(name="newsletter.send_reminder", queue="email")
def send_reminder(subscriber_id: int) -> str:
    Subscriber.objects.filter(pk=subscriber_id).update(reminded_at=timezone.now())
    return "reminded"


# Fails, then succeeds: the first attempt meets a "flaky CRM", the retry gets through.
# Its retry is due well before the slow export below finishes, so one --burst run
# (which lasts while any job runs) sees it through.
@job(
    name="newsletter.sync_to_crm",
    max_attempts=4,
    retry=RetryPolicy(base_seconds=0.2, factor=2.0, max_seconds=5.0, jitter=0.0),
)
def sync_to_crm(subscriber_id: int) -> int:
    context = current_job()
    attempt = context.attempt if context else 1
    if attempt < 2:
        raise ConnectionError(f"the CRM did not answer (attempt {attempt})")
    Subscriber.objects.filter(pk=subscriber_id).update(crm_synced=True)
    return attempt


# Permanent failure: no retry can fix a declined card, so the job goes dead at once.
@job(name="newsletter.charge_card", max_attempts=5)
def charge_card(subscriber_id: int, amount_cents: int) -> dict[str, int]:
    if amount_cents > 10_000:
        raise Permanent(f"card declined: {amount_cents} cents is over the 10000 limit")
    return {"subscriber_id": subscriber_id, "charged": amount_cents}


# Slow: takes a while, checks in with current_job() so it can stop early when asked.
@job(name="newsletter.export_archive", timeout=60, max_attempts=1)
def export_archive(seconds: float) -> str:
    context = current_job()
    if context is not None and context.wait(seconds):
        return f"stopped early ({context.cancel_reason})"
    return f"exported after {seconds:g}s"

"""The site's tasks, declared as a site would.

``tick`` runs every second by django-crontask: ``manage.py crontask`` imports every
installed app's ``tasks`` module and enqueues it on its schedule, from APScheduler's
pool threads, through ``django.tasks`` (here ``ArcatureBackend``). ``shout`` and
``refuse`` are what django-tasks-monitor records: one succeeds, one raises.
"""

from __future__ import annotations

from apscheduler.triggers.interval import IntervalTrigger
from crontask import cron
from django.tasks import task

from django_arcature.backend import task as arcature_task


@cron(IntervalTrigger(seconds=1))
@task
def tick() -> str:
    return "tick"


@task
def shout(text: str) -> str:
    return text.upper()


class Refused(ValueError):
    """What ``refuse`` raises: the monitor records its class and traceback."""


# One attempt: the monitor's record of a task that failed for good, not of a retry.
@arcature_task(max_attempts=1)
def refuse(reason: str) -> None:
    raise Refused(reason)

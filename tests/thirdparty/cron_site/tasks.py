"""A task on a one-second schedule, as a site would declare it with django-crontask.

``manage.py crontask`` imports every installed app's ``tasks`` module and enqueues
the task on its schedule, from APScheduler's pool threads, through
``django.tasks``: here through ``ArcatureBackend``.
"""

from __future__ import annotations

from apscheduler.triggers.interval import IntervalTrigger
from crontask import cron
from django.tasks import task


@cron(IntervalTrigger(seconds=1))
@task
def tick() -> str:
    return "tick"

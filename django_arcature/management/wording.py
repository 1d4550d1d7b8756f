"""What the management commands say to people, in the project's language.

Why the commands have their own phrasings of a queue limit or a prune rule:
``QueueLimit.describe()`` and ``PruneRule.describe()`` feed log lines (the
worker's prune duty logs ``pruned 3 job(s): ...``), which stay English so that a
log search finds them in every project. A command's output is read by the person
who typed it, so it gets whole translated sentences instead, built here.

Commands speak ``settings.LANGUAGE_CODE``: Django (since 2.1) no longer
deactivates translations around ``handle()`` (``BaseCommand.leave_locale_alone`` is
gone; only ``@no_translations`` commands such as ``migrate`` do), and ``gettext``
without an activated language falls back to ``LANGUAGE_CODE``. The shell's
``LANG`` is not consulted, as it is not for the rest of the project; a command
called from code (``call_command``) inside ``translation.override()`` speaks
that language. A project that sets ``USE_I18N = False`` gets English.
"""

from __future__ import annotations

import unicodedata
from datetime import timedelta

from django.utils.functional import Promise as StrPromise
from django.utils.translation import gettext, ngettext, pgettext

from django_arcature.queues.limits import QueueLimit
from django_arcature.retention.rules import PruneRule


def finished_jobs(status: str) -> str:
    """The jobs of a finished status, as the subject of a prune rule."""
    words = {
        "succeeded": pgettext("finished jobs", "succeeded"),
        "cancelled": pgettext("finished jobs", "cancelled"),
        "dead": pgettext("finished jobs", "dead"),
    }
    return words.get(status, status)


def duration(delta: timedelta) -> str:
    """An age such as "7 days" or "1 hour, 30 minutes": its two largest non-zero units.

    Not ``django.utils.timesince``: it counts in weeks and months, so the ``30d``
    a project wrote in RETENTION would read back as "4 weeks, 2 days".
    """
    left = max(int(delta.total_seconds()), 0)
    parts: list[str] = []
    for size, unit in ((86400, "day"), (3600, "hour"), (60, "minute"), (1, "second")):
        count, left = divmod(left, size)
        if count or (unit == "second" and not parts):
            parts.append(_unit(unit, count))
        if len(parts) == 2:
            break
    return pgettext("list separator", ", ").join(parts)


def _unit(unit: str, count: int) -> str:
    if unit == "day":
        text = ngettext("%(count)d day", "%(count)d days", count)
    elif unit == "hour":
        text = ngettext("%(count)d hour", "%(count)d hours", count)
    elif unit == "minute":
        text = ngettext("%(count)d minute", "%(count)d minutes", count)
    else:
        text = ngettext("%(count)d second", "%(count)d seconds", count)
    return text % {"count": count}


def describe_rule(rule: PruneRule) -> str:
    """A prune rule as one sentence: which jobs, how old, in which queues."""
    values = {"jobs": finished_jobs(rule.status), "age": duration(rule.older_than)}
    if rule.queues:
        values["queues"] = ", ".join(rule.queues)
        return (
            ngettext(
                "%(jobs)s older than %(age)s in queue %(queues)s",
                "%(jobs)s older than %(age)s in queues %(queues)s",
                len(rule.queues),
            )
            % values
        )
    if rule.except_queues:
        values["queues"] = ", ".join(rule.except_queues)
        return gettext("%(jobs)s older than %(age)s in every queue but %(queues)s") % values
    return gettext("%(jobs)s older than %(age)s in every queue") % values


def describe_limit(limit: QueueLimit) -> str:
    """A queue's ``ARCATURE["QUEUES"]`` limits, as ``arcature_queue list`` shows them."""
    parts: list[str] = []
    if limit.concurrency is not None:
        parts.append(
            ngettext("at most %(count)d running", "at most %(count)d running", limit.concurrency)
            % {"count": limit.concurrency}
        )
    if limit.rate is not None:
        parts.append(
            ngettext(
                "at most %(count)d start per %(period)s",
                "at most %(count)d starts per %(period)s",
                limit.rate,
            )
            % {"count": limit.rate, "period": _period(limit.per_seconds)}
        )
    return pgettext("list separator", ", ").join(parts) or gettext("no limit")


def _period(seconds: float) -> str:
    """A rate's window: "minute" for "100/m", "15 minutes" for "3/15m"."""
    units: dict[float, str] = {
        1: pgettext("rate period", "second"),
        60: pgettext("rate period", "minute"),
        3600: pgettext("rate period", "hour"),
        86400: pgettext("rate period", "day"),
    }
    return units.get(seconds) or duration(timedelta(seconds=seconds))


def width(text: str) -> int:
    """Columns a terminal gives ``text``: a Japanese or Chinese character takes two."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def ljust(text: str, columns: int) -> str:
    return text + " " * max(columns - width(text), 0)


def rjust(text: str, columns: int) -> str:
    return " " * max(columns - width(text), 0) + text


class Translated:
    """A class attribute that reads as a ``str`` in the language active when it is read.

    For a command's ``help``: the class is built at import, before any language is
    active, and argparse runs regular expressions over the description, which a
    lazy string (``gettext_lazy``'s proxy) does not survive.
    """

    def __init__(self, message: StrPromise) -> None:
        self.message = message

    def __get__(self, instance: object, owner: type | None = None) -> str:
        return str(self.message)

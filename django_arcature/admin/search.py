"""The admin's text search, bounded to the newest rows of the list it runs on.

A text search is an ``icontains`` on the task name and the error text: no index
serves it, so a term that matches nothing read every row of the table (14 s on
10,000,000 rows on PostgreSQL, 3.4 s on 1,000,000 on MariaDB), and so did the date
hierarchy's first and last row of a term that matches everything. Here a search
looks only at the newest ``ADMIN_SEARCH_WINDOW`` rows of the list, after its
filters and date hierarchy, by the list's date field (``created_at`` on the job
list, ``finished_at`` on the dead letters): one statement reads that many entries
of an index to find the oldest date in the window, and the search then adds
``date >= that date``, which the same index serves. Older rows stay reachable: a
date in the hierarchy or a filter moves the window onto them, and the page says
when a search was cut (``window_note``). A job id is always found by primary key,
whatever its age (``BaseJobAdmin.get_search_results``).
"""

from __future__ import annotations

import datetime
from typing import Any

from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import formats, timezone
from django.utils.translation import ngettext

from django_arcature.conf import get_settings

#: Where the window a search applied is kept for the page's note: (rows, oldest date).
REQUEST_ATTRIBUTE = "_arcature_search_window"


def search_window(
    request: HttpRequest, queryset: QuerySet[Any], field: str | None
) -> QuerySet[Any]:
    """``queryset`` narrowed to its newest ``ADMIN_SEARCH_WINDOW`` rows by ``field``.

    Unchanged when the setting is ``None``, when there is no date field, or when the
    list holds no more rows than the window (then the search reads them all anyway).
    """
    window = get_settings().admin_search_window
    if window is None or not field:
        return queryset
    newest = (
        queryset.filter(**{f"{field}__isnull": False})
        .order_by(f"-{field}")
        .values_list(field, flat=True)
    )
    oldest = list(newest[window - 1 : window])
    if not oldest:
        return queryset
    setattr(request, REQUEST_ATTRIBUTE, (window, oldest[0]))
    return queryset.filter(**{f"{field}__gte": oldest[0]})


def window_note(request: HttpRequest) -> str:
    """The sentence under a list whose search was cut to the window, or ``""``."""
    applied: tuple[int, datetime.datetime] | None = getattr(request, REQUEST_ATTRIBUTE, None)
    if applied is None:
        return ""
    rows, since = applied
    if timezone.is_aware(since):
        since = timezone.localtime(since)
    return ngettext(
        "This search looked at the newest %(rows)s row of this list only (from "
        "%(since)s on). Choose a date or a filter to search older ones; a job id is "
        "always found.",
        "This search looked at the newest %(rows)s rows of this list only (from "
        "%(since)s on). Choose a date or a filter to search older ones; a job id is "
        "always found.",
        rows,
    ) % {
        "rows": formats.number_format(rows, force_grouping=True),
        "since": formats.date_format(since, "SHORT_DATETIME_FORMAT"),
    }

"""System checks for schedules and queue settings (registered by ``django_arcature.checks``)."""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Error, Tags, register
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from django_arcature import registry

from .cron import EXTRA_HINT, cron_available
from .periodic import declared


@register(Tags.compatibility)
def check_cron_library(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """``@periodic`` without cronsim: say what to install instead of failing in the worker.

    Declarations exist only once the apps' ``jobs`` modules are imported, and
    Django runs checks in no fixed order, so import them here rather than rely
    on the registry check having run first; an import error is that check's
    to report (E011).
    """
    try:
        registry.autodiscover()
    except Exception:
        return []
    specs = declared()
    if not specs or cron_available():
        return []
    names = ", ".join(sorted(specs)[:5])
    return [
        Error(
            _("@periodic schedules are declared (%(names)s) but the cron library is missing.")
            % {"names": names},
            hint=_("Install it: %(command)s") % {"command": EXTRA_HINT},
            id="arcature.E030",
        )
    ]


#: At most this many stored schedules are named in one message.
NAMED_AT_MOST = 5


@register(Tags.compatibility)
def check_stored_schedules(
    app_configs: Any = None, databases: Any = None, **kwargs: Any
) -> list[CheckMessage]:
    """Enabled schedules in the table that this host cannot evaluate (arcature.E031).

    An operator may store a schedule in the admin on a host that has the cron
    library, and workers run on one that lacks it, or a time zone this host's
    tzdata does not know may be written: such a schedule never fires. This
    check reads the table, so it must never fail itself: a database that is
    unreachable, not migrated yet, or not allowed in this context (a test
    without database access) simply yields no message.
    """
    from django.db import connections, router

    from .cron import InvalidSchedule, validate_expression
    from .cron import zone as find_zone
    from .models import Schedule

    try:
        using = router.db_for_read(Schedule)
        if databases is not None and using not in databases:
            return []
        # Look before reading: a failed query on a missing table would abort an open
        # transaction on PostgreSQL.
        if Schedule._meta.db_table not in connections[using].introspection.table_names():
            return []
        rows = list(
            Schedule.objects.using(using)
            .filter(enabled=True)
            .order_by("name")
            .values_list("name", "cron", "timezone")
        )
    except Exception:
        return []
    if not rows:
        return []
    if not cron_available():
        names = ", ".join(name for name, _, _ in rows[:NAMED_AT_MOST])
        if len(rows) > NAMED_AT_MOST:
            names = _("%(names)s and %(count)d more") % {
                "names": names,
                "count": len(rows) - NAMED_AT_MOST,
            }
        return [
            Error(
                ngettext(
                    "%(count)d enabled schedule is stored (%(names)s) but the cron library is "
                    "missing on this host: workers here cannot fire it.",
                    "%(count)d enabled schedules are stored (%(names)s) but the cron library is "
                    "missing on this host: workers here cannot fire them.",
                    len(rows),
                )
                % {"count": len(rows), "names": names},
                hint=_("Install it: %(command)s") % {"command": EXTRA_HINT},
                id="arcature.E031",
            )
        ]
    problems: list[str] = []
    for name, cron, timezone in rows:
        try:
            validate_expression(cron)
            find_zone(timezone)
        except InvalidSchedule as exc:
            problems.append(f"{name}: {exc}")
    if not problems:
        return []
    listed = "; ".join(problems[:NAMED_AT_MOST])
    if len(problems) > NAMED_AT_MOST:
        listed = _("%(names)s and %(count)d more") % {
            "names": listed,
            "count": len(problems) - NAMED_AT_MOST,
        }
    return [
        Error(
            _("stored schedules that this host cannot evaluate (they never fire): %(problems)s")
            % {"problems": listed},
            hint=_(
                "Fix or disable them in the admin (Schedules), or install the missing time "
                "zone data (pip install tzdata)."
            ),
            id="arcature.E031",
        )
    ]

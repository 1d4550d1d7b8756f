"""The schedules page: next fire times, the last slot's job, enable/disable and run now.

Registered by ``django_arcature.admin``. Code-declared schedules appear here
once a worker has synced them; their expression, zone and arguments belong to
the code (read-only here), their ``enabled`` flag to the operator.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext

from django_arcature.db.clock import database_now
from django_arcature.schedules.cron import InvalidSchedule, next_slots, zone
from django_arcature.schedules.models import Schedule, ScheduleSource

#: Fields the code owns on a ``@periodic`` schedule.
CODE_FIELDS = (
    "name",
    "task_name",
    "backend",
    "cron",
    "timezone",
    "args",
    "kwargs",
    "queue",
    "priority",
    "missed",
    "catch_up",
    "source",
)

_now_cache: tuple[float, datetime] | None = None


def _database_now(using: str) -> datetime:
    """The database's now, read at most once a second for a page full of schedules."""
    global _now_cache
    if _now_cache is None or time.monotonic() - _now_cache[0] > 1.0:
        _now_cache = (time.monotonic(), database_now(using))
    return _now_cache[1]


if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[Schedule]
else:  # ModelAdmin is generic only in the stubs
    _ModelAdmin = admin.ModelAdmin


class ScheduleAdmin(_ModelAdmin):
    list_display = (
        "name",
        "task_name",
        "cron",
        "timezone",
        "enabled",
        "source",
        "next_fire_times",
        "last_slot_at",
        "last_job",
    )
    list_filter = ("enabled", "source", "missed")
    search_fields = ("name", "task_name")
    actions = ("enable_schedules", "disable_schedules", "run_schedules_now")
    readonly_fields = ("last_slot_at", "last_fired_at", "last_job", "next_fire_times")

    def get_readonly_fields(self, request: HttpRequest, obj: Schedule | None = None) -> Any:
        fields = tuple(super().get_readonly_fields(request, obj))
        if obj is not None and obj.source == ScheduleSource.CODE:
            return fields + CODE_FIELDS
        return (*fields, "source")

    @admin.display(description=gettext_lazy("next fire times"))
    def next_fire_times(self, obj: Schedule) -> SafeString | str:
        try:
            tz = zone(obj.timezone)
            slots = next_slots(obj.cron, obj.timezone, _database_now(obj._state.db or "default"), 3)
        except (InvalidSchedule, ImportError) as exc:
            return str(exc)
        if not obj.enabled:
            return _("(disabled)")
        return format_html_join(
            "",
            "<div>{}</div>",
            ((slot.astimezone(tz).strftime("%Y-%m-%d %H:%M:%S %Z"),) for slot in slots),
        )

    @admin.display(description=gettext_lazy("last job"))
    def last_job(self, obj: Schedule) -> SafeString | str:
        if obj.last_job_id is None:
            return "-"
        url = reverse("admin:django_arcature_job_change", args=[obj.last_job_id])
        return format_html('<a href="{}">{}</a>', url, obj.last_job_id)

    @admin.action(description=gettext_lazy("Enable selected schedules"), permissions=["change"])
    def enable_schedules(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        count = queryset.update(enabled=True)
        self.message_user(
            request, ngettext("%d schedule enabled.", "%d schedules enabled.", count) % count
        )

    @admin.action(description=gettext_lazy("Disable selected schedules"), permissions=["change"])
    def disable_schedules(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        count = queryset.update(enabled=False)
        self.message_user(
            request, ngettext("%d schedule disabled.", "%d schedules disabled.", count) % count
        )

    @admin.action(
        description=gettext_lazy("Run selected schedules now (an extra job each)"),
        permissions=["change"],
    )
    def run_schedules_now(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        """Enqueue one job per schedule at once; the slots and the watermark are untouched."""
        from django_arcature.models import Job

        for schedule in queryset:
            try:
                job = Job.objects.db_manager(queryset.db).enqueue(
                    schedule.task_name,
                    args=list(schedule.args or []),
                    kwargs=dict(schedule.kwargs or {}),
                    queue=schedule.queue or None,
                    priority=schedule.priority,
                    backend=schedule.backend,
                )
            except (ValueError, LookupError, TypeError) as exc:
                self.message_user(
                    request,
                    _("Schedule %(name)s could not run: %(error)s")
                    % {"name": schedule.name, "error": exc},
                    messages.ERROR,
                )
                continue
            url = reverse("admin:django_arcature_job_change", args=[job.pk])
            self.message_user(
                request,
                format_html(
                    _('Schedule {} enqueued job <a href="{}">{}</a>.'), schedule.name, url, job.pk
                ),
            )

"""The schedules page: next fire times, the last slot's job, enable/disable and run now.

Registered by ``django_arcature.admin``. Code-declared schedules appear here
once a worker has synced them; their expression, zone and arguments belong to
the code (read-only here), their ``enabled`` flag to the operator.

Saving a schedule writes only the columns the form changed: the watermark is
the workers' (a save that wrote the whole row could put back a ``last_slot_at``
a worker advanced a moment before, and the slot would fire twice). Enabling
a schedule again starts its window at that instant (``enabled_at``), so the
slots of the disabled time do not fire.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.forms import ModelForm
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext

from django_arcature.db.clock import database_now
from django_arcature.schedules.cron import InvalidSchedule, next_slots, zone
from django_arcature.schedules.enqueue import enqueue_for_schedule
from django_arcature.schedules.models import Schedule, ScheduleQuerySet, ScheduleSource

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
    readonly_fields = (
        "created_at",
        "enabled_at",
        "last_slot_at",
        "last_fired_at",
        "last_job",
        "next_fire_times",
    )

    class Media:
        # Our colours (row links at 4.5:1 on every row background), as on the job pages.
        css = {"all": ("django_arcature/admin.css",)}

    def get_readonly_fields(self, request: HttpRequest, obj: Schedule | None = None) -> Any:
        fields = tuple(super().get_readonly_fields(request, obj))
        if obj is not None and obj.source == ScheduleSource.CODE:
            return fields + CODE_FIELDS
        return (*fields, "source")

    def save_model(
        self, request: HttpRequest, obj: Schedule, form: ModelForm[Schedule], change: bool
    ) -> None:
        """A new row is inserted whole; an edit writes only what the form changed."""
        if not change:
            super().save_model(request, obj, form, change)
            return
        columns = {field.name for field in obj._meta.concrete_fields}
        obj.save(update_fields=[name for name in form.changed_data if name in columns])

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
    def enable_schedules(self, request: HttpRequest, queryset: ScheduleQuerySet) -> None:
        count = queryset.enable()
        self.message_user(
            request, ngettext("%d schedule enabled.", "%d schedules enabled.", count) % count
        )

    @admin.action(description=gettext_lazy("Disable selected schedules"), permissions=["change"])
    def disable_schedules(self, request: HttpRequest, queryset: ScheduleQuerySet) -> None:
        count = queryset.disable()
        self.message_user(
            request, ngettext("%d schedule disabled.", "%d schedules disabled.", count) % count
        )

    @admin.action(
        description=gettext_lazy("Run selected schedules now (an extra job each)"),
        permissions=["change"],
    )
    def run_schedules_now(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        """Enqueue one job per schedule at once; the slots and the watermark are untouched."""
        for schedule in queryset:
            try:
                job = enqueue_for_schedule(schedule, queryset.db)
            except (ValueError, LookupError, TypeError, ImportError) as exc:
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

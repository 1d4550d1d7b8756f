"""The queues page: pause and resume, with each queue's depth and configured limits.

Registered by ``django_arcature.admin``. Pausing goes through
``queues.control`` so idle PostgreSQL workers hear of it at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.db.models import Count, Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils.translation import gettext_lazy, ngettext

from django_arcature.queues.control import ensure_rows, pause, resume
from django_arcature.queues.limits import read_limits
from django_arcature.queues.models import QueueState

if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[QueueState]
else:  # ModelAdmin is generic only in the stubs
    _ModelAdmin = admin.ModelAdmin


class QueueStateAdmin(_ModelAdmin):
    list_display = ("name", "paused", "paused_at", "pending", "running", "limits")
    list_filter = ("paused",)
    actions = ("pause_queues", "resume_queues")
    fields = ("name", "paused", "paused_at")
    readonly_fields = ("paused_at",)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """List every queue that has live jobs or a limit, not only those touched before."""
        from django_arcature.models import Job, JobStatus

        using = self.get_queryset(request).db
        live = (
            Job.objects.using(using)
            .filter(status__in=[JobStatus.PENDING, JobStatus.RUNNING])
            .values("queue")
            .annotate(
                pending=Count("id", filter=Q(status=JobStatus.PENDING)),
                running=Count("id", filter=Q(status=JobStatus.RUNNING)),
            )
        )
        self._depths = {row["queue"]: row for row in live}
        ensure_rows(sorted(set(self._depths) | set(read_limits())), using)
        return super().changelist_view(request, extra_context)

    @admin.display(description=gettext_lazy("pending"))
    def pending(self, obj: QueueState) -> int:
        return int(getattr(self, "_depths", {}).get(obj.name, {}).get("pending", 0))

    @admin.display(description=gettext_lazy("running"))
    def running(self, obj: QueueState) -> int:
        return int(getattr(self, "_depths", {}).get(obj.name, {}).get("running", 0))

    @admin.display(description=gettext_lazy("limits"))
    def limits(self, obj: QueueState) -> str:
        limit = read_limits().get(obj.name)
        return limit.describe() if limit else "-"

    def save_model(self, request: HttpRequest, obj: QueueState, form: Any, change: bool) -> None:
        """Save the row, then flip the flag through ``control`` (which notifies workers)."""
        wanted = obj.paused
        using = obj._state.db or "default"
        if change:
            obj.paused = QueueState.objects.using(using).get(pk=obj.pk).paused
        else:
            obj.paused = False
        super().save_model(request, obj, form, change)
        (pause if wanted else resume)(obj.name, using)
        obj.refresh_from_db()

    @admin.action(description=gettext_lazy("Pause selected queues"), permissions=["change"])
    def pause_queues(self, request: HttpRequest, queryset: QuerySet[QueueState]) -> None:
        count = sum(pause(state.name, queryset.db) for state in queryset)
        self.message_user(request, ngettext("%d queue paused.", "%d queues paused.", count) % count)

    @admin.action(description=gettext_lazy("Resume selected queues"), permissions=["change"])
    def resume_queues(self, request: HttpRequest, queryset: QuerySet[QueueState]) -> None:
        count = sum(resume(state.name, queryset.db) for state in queryset)
        self.message_user(
            request, ngettext("%d queue resumed.", "%d queues resumed.", count) % count
        )

"""The queues page: pause and resume, with each queue's depth and configured limits.

Registered by ``django_arcature.admin``. Pausing goes through
``queues.control`` so idle PostgreSQL workers hear of it at once.

The page lists every queue something names (``queues.names``), not only those
with a control row; viewing it creates no row. A queue without a row gets a
pause button of its own (``pause_named_view``), which refuses names nothing
uses, so a typo leaves no row behind.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import URLPattern, path, reverse
from django.utils.translation import gettext, gettext_lazy, ngettext
from django.views.decorators.http import require_POST

from django_arcature.core.limits import QUEUE_MAX_LENGTH, name_problem
from django_arcature.queues.control import ensure_rows, pause, resume
from django_arcature.queues.limits import read_limits
from django_arcature.queues.models import QueueState
from django_arcature.queues.names import named_queues

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
    change_list_template = "django_arcature/admin/queues_change_list.html"

    class Media:
        # Our colours (row links at 4.5:1 on every row background), as on the job pages.
        css = {"all": ("django_arcature/admin.css",)}

    def get_readonly_fields(self, request: HttpRequest, obj: QueueState | None = None) -> Any:
        """The name is the primary key: renaming would save a second row (and was a 500).
        A queue's name lives on its jobs and handlers, so there is nothing to rename."""
        fields = tuple(super().get_readonly_fields(request, obj))
        return fields if obj is None else ("name", *fields)

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        pause_named = path(
            "pause-named/",
            self.admin_site.admin_view(require_POST(self.pause_named_view)),
            name="{}_{}_pause_named".format(*info),
        )
        # Before the defaults: their "<path:object_id>/" would take the path otherwise.
        return [pause_named, *super().get_urls()]

    def _live_depths(self, using: str) -> dict[str, dict[str, Any]]:
        from django_arcature.models import Job, JobStatus

        live = (
            Job.objects.using(using)
            .filter(status__in=[JobStatus.PENDING, JobStatus.RUNNING])
            .values("queue")
            .annotate(
                pending=Count("id", filter=Q(status=JobStatus.PENDING)),
                running=Count("id", filter=Q(status=JobStatus.RUNNING)),
            )
        )
        return {row["queue"]: dict(row) for row in live}

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """The rows, then every other queue something names (running: no row, no pause)."""
        using = self.get_queryset(request).db
        self._depths = self._live_depths(using)
        with_rows = set(QueueState.objects.using(using).values_list("name", flat=True))
        limits = read_limits()
        others = [
            {
                "name": name,
                "pending": self.pending_of(name),
                "running": self.running_of(name),
                "limits": limits[name].describe() if name in limits else "-",
            }
            for name in sorted(named_queues(using, with_rows=False) - with_rows)
        ]
        context = {
            **(extra_context or {}),
            "arcature_unrowed_queues": others,
            "arcature_pause_named_url": (
                reverse(f"{self.admin_site.name}:django_arcature_queuestate_pause_named")
                if self.has_change_permission(request)
                else None
            ),
        }
        return super().changelist_view(request, context)

    def pause_named_view(self, request: HttpRequest) -> HttpResponse:
        """Pause a queue that has no row yet; only a name something uses, so a typo (or a
        name the worker's ``--queue`` would refuse) leaves no row behind."""
        if not self.has_change_permission(request):
            raise PermissionDenied
        using = self.get_queryset(request).db
        name = request.POST.get("name", "")
        problem = name_problem(name, "queue", QUEUE_MAX_LENGTH)
        if problem is None and name not in named_queues(using):
            problem = gettext("no @job, ARCATURE['QUEUES'] entry or live job names it")
        if problem is not None:
            self.message_user(
                request,
                gettext("Queue %(name)r was not paused: %(problem)s.")
                # Cut: a posted value of any size would otherwise go into the message.
                % {"name": name[:QUEUE_MAX_LENGTH], "problem": problem},
                messages.ERROR,
            )
        else:
            pause(name, using)
            self.message_user(request, gettext("Queue %(name)s paused.") % {"name": name})
        return HttpResponseRedirect(
            reverse(f"{self.admin_site.name}:django_arcature_queuestate_changelist")
        )

    def pending_of(self, name: str) -> int:
        return int(getattr(self, "_depths", {}).get(name, {}).get("pending", 0))

    def running_of(self, name: str) -> int:
        return int(getattr(self, "_depths", {}).get(name, {}).get("running", 0))

    @admin.display(description=gettext_lazy("pending"))
    def pending(self, obj: QueueState) -> int:
        return self.pending_of(obj.name)

    @admin.display(description=gettext_lazy("running"))
    def running(self, obj: QueueState) -> int:
        return self.running_of(obj.name)

    @admin.display(description=gettext_lazy("limits"))
    def limits(self, obj: QueueState) -> str:
        limit = read_limits().get(obj.name)
        return limit.describe() if limit else "-"

    def save_model(self, request: HttpRequest, obj: QueueState, form: Any, change: bool) -> None:
        """Write only the pause flag, through ``control`` (which notifies workers).

        Never ``obj.save()`` on a change: that wrote every column, so the
        ``recent_starts`` read with the form replaced the one a worker's claim had
        advanced meanwhile, and the queue's rate limit was exceeded. ``paused`` is
        the only editable column, and ``control`` sets it with a one-column UPDATE.
        """
        using = obj._state.db or "default"
        if not change:
            ensure_rows([obj.name], using)
        if not change or "paused" in form.changed_data:
            (pause if obj.paused else resume)(obj.name, using)
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

"""The operator's console: the job list, the dead-letter page and the queue dashboard.

Jobs are read-only here. Nobody adds, edits or deletes a job by hand, because
a hand-made row could break the lifecycle's invariants (a running job without
a claim token, a finished job holding a unique key). Every change an operator
makes is an action that goes through the manager (``admin_actions``), guarded
by its own permission: ``cancel_job``, ``requeue_job``, ``run_job_now``.
"""

from __future__ import annotations

import json
import uuid
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import formats, timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.text import Truncator
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy

if TYPE_CHECKING:
    from django.contrib.admin.options import _FieldsetSpec

from django_arcature.models import DeadJob, Job, JobStatus

from . import actions as admin_actions
from .actions import CANCEL, REQUEUE, RUN_NOW, Operation
from .dashboard import collect, format_age
from .lists import CheapChangeList, EstimatedCountPaginator, QueueFilter, TaskFilter
from .search import search_window

#: URL path segment of each per-job button → the operation it runs.
BUTTON_PATHS = {"cancel": CANCEL, "requeue": REQUEUE, "run-now": RUN_NOW}
#: Admin action name → the operation it runs.
ACTION_NAMES = {"cancel_jobs": CANCEL, "requeue_jobs": REQUEUE, "run_jobs_now": RUN_NOW}

DETAIL_FIELDSETS: _FieldsetSpec = (
    (
        None,
        {
            "fields": (
                "id",
                "task_name",
                "queue",
                "status",
                "priority",
                "attempts_display",
                "unique_key",
                "backend",
            )
        },
    ),
    (
        gettext_lazy("Schedule"),
        {"fields": ("created_at", "available_at", "started_at", "finished_at", "failed_at")},
    ),
    (gettext_lazy("Arguments and result"), {"fields": ("payload_pretty", "result_pretty")}),
    (
        gettext_lazy("Error"),
        {"fields": ("error_kind", "last_error_pretty", "last_traceback_pretty")},
    ),
    (
        gettext_lazy("Lease and worker"),
        {
            "fields": (
                "locked_by",
                "locked_at",
                "lease_seconds",
                "lease_expires_at",
                "lease_state",
                "claim_token",
            )
        },
    ),
    (gettext_lazy("Attempt log"), {"fields": ("attempt_log_pretty",)}),
)


def _pretty_json(value: Any) -> SafeString:
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    return format_html('<pre class="arcature-pre">{}</pre>', text)


def _when(value: Any) -> SafeString | str:
    """A compact local date and time for list columns, the exact instant on hover."""
    if value is None:
        return "-"
    local = timezone.localtime(value)
    return format_html(
        '<time datetime="{}" title="{}">{}</time>',
        value.isoformat(),
        local.isoformat(sep=" ", timespec="seconds"),
        formats.date_format(local, "SHORT_DATETIME_FORMAT"),
    )


def _pre(text: str) -> SafeString | str:
    return format_html('<pre class="arcature-pre">{}</pre>', text) if text else "-"


if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[Job]
else:  # ModelAdmin is generic only in the stubs (no django-stubs-ext at run time)
    _ModelAdmin = admin.ModelAdmin


class BaseJobAdmin(_ModelAdmin):
    """What the job list and the dead-letter page share: read-only rows, cheap lists, actions."""

    paginator = EstimatedCountPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    list_per_page = 50
    search_fields = ("task_name", "last_error")
    search_help_text = gettext_lazy("Search by job id, task name or error text.")
    fieldsets = DETAIL_FIELDSETS
    readonly_fields = (
        "attempts_display",
        "payload_pretty",
        "result_pretty",
        "last_error_pretty",
        "last_traceback_pretty",
        "lease_state",
        "attempt_log_pretty",
    )
    change_list_template = "django_arcature/admin/change_list.html"
    change_form_template = "django_arcature/admin/change_form.html"

    class Media:
        css = {"all": ("django_arcature/admin.css",)}

    # --- permissions -------------------------------------------------------------------

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Job | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Job | None = None) -> bool:
        return False

    def has_view_permission(self, request: HttpRequest, obj: Job | None = None) -> bool:
        """Seeing jobs needs ``view_job`` (or ``change_job``) on the job model itself,
        on every page: the dead-letter proxy needs no permissions of its own."""
        app = Job._meta.app_label
        return request.user.has_perm(f"{app}.view_job") or request.user.has_perm(
            f"{app}.change_job"
        )

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return CANCEL.allowed(request)

    def has_requeue_permission(self, request: HttpRequest) -> bool:
        return REQUEUE.allowed(request)

    def has_run_now_permission(self, request: HttpRequest) -> bool:
        return RUN_NOW.allowed(request)

    # --- list ----------------------------------------------------------------------------

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[CheapChangeList]:
        return CheapChangeList

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Job], search_term: str
    ) -> tuple[QuerySet[Job], bool]:
        """A job id finds that job by its primary key; other text searches task and error
        among the newest ``ADMIN_SEARCH_WINDOW`` rows of the list (``search_window``)."""
        term = search_term.strip()
        if term:
            try:
                job_id = uuid.UUID(term)
            except ValueError:
                pass
            else:
                return queryset.filter(pk=job_id), False
            queryset = search_window(request, queryset, self.date_hierarchy)
        return super().get_search_results(request, queryset, search_term)

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if not self.has_view_or_change_permission(request):
            # Before anything else: someone who may not see the list learns nothing
            # from it, not even which actions exist (Django checks this too, later).
            raise PermissionDenied
        refused = self._refuse_forbidden_action(request)
        if refused is not None:
            return refused
        context = {"arcature_dashboard_url": reverse("admin:django_arcature_dashboard")}
        return super().changelist_view(request, {**context, **(extra_context or {})})

    def _refuse_forbidden_action(self, request: HttpRequest) -> HttpResponse | None:
        """Say why a posted action is refused, where Django would only say "No action selected"."""
        if request.method != "POST" or "action" not in request.POST:
            return None
        try:
            index = int(request.POST.get("index", 0))
            name = request.POST.getlist("action")[index]
        except (ValueError, IndexError):
            return None
        operation = ACTION_NAMES.get(name)
        if operation is None or operation.allowed(request):
            return None
        messages.error(request, admin_actions.refusal_message(operation))
        return HttpResponseRedirect(request.get_full_path())

    @admin.display(description=gettext_lazy("id"))
    def short_id(self, obj: Job) -> str:
        """The id's last eight hex digits: random in every job id, where the first eight
        of a time-ordered (version 7) id are the same for all jobs of the same minute."""
        return obj.pk.hex[-8:] if isinstance(obj.pk, uuid.UUID) else str(obj.pk)[-8:]

    @admin.display(description=gettext_lazy("status"))
    def status_badge(self, obj: Job) -> SafeString:
        return format_html(
            '<span class="arcature-status arcature-status-{}">{}</span>',
            obj.status,
            obj.get_status_display(),
        )

    @admin.display(description=gettext_lazy("attempts"))
    def attempts_display(self, obj: Job) -> str:
        return f"{obj.attempts} / {obj.max_attempts}"

    @admin.display(description=gettext_lazy("created"), ordering="created_at")
    def created(self, obj: Job) -> SafeString | str:
        return _when(obj.created_at)

    @admin.display(description=gettext_lazy("available"), ordering="available_at")
    def available(self, obj: Job) -> SafeString | str:
        return _when(obj.available_at)

    @admin.display(description=gettext_lazy("finished"), ordering="finished_at")
    def finished(self, obj: Job) -> SafeString | str:
        return _when(obj.finished_at)

    @admin.display(description=gettext_lazy("reason"))
    def reason(self, obj: Job) -> SafeString | str:
        if not obj.last_error:
            return "-"
        return format_html(
            '<span title="{}">{}</span>',
            Truncator(obj.last_error).chars(1000),
            Truncator(obj.last_error).chars(120),
        )

    # --- actions -------------------------------------------------------------------------

    @admin.action(description=CANCEL.description, permissions=["cancel"])
    def cancel_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        admin_actions.run_for_request(CANCEL, request, queryset)

    @admin.action(description=REQUEUE.description, permissions=["requeue"])
    def requeue_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        admin_actions.run_for_request(REQUEUE, request, queryset)

    @admin.action(description=RUN_NOW.description, permissions=["run_now"])
    def run_jobs_now(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        admin_actions.run_for_request(RUN_NOW, request, queryset)

    # --- detail --------------------------------------------------------------------------

    @admin.display(description=gettext_lazy("payload"))
    def payload_pretty(self, obj: Job) -> SafeString:
        return _pretty_json(obj.payload)

    @admin.display(description=gettext_lazy("result"))
    def result_pretty(self, obj: Job) -> SafeString | str:
        return _pretty_json(obj.result) if obj.result is not None else "-"

    @admin.display(description=gettext_lazy("last error"))
    def last_error_pretty(self, obj: Job) -> SafeString | str:
        return _pre(obj.last_error)

    @admin.display(description=gettext_lazy("traceback"))
    def last_traceback_pretty(self, obj: Job) -> SafeString | str:
        return _pre(obj.last_traceback)

    @admin.display(description=gettext_lazy("attempt log"))
    def attempt_log_pretty(self, obj: Job) -> SafeString | str:
        return _pretty_json(obj.attempt_log) if obj.attempt_log else "-"

    @admin.display(description=gettext_lazy("lease"))
    def lease_state(self, obj: Job) -> str:
        """Measured against the web server's clock; the sweep itself uses the database's."""
        if obj.status != JobStatus.RUNNING or obj.lease_expires_at is None:
            return "-"
        left = (obj.lease_expires_at - timezone.now()).total_seconds()
        if left >= 0:
            return _("held by %(worker)s, expires in %(age)s") % {
                "worker": obj.locked_by or "?",
                "age": format_age(left),
            }
        return _("expired %(age)s ago: the sweep will return the job to the queue") % {
            "age": format_age(-left)
        }

    def operations_for(self, request: HttpRequest, obj: Job) -> list[dict[str, str]]:
        """The buttons a job's page shows: permitted, and fitting the job's status now."""
        buttons = []
        now = timezone.now()
        for operation in (CANCEL, REQUEUE, RUN_NOW):
            if not operation.allowed(request):
                continue
            if operation.fits(obj.status, obj.available_at, now) is not None:
                continue
            buttons.append(
                {
                    "name": operation.name,
                    "label": str(operation.label),
                    "url": reverse(
                        f"admin:{self.opts.app_label}_{self.opts.model_name}_{operation.name}",
                        args=[obj.pk],
                    ),
                }
            )
        return buttons

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: Job | None = None,
    ) -> HttpResponse:
        if obj is not None:
            context["arcature_operations"] = self.operations_for(request, obj)
        return super().render_change_form(request, context, add, change, form_url, obj)

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        buttons = [
            path(
                f"<path:object_id>/{segment}/",
                self.admin_site.admin_view(self._button_view(operation)),
                name="{}_{}_{}".format(*info, operation.name),
            )
            for segment, operation in BUTTON_PATHS.items()
        ]
        return buttons + super().get_urls()

    def _button_view(self, operation: Operation) -> Any:
        def view(request: HttpRequest, object_id: str) -> HttpResponse:
            return self.button_view(request, object_id, operation)

        return view

    def button_view(
        self, request: HttpRequest, object_id: str, operation: Operation
    ) -> HttpResponse:
        """The per-job button: POST only, refused with a message without the permission."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_view_permission(request):
            raise PermissionDenied
        obj = self.get_object(request, object_id)
        job_page = reverse("admin:django_arcature_job_change", args=[object_id])
        if obj is None:
            messages.warning(request, _("That job is no longer on this page."))
            return HttpResponseRedirect(
                reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_changelist")
            )
        admin_actions.run_for_request(
            operation, request, self.get_queryset(request).filter(pk=obj.pk)
        )
        return HttpResponseRedirect(job_page)


@admin.register(Job)
class JobAdmin(BaseJobAdmin):
    """Every job, newest first."""

    list_display = (
        "short_id",
        "task_name",
        "queue",
        "status_badge",
        "attempts_display",
        "priority",
        "available",
        "finished",
        "error_kind",
        "created",
    )
    list_display_links = ("short_id", "task_name")
    list_filter = ("status", QueueFilter, TaskFilter, "error_kind")
    date_hierarchy = "created_at"
    ordering = ("-created_at",)
    sortable_by = ("created",)
    actions = ("cancel_jobs", "requeue_jobs", "run_jobs_now")

    def get_urls(self) -> list[URLPattern]:
        dashboard = path(
            "dashboard/",
            self.admin_site.admin_view(self.dashboard_view),
            name="django_arcature_dashboard",
        )
        return [dashboard, *super().get_urls()]

    def dashboard_view(self, request: HttpRequest) -> HttpResponse:
        """Queue health at a glance; needs the permission to view jobs."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        data = collect(using=self.get_queryset(request).db)
        context = {
            **self.admin_site.each_context(request),
            "title": _("Queue dashboard"),
            "opts": self.opts,
            "dashboard": data,
            "chart": data.chart,
            "dead_letters_url": reverse("admin:django_arcature_deadjob_changelist"),
            "jobs_url": reverse("admin:django_arcature_job_changelist"),
        }
        return TemplateResponse(request, "django_arcature/admin/dashboard.html", context)


@admin.register(DeadJob)
class DeadJobAdmin(BaseJobAdmin):
    """Dead jobs only, most recent failure first, with the reason in the list."""

    list_display = (
        "short_id",
        "task_name",
        "queue",
        "error_kind",
        "reason",
        "attempts_display",
        "finished",
    )
    list_display_links = ("short_id", "task_name")
    list_filter = ("error_kind", QueueFilter, TaskFilter)
    date_hierarchy = "finished_at"
    # The primary key breaks ties (SQLite stamps finished_at to the millisecond):
    # (status, finished_at) then gives the whole order on MariaDB, whose InnoDB
    # indexes end with the primary key. With created_at as the tie-break it sorted
    # every dead row instead: 1.3 s a page with 20,000 dead jobs in 1,000,000.
    ordering = ("-finished_at", "-pk")
    sortable_by = ("finished",)
    actions = ("requeue_jobs",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Job]:
        return super().get_queryset(request).filter(status=JobStatus.DEAD)


# Schedules and queues: their pages live in admin/schedules.py and admin/queues.py.
from django_arcature.queues.models import QueueState  # noqa: E402
from django_arcature.schedules.models import Schedule  # noqa: E402

from .queues import QueueStateAdmin  # noqa: E402
from .schedules import ScheduleAdmin  # noqa: E402

admin.site.register(Schedule, ScheduleAdmin)
admin.site.register(QueueState, QueueStateAdmin)

# Workflows and batches: their pages live in admin/workflows.py.
from django_arcature.workflows.models import BatchRun, WorkflowRun  # noqa: E402

from .workflows import BatchRunAdmin, WorkflowRunAdmin  # noqa: E402

admin.site.register(WorkflowRun, WorkflowRunAdmin)
admin.site.register(BatchRun, BatchRunAdmin)

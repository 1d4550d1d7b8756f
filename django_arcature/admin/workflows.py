"""Workflow and batch pages: a workflow's graph and nodes, a batch's progress, cancel and resume.

Like the job pages these are read-only: nobody adds or edits a workflow by
hand. Seeing them needs the permission to view jobs (a node *is* a job); the
cancel and resume buttons need ``cancel_job`` and ``requeue_job``, the same
permissions as the job actions, and go through the manager
(``cancel_workflow``, ``resume_workflow``, ``cancel_batch``, ``resume_batch``),
whose writes re-check every status. A page's query count does not grow with the
workflow: the graph is drawn from a bounded prefix of its edges (see
``workflow_graph``), the node table is paginated, and a batch's counts come from
its shard rows, never from its members.
"""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
)
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.safestring import SafeString
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext

from django_arcature.models import Job, JobStatus
from django_arcature.workflows.models import BatchRun, WorkflowNode, WorkflowRun

from .actions import CANCEL, REQUEUE, Operation, refusal_message
from .lists import EstimatedCountPaginator
from .run_pages import (
    LIVE,
    REASON_MAX_LENGTH,
    batch_callbacks,
    node_page,
    progress_segments,
    status_counts,
    status_label,
    workflow_graph,
)

if TYPE_CHECKING:
    from django_arcature.manager.workflow_writes import Resumed

logger = logging.getLogger(__name__)

if TYPE_CHECKING:
    _WorkflowAdmin = admin.ModelAdmin[WorkflowRun]
    _BatchAdmin = admin.ModelAdmin[BatchRun]
else:  # ModelAdmin is generic only in the stubs
    _WorkflowAdmin = _BatchAdmin = admin.ModelAdmin


class RunAdminMixin:
    """Read-only, seen with the permission to view jobs; cancel and resume as POST buttons."""

    admin_site: admin.AdminSite
    opts: Any
    #: "workflow" or "batch": the URL names and the template.
    kind = ""
    show_full_result_count = False
    list_per_page = 50

    class Media:
        css = {"all": ("django_arcature/admin.css",)}

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        """As for the job pages: ``view_job`` or ``change_job`` on the job model."""
        app = Job._meta.app_label
        return request.user.has_perm(f"{app}.view_job") or request.user.has_perm(
            f"{app}.change_job"
        )

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        own = [
            path(
                "<path:object_id>/cancel/",
                self.admin_site.admin_view(self.cancel_view),
                name="{}_{}_cancel".format(*info),
            ),
            path(
                "<path:object_id>/resume/",
                self.admin_site.admin_view(self.resume_view),
                name="{}_{}_resume".format(*info),
            ),
        ]
        urls: list[URLPattern] = super().get_urls()  # type: ignore[misc]
        return own + urls

    def _run(self, request: HttpRequest, object_id: str) -> Any:
        try:
            run_id = uuid.UUID(str(object_id))
        except ValueError:
            return None
        return self.opts.model.objects.using(self._db()).filter(id=run_id).first()

    def _db(self) -> str:
        return Job.objects.db

    def _page_url(self, run: Any) -> str:
        return reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_change", args=[run.pk])

    def _buttons(self, request: HttpRequest, run: Any, live: int, dead: int) -> dict[str, str]:
        """The forms the page shows: permitted and fitting the run now."""
        info = self.opts.app_label, self.opts.model_name
        buttons = {}
        if run.cancelled_at is None and live and CANCEL.allowed(request):
            buttons["cancel"] = reverse("admin:{}_{}_cancel".format(*info), args=[run.pk])
        if run.cancelled_at is None and dead and REQUEUE.allowed(request):
            buttons["resume"] = reverse("admin:{}_{}_resume".format(*info), args=[run.pk])
        return buttons

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        if request.method != "GET":
            return HttpResponseNotAllowed(["GET"])
        run = self._run(request, object_id)
        if run is None:
            raise Http404(_("No such workflow or batch."))
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "original": run,
            "run": run,
            "has_view_permission": True,
            "body_class": f"app-{self.opts.app_label} model-{self.opts.model_name} arcature-run",
            **self.detail_context(request, run),
            **(extra_context or {}),
        }
        return TemplateResponse(request, f"django_arcature/admin/{self.kind}_detail.html", context)

    def detail_context(self, request: HttpRequest, run: Any) -> dict[str, Any]:
        raise NotImplementedError

    # --- the buttons --------------------------------------------------------------------

    def _posted(self, request: HttpRequest, object_id: str, operation: Operation) -> Any:
        """The run a button was posted for, or a response refusing it."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_view_permission(request):
            raise PermissionDenied
        run = self._run(request, object_id)
        if run is None:
            messages.warning(request, _("That workflow or batch no longer exists."))
            return HttpResponseRedirect(
                reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_changelist")
            )
        if not operation.allowed(request):
            messages.error(request, refusal_message(operation))
            return HttpResponseRedirect(self._page_url(run))
        return run

    def cancel_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        run = self._posted(request, object_id, CANCEL)
        if isinstance(run, HttpResponse):
            return run
        if run.cancelled_at is not None:
            messages.warning(request, self.already_cancelled_message())
            return HttpResponseRedirect(self._page_url(run))
        reason = " ".join(request.POST.get("reason", "").split())[:REASON_MAX_LENGTH]
        changed = self.cancel(run, reason)
        self._log(
            request,
            run,
            _("Cancelled: %(reason)s") % {"reason": reason} if reason else str(CANCEL.label),
        )
        logger.info(
            "cancel %s %s: %s cancelled %d job(s)",
            self.kind,
            run.pk,
            getattr(request.user, "get_username", lambda: "?")(),
            changed,
        )
        level = messages.SUCCESS if changed else messages.WARNING
        messages.add_message(request, level, self.cancelled_message(changed))
        return HttpResponseRedirect(self._page_url(run))

    def resume_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        run = self._posted(request, object_id, REQUEUE)
        if isinstance(run, HttpResponse):
            return run
        result = self.resume(run)
        if result.cancelled:
            # Cancelled between two of the resume's chunks: what came back first was
            # cancelled with the rest, but the resume did happen (history says so).
            messages.warning(request, self.cancelled_not_resumed_message())
            if result.requeued:
                self._log(request, run, str(REQUEUE.label))
        elif result.missing:
            messages.warning(request, _("That workflow or batch no longer exists."))
        elif not result.requeued and not result.refused:
            messages.info(request, self.nothing_to_resume_message())
        else:
            parts = []
            if result.requeued:
                parts.append(
                    ngettext(
                        "Requeued %(count)d dead job; what it had cancelled waits again.",
                        "Requeued %(count)d dead jobs; what they had cancelled waits again.",
                        result.requeued,
                    )
                    % {"count": result.requeued}
                )
                self._log(request, run, str(REQUEUE.label))
            if result.refused:
                parts.append(
                    ngettext(
                        "%(count)d dead job stays dead: a live job holds its unique key.",
                        "%(count)d dead jobs stay dead: live jobs hold their unique keys.",
                        result.refused,
                    )
                    % {"count": result.refused}
                )
            level = messages.WARNING if result.refused else messages.SUCCESS
            messages.add_message(request, level, " ".join(parts))
        logger.info(
            "resume %s %s: %s requeued %d job(s), %d refused",
            self.kind,
            run.pk,
            getattr(request.user, "get_username", lambda: "?")(),
            result.requeued,
            result.refused,
        )
        return HttpResponseRedirect(self._page_url(run))

    def _log(self, request: HttpRequest, run: Any, message: str) -> None:
        """An admin history entry on the run: who cancelled or resumed it."""
        from django.contrib.admin.models import CHANGE, LogEntry

        user_id = getattr(request.user, "pk", None)
        if user_id is None:
            return
        LogEntry.objects.log_actions(
            user_id=user_id,
            queryset=self.opts.model.objects.using(self._db()).filter(pk=run.pk),
            action_flag=CHANGE,
            change_message=message,
        )

    def cancel(self, run: Any, reason: str) -> int:
        raise NotImplementedError

    def resume(self, run: Any) -> Resumed:
        raise NotImplementedError

    def cancelled_message(self, count: int) -> str:
        raise NotImplementedError

    def already_cancelled_message(self) -> str:
        raise NotImplementedError

    def cancelled_not_resumed_message(self) -> str:
        raise NotImplementedError

    def nothing_to_resume_message(self) -> str:
        raise NotImplementedError


class WorkflowRunAdmin(RunAdminMixin, _WorkflowAdmin):
    """Every workflow, newest first; a workflow's page draws its graph."""

    kind = "workflow"
    #: Their number grows with use (a workflow per order, say): no full count.
    paginator = EstimatedCountPaginator
    list_display = ("name", "key", "node_count", "outcome", "created_at", "cancelled")
    list_display_links = ("name",)
    #: "Which workflows failed?" is the operator's first question; outcome is indexed.
    list_filter = ("outcome",)
    search_fields = ("name", "key")
    search_help_text = gettext_lazy("Search by workflow name or key.")
    ordering = ("-created_at",)
    sortable_by = ("created_at",)

    @admin.display(description=gettext_lazy("cancelled"))
    def cancelled(self, obj: WorkflowRun) -> SafeString | str:
        return _when_text(obj.cancelled_at)

    def detail_context(self, request: HttpRequest, run: WorkflowRun) -> dict[str, Any]:
        using = self._db()
        members = WorkflowNode.objects.using(using).filter(workflow_id=run.id)
        counts = status_counts(using, members)
        by_status = {c["status"]: c["count"] for c in counts}
        live = sum(by_status[s] for s in LIVE)
        return {
            "title": _("Workflow %(name)s") % {"name": run.name},
            "counts": counts,
            "graph": workflow_graph(using, run),
            "page": node_page(request, using, members, counts, everything=run.node_count),
            "buttons": self._buttons(request, run, live, by_status[JobStatus.DEAD]),
            "changelist_url": reverse("admin:django_arcature_workflowrun_changelist"),
        }

    def cancel(self, run: WorkflowRun, reason: str) -> int:
        return int(Job.objects.db_manager(self._db()).cancel_workflow(run.id, reason=reason))

    def resume(self, run: WorkflowRun) -> Resumed:
        return Job.objects.db_manager(self._db()).resume_workflow(run.id)

    def cancelled_message(self, count: int) -> str:
        return ngettext(
            "Cancelled the workflow: %(count)d job cancelled; running ones are asked to stop.",
            "Cancelled the workflow: %(count)d jobs cancelled; running ones are asked to stop.",
            count,
        ) % {"count": count}

    def already_cancelled_message(self) -> str:
        return _("This workflow is already cancelled.")

    def cancelled_not_resumed_message(self) -> str:
        return _("A cancelled workflow is not resumed; requeue a job on its own page to run it.")

    def nothing_to_resume_message(self) -> str:
        return _("Nothing to resume: no job of this workflow is dead.")


class BatchRunAdmin(RunAdminMixin, _BatchAdmin):
    """Every batch, newest first; a batch's page shows its progress and its callbacks."""

    kind = "batch"
    #: Their number grows with use (a workflow per order, say): no full count.
    paginator = EstimatedCountPaginator
    list_display = ("__str__", "total", "closed", "outcome", "fired", "created_at", "cancelled")
    list_filter = ("outcome",)
    search_fields = ("name",)
    search_help_text = gettext_lazy("Search by batch name or id.")
    ordering = ("-created_at",)
    sortable_by = ("created_at",)

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[BatchRun], search_term: str
    ) -> tuple[QuerySet[BatchRun], bool]:
        try:
            return queryset.filter(pk=uuid.UUID(search_term.strip())), False
        except ValueError:
            return super().get_search_results(request, queryset, search_term)

    @admin.display(description=gettext_lazy("callbacks enqueued"))
    def fired(self, obj: BatchRun) -> SafeString | str:
        return _when_text(obj.fired_at)

    @admin.display(description=gettext_lazy("cancelled"))
    def cancelled(self, obj: BatchRun) -> SafeString | str:
        return _when_text(obj.cancelled_at)

    def detail_context(self, request: HttpRequest, run: BatchRun) -> dict[str, Any]:
        from django_arcature.manager.dependencies import batch_counts

        using = self._db()
        counts = batch_counts(using, run.id)
        finished = counts["succeeded"] + counts["dead"] + counts["cancelled"]
        total = counts["total"]
        members = WorkflowNode.objects.using(using).filter(batch_id=run.id)
        # The table's counts are the shard counters': a member's job row is not scanned.
        table_counts = [
            {
                "status": status,
                "label": status_label(status),
                "count": counts.get(
                    {JobStatus.SUCCEEDED: "succeeded", JobStatus.DEAD: "dead"}.get(status, status),
                    0,
                ),
            }
            for status in (JobStatus.SUCCEEDED, JobStatus.DEAD, JobStatus.CANCELLED)
        ]
        unfinished = {"status": "", "label": _("not finished"), "count": counts["pending"]}
        page = node_page(
            request, using, members, [*table_counts, unfinished], ("job_id",), counts["total"]
        )
        return {
            "title": _("Batch %(name)s") % {"name": str(run)},
            "counts": counts,
            "finished": finished,
            "percent": round(100 * finished / total) if total else 0,
            "segments": progress_segments(counts),
            "callbacks": batch_callbacks(using, run),
            "page": page,
            "buttons": self._buttons(request, run, counts["pending"], counts["dead"]),
            "changelist_url": reverse("admin:django_arcature_batchrun_changelist"),
        }

    def cancel(self, run: BatchRun, reason: str) -> int:
        return int(Job.objects.db_manager(self._db()).cancel_batch(run.id, reason=reason))

    def resume(self, run: BatchRun) -> Resumed:
        return Job.objects.db_manager(self._db()).resume_batch(run.id)

    def cancelled_message(self, count: int) -> str:
        return ngettext(
            "Cancelled the batch: %(count)d job cancelled; running ones are asked to stop.",
            "Cancelled the batch: %(count)d jobs cancelled; running ones are asked to stop.",
            count,
        ) % {"count": count}

    def already_cancelled_message(self) -> str:
        return _("This batch is already cancelled.")

    def cancelled_not_resumed_message(self) -> str:
        return _("A cancelled batch is not resumed; requeue a job on its own page to run it.")

    def nothing_to_resume_message(self) -> str:
        return _("Nothing to resume: no job of this batch is dead.")


def _when_text(value: Any) -> SafeString | str:
    from . import _when

    return _when(value)

"""Operator actions — cancel, requeue, run now — applied through the manager, job by job.

The admin never updates job rows itself: each selected job goes through
``Job.objects.cancel``/``requeue_dead``/``run_now``, which re-check the status
in their own UPDATE. So a job that changed between the page load and the click
is skipped and reported, never forced. The same code serves the list's actions
and the buttons on a job's page, and says how many jobs changed, how many were
skipped, and why.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.contrib import messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext

from django_arcature.models import Job, JobStatus

if TYPE_CHECKING:
    import uuid

    from django.utils.functional import _StrPromise

logger = logging.getLogger(__name__)

#: The most jobs one action handles; "select all" on a million rows stops here.
ACTION_LIMIT = 1_000

#: Skip reasons that are not a status.
ALREADY_DUE = "already-due"
CHANGED_MEANWHILE = "changed-meanwhile"
KEY_HELD = "key-held"


@dataclass(frozen=True)
class Operation:
    """One operator action: which manager method, which permission, which jobs it fits."""

    name: str
    permission: str
    applies_to: frozenset[str]
    apply: Callable[[uuid.UUID], int]
    label: _StrPromise
    description: _StrPromise
    only_hint: _StrPromise
    refusal: _StrPromise
    done: Callable[[int], str]

    @property
    def permission_name(self) -> str:
        return f"{Job._meta.app_label}.{self.permission}"

    def allowed(self, request: HttpRequest) -> bool:
        return request.user.has_perm(self.permission_name)

    def fits(self, status: str, available_at: Any, now: Any) -> str | None:
        """None if the job fits the action, else the reason it is skipped."""
        if status not in self.applies_to:
            return status
        if self.name == "run_now" and available_at is not None and available_at <= now:
            return ALREADY_DUE
        return None


def _cancelled(count: int) -> str:
    return ngettext("Cancelled %(count)d job.", "Cancelled %(count)d jobs.", count) % {
        "count": count
    }


def _requeued(count: int) -> str:
    return ngettext("Requeued %(count)d job.", "Requeued %(count)d jobs.", count) % {"count": count}


def _made_due(count: int) -> str:
    return ngettext(
        "Made %(count)d job available now.", "Made %(count)d jobs available now.", count
    ) % {"count": count}


CANCEL = Operation(
    name="cancel",
    permission="cancel_job",
    # Waiting workflow nodes too: cancelling one cancels what needed it (the manager's
    # cancel settles the workflow in the same transaction).
    applies_to=frozenset({JobStatus.PENDING, JobStatus.RUNNING, JobStatus.WAITING}),
    apply=lambda job_id: Job.objects.cancel(job_id),
    label=gettext_lazy("Cancel"),
    description=gettext_lazy("Cancel selected pending, waiting or running jobs"),
    only_hint=gettext_lazy("only pending, waiting or running jobs can be cancelled"),
    refusal=gettext_lazy("You do not have permission to cancel jobs."),
    done=_cancelled,
)
REQUEUE = Operation(
    name="requeue",
    permission="requeue_job",
    applies_to=frozenset({JobStatus.DEAD}),
    apply=lambda job_id: Job.objects.requeue_dead(job_id),
    label=gettext_lazy("Requeue"),
    description=gettext_lazy("Requeue selected dead jobs"),
    only_hint=gettext_lazy("only dead jobs can be requeued"),
    refusal=gettext_lazy("You do not have permission to requeue jobs."),
    done=_requeued,
)
RUN_NOW = Operation(
    name="run_now",
    permission="run_job_now",
    applies_to=frozenset({JobStatus.PENDING}),
    apply=lambda job_id: Job.objects.run_now(job_id),
    label=gettext_lazy("Run now"),
    description=gettext_lazy("Run selected scheduled jobs now"),
    only_hint=gettext_lazy("only scheduled pending jobs can be made to run now"),
    refusal=gettext_lazy("You do not have permission to make jobs run now."),
    done=_made_due,
)

OPERATIONS: dict[str, Operation] = {op.name: op for op in (CANCEL, REQUEUE, RUN_NOW)}


@dataclass
class Report:
    """What one action did: jobs changed, and jobs skipped counted by reason."""

    changed: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    truncated: bool = False
    changed_ids: list[Any] = field(default_factory=list)

    def message(self, operation: Operation) -> str:
        parts = []
        if self.changed or not self.skipped:
            parts.append(operation.done(self.changed))
        if self.skipped:
            total = sum(self.skipped.values())
            reasons = ", ".join(
                f"{count} {_reason_label(reason)}" for reason, count in sorted(self.skipped.items())
            )
            parts.append(
                ngettext(
                    "Skipped %(count)d job: %(reasons)s (%(hint)s).",
                    "Skipped %(count)d jobs: %(reasons)s (%(hint)s).",
                    total,
                )
                % {"count": total, "reasons": reasons, "hint": operation.only_hint}
            )
        if self.truncated:
            parts.append(
                _("Only %(limit)d jobs are handled per action; run it again for the rest.")
                % {"limit": ACTION_LIMIT}
            )
        return " ".join(parts)

    @property
    def level(self) -> int:
        if self.changed and not self.skipped and not self.truncated:
            return messages.SUCCESS
        return messages.WARNING


def _reason_label(reason: str) -> str:
    if reason == ALREADY_DUE:
        return str(_("already due"))
    if reason == CHANGED_MEANWHILE:
        return str(_("changed by someone else meanwhile"))
    if reason == KEY_HELD:
        return str(_("whose unique key a live job now holds"))
    try:
        return str(JobStatus(reason).label)
    except ValueError:
        return reason


def perform(operation: Operation, queryset: QuerySet[Any]) -> Report:
    """Apply ``operation`` to up to ``ACTION_LIMIT`` jobs of ``queryset`` through the manager."""
    rows = list(queryset.values_list("id", "status", "available_at")[: ACTION_LIMIT + 1])
    report = Report(truncated=len(rows) > ACTION_LIMIT)
    now = timezone.now()
    for job_id, status, available_at in rows[:ACTION_LIMIT]:
        reason = operation.fits(status, available_at, now)
        if reason is None and not operation.apply(job_id):
            reason = _why_unchanged(operation, job_id)
        if reason is None:
            report.changed += 1
            report.changed_ids.append(job_id)
        else:
            report.skipped[reason] += 1
    return report


def _why_unchanged(operation: Operation, job_id: Any) -> str:
    """A requeue of a job that is still dead was refused for its unique key (see
    ``requeue_dead``); anything else the manager refused had changed meanwhile."""
    if (
        operation.name == "requeue"
        and Job.objects.filter(pk=job_id, status=JobStatus.DEAD).exists()
    ):
        return KEY_HELD
    return CHANGED_MEANWHILE


def run_for_request(
    operation: Operation, request: HttpRequest, queryset: QuerySet[Any]
) -> Report | None:
    """Check the permission, perform, and tell the user; None if refused."""
    if not operation.allowed(request):
        messages.error(request, refusal_message(operation))
        return None
    report = perform(operation, queryset)
    logger.info(
        "%s: %s changed %d job(s), skipped %s",
        operation.name,
        getattr(request.user, "get_username", lambda: "?")(),
        report.changed,
        dict(report.skipped) or "none",
    )
    _record_history(operation, request, report)
    messages.add_message(request, report.level, report.message(operation))
    return report


def _record_history(operation: Operation, request: HttpRequest, report: Report) -> None:
    """One admin history entry (LogEntry) per job an operator changed.

    The next question after "why is this job pending again?" is "who did that?":
    the entry shows on the job's History page. It records the action; the
    change itself went through the manager.
    """
    user_id = getattr(request.user, "pk", None)
    if not report.changed_ids or user_id is None:
        return
    from django.contrib.admin.models import CHANGE, LogEntry

    LogEntry.objects.log_actions(
        user_id=user_id,
        queryset=Job.objects.filter(pk__in=report.changed_ids),
        action_flag=CHANGE,
        change_message=str(operation.label),
    )


def refusal_message(operation: Operation) -> str:
    return "{} {}".format(
        operation.refusal,
        _("The %(permission)s permission is required.") % {"permission": operation.permission_name},
    )

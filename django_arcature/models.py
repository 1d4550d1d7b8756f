"""The job table: one row per job, its whole life, on every supported database."""

from __future__ import annotations

import uuid
from typing import ClassVar

from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from .core.payloads import ExactJSONEncoder
from .db.fields import ExactCharField
from .managers import JobManager
from .states import ACTIVE_STATUSES, ErrorKind, JobStatus

__all__ = ["ACTIVE_STATUSES", "DeadJob", "ErrorKind", "Job", "JobStatus"]


class Job(models.Model):
    """A unit of background work and everything needed to run, fence and explain it."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    task_name = models.CharField(_("task"), max_length=255)
    # Compared exactly on every database (a binary collation on MySQL/MariaDB):
    # a worker for "email" must not take "Email" jobs.
    queue = ExactCharField(_("queue"), max_length=100, default="default")
    priority = models.IntegerField(_("priority"), default=0, help_text=_("Higher runs first."))
    payload = models.JSONField(_("payload"), default=dict, encoder=ExactJSONEncoder)
    status = models.CharField(
        _("status"), max_length=16, choices=JobStatus.choices, default=JobStatus.PENDING
    )
    attempts = models.IntegerField(_("attempts"), default=0)
    max_attempts = models.IntegerField(_("max attempts"), default=3)
    available_at = models.DateTimeField(_("available at"))
    locked_at = models.DateTimeField(_("locked at"), null=True, blank=True)
    locked_by = models.CharField(_("locked by"), max_length=255, blank=True, default="")
    lease_seconds = models.IntegerField(_("lease (seconds)"), default=30)
    lease_expires_at = models.DateTimeField(_("lease expires at"), null=True, blank=True)
    claim_token = models.UUIDField(_("claim token"), null=True, blank=True, editable=False)
    # NULL, not "": NULLs never collide in the unique constraint, so jobs without a key
    # (and finished jobs, which give theirs up) do not block each other.
    unique_key = ExactCharField(_("unique key"), max_length=255, null=True, blank=True)
    error_kind = models.CharField(
        _("error kind"), max_length=16, choices=ErrorKind.choices, blank=True, default=""
    )
    last_error = models.TextField(_("last error"), blank=True, default="")
    last_traceback = models.TextField(_("last traceback"), blank=True, default="")
    result = models.JSONField(_("result"), null=True, blank=True, encoder=ExactJSONEncoder)
    # One entry per attempt ({"worker": ..., "error": ...}); django.tasks reports
    # worker_ids and errors from it.
    attempt_log = models.JSONField(
        _("attempt log"), default=list, blank=True, encoder=ExactJSONEncoder
    )
    backend = models.CharField(_("tasks backend"), max_length=100, blank=True, default="")
    # The enqueuing span's context (W3C traceparent/tracestate) when tracing is on
    # (django_arcature.contrib.otel): the worker continues the trace from it.
    trace_context = models.JSONField(_("trace context"), default=dict, blank=True, editable=False)
    created_at = models.DateTimeField(_("created at"))
    started_at = models.DateTimeField(_("started at"), null=True, blank=True)
    finished_at = models.DateTimeField(_("finished at"), null=True, blank=True)
    failed_at = models.DateTimeField(_("failed at"), null=True, blank=True)

    objects: ClassVar[JobManager] = JobManager()

    class Meta:
        verbose_name = _("job")
        verbose_name_plural = _("jobs")
        ordering = ("-created_at",)
        permissions = (
            ("cancel_job", _("Can cancel pending or running jobs")),
            ("requeue_job", _("Can requeue dead jobs")),
            ("run_job_now", _("Can make a scheduled job run now")),
        )
        indexes = (
            # The claim when a worker serves every queue:
            # WHERE status='pending' AND available_at <= now ORDER BY priority DESC, available_at.
            models.Index(
                fields=["status", "-priority", "available_at"], name="arcature_claim_any_idx"
            ),
            # The same claim restricted to named queues (--queue email --queue default).
            models.Index(
                fields=["status", "queue", "-priority", "available_at"],
                name="arcature_claim_queue_idx",
            ),
            # The sweep: WHERE status='running' AND lease_expires_at < now. Plain
            # columns (no partial or expression index) so MariaDB uses it too.
            models.Index(fields=["status", "lease_expires_at"], name="arcature_sweep_idx"),
            # The admin's dead-letter page, the dashboard's per-minute counts and prune.
            models.Index(fields=["status", "finished_at"], name="arcature_finished_idx"),
            # The admin's job list: newest first, and its date hierarchy (MIN/MAX only).
            models.Index(fields=["created_at"], name="arcature_created_idx"),
            # The job list filtered by status (newest first) and its date hierarchy's
            # first and last row under that filter. On PostgreSQL only the pending rows
            # are in it (migration 0009): a finished job then writes no entry.
            models.Index(fields=["status", "created_at"], name="arcature_status_created_idx"),
        )
        constraints = (
            models.CheckConstraint(
                condition=Q(lease_seconds__gte=1), name="arcature_lease_seconds_gte_1"
            ),
            models.CheckConstraint(condition=Q(attempts__gte=0), name="arcature_attempts_gte_0"),
            models.CheckConstraint(
                condition=Q(max_attempts__gte=1), name="arcature_max_attempts_gte_1"
            ),
            models.CheckConstraint(
                condition=Q(status__in=JobStatus.values), name="arcature_status_known"
            ),
            models.CheckConstraint(
                condition=Q(error_kind="") | Q(error_kind__in=ErrorKind.values),
                name="arcature_error_kind_known",
            ),
            # A claim token exists exactly while the job is running: the fence
            # has nothing to match once a job has left a worker's hands.
            models.CheckConstraint(
                condition=(Q(status=JobStatus.RUNNING) & Q(claim_token__isnull=False))
                | (~Q(status=JobStatus.RUNNING) & Q(claim_token__isnull=True)),
                name="arcature_token_iff_running",
            ),
            # A unique key is held only by a live job, so a finished one frees it.
            models.CheckConstraint(
                condition=Q(unique_key__isnull=True) | Q(status__in=ACTIVE_STATUSES),
                name="arcature_unique_key_only_active",
            ),
            # NULLs never collide, on all three databases: a plain unique
            # constraint works where MySQL/MariaDB have no partial indexes.
            models.UniqueConstraint(fields=["unique_key"], name="arcature_unique_key"),
        )

    def __str__(self) -> str:
        return f"{self.task_name} [{self.status}] {self.id}"

    def wait(self, timeout: float = 30.0) -> Job:
        """Block until this job is succeeded, dead or cancelled; return it refreshed.

        Raises :class:`~django_arcature.exceptions.JobWaitTimeout` after
        ``timeout`` seconds. Polls with backoff (``django_arcature.workflows.waiting``).
        """
        from .workflows.waiting import wait

        return wait(self, timeout)

    async def async_wait(self, timeout: float = 30.0) -> Job:
        """``await job.async_wait()``: :meth:`wait` for async views."""
        from .workflows.waiting import async_wait

        return await async_wait(self, timeout)

    @property
    def args(self) -> list[object]:
        """Positional arguments as stored in the payload."""
        value = self.payload.get("args", []) if isinstance(self.payload, dict) else []
        return list(value) if isinstance(value, list) else []

    @property
    def kwargs(self) -> dict[str, object]:
        """Keyword arguments as stored in the payload."""
        value = self.payload.get("kwargs", {}) if isinstance(self.payload, dict) else {}
        return dict(value) if isinstance(value, dict) else {}


class DeadJob(Job):
    """The dead-letter page: the same rows as ``Job``, seen through ``status = 'dead'``.

    A proxy gives the admin a second menu entry with its own list, filters and
    actions, without a second table; the filtering lives in its ModelAdmin.
    """

    class Meta:
        proxy = True
        verbose_name = _("dead job")
        verbose_name_plural = _("dead letters")


# Models of the sub-packages register here, with this app.
from .queues.models import QueueState, SlotHold  # noqa: E402, F401
from .schedules.models import Schedule  # noqa: E402, F401
from .workflows.models import (  # noqa: E402, F401
    BatchCounter,
    BatchRun,
    JobProgress,
    WorkflowEdge,
    WorkflowNode,
    WorkflowRun,
)

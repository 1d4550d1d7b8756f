"""Stored schedules: written by operators in the admin, or synced from ``@periodic`` code."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone as django_timezone
from django.utils.translation import gettext_lazy as _

from .policy import ALL, LATEST, SKIP

__all__ = ["Schedule", "ScheduleSource"]


class ScheduleSource(models.TextChoices):
    """Who owns a schedule row: a worker's sync (code) or an operator (admin)."""

    CODE = "code", _("code (@periodic)")
    ADMIN = "admin", _("admin")


class MissedPolicy(models.TextChoices):
    """What happens to slots that passed while no worker ran (see ``schedules.policy``)."""

    LATEST = LATEST, _("fire the latest missed slot once")
    ALL = ALL, _("fire every missed slot (up to the catch-up bound)")
    SKIP = SKIP, _("skip missed slots")


class Schedule(models.Model):
    """A cron expression in a time zone that enqueues one job per slot.

    ``last_slot_at`` is the watermark: the instant of the last slot this schedule
    fired (or decided to skip). Firing moves it with a compare-and-set in the
    same transaction as the job's insert, so one slot becomes one job whatever
    the number of workers evaluating it (see ``schedules.firing``).
    """

    name = models.CharField(_("name"), max_length=100, unique=True)
    task_name = models.CharField(_("task"), max_length=255)
    # The django.tasks backend alias for a ``@task`` schedule; blank for ``@job`` tasks.
    backend = models.CharField(_("tasks backend"), max_length=100, blank=True, default="")
    cron = models.CharField(
        _("cron expression"),
        max_length=120,
        help_text=_("minute hour day month weekday; six fields: seconds first."),
    )
    timezone = models.CharField(_("time zone"), max_length=64, default="UTC")
    args = models.JSONField(_("args"), default=list, blank=True)
    kwargs = models.JSONField(_("kwargs"), default=dict, blank=True)
    queue = models.CharField(
        _("queue"), max_length=100, blank=True, default="", help_text=_("Blank: the task's queue.")
    )
    priority = models.IntegerField(
        _("priority"), null=True, blank=True, help_text=_("Blank: the task's priority.")
    )
    enabled = models.BooleanField(_("enabled"), default=True)
    missed = models.CharField(
        _("missed slots"), max_length=16, choices=MissedPolicy.choices, default=MissedPolicy.LATEST
    )
    catch_up = models.PositiveIntegerField(
        _("catch-up bound"),
        default=10,
        help_text=_("With 'every missed slot': the most slots fired at once."),
    )
    source = models.CharField(
        _("source"), max_length=8, choices=ScheduleSource.choices, default=ScheduleSource.ADMIN
    )
    created_at = models.DateTimeField(_("created at"), default=django_timezone.now)
    last_slot_at = models.DateTimeField(_("last slot"), null=True, blank=True)
    last_fired_at = models.DateTimeField(_("last fired at"), null=True, blank=True)
    last_job_id = models.UUIDField(_("last job"), null=True, blank=True)

    class Meta:
        verbose_name = _("schedule")
        verbose_name_plural = _("schedules")
        ordering = ("name",)
        constraints = (
            models.CheckConstraint(
                condition=models.Q(missed__in=[LATEST, ALL, SKIP]),
                name="arcature_schedule_missed_known",
            ),
        )

    def __str__(self) -> str:
        return f"{self.name} ({self.cron} {self.timezone})"

    def clean(self) -> None:
        """Refuse an expression or zone the worker could not evaluate."""
        from .cron import InvalidSchedule, validate_expression, zone

        errors: dict[str, str] = {}
        try:
            validate_expression(self.cron)
        except InvalidSchedule as exc:
            errors["cron"] = str(exc)
        except ImportError as exc:
            errors["cron"] = str(exc)
        try:
            zone(self.timezone)
        except InvalidSchedule as exc:
            errors["timezone"] = str(exc)
        if not isinstance(self.args, list):
            errors["args"] = str(_("args must be a JSON list"))
        if not isinstance(self.kwargs, dict):
            errors["kwargs"] = str(_("kwargs must be a JSON object"))
        if errors:
            raise ValidationError(errors)

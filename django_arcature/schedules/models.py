"""Stored schedules: written by operators in the admin, or synced from ``@periodic`` code."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db import models
from django.db.models.expressions import DatabaseDefault
from django.utils.translation import gettext_lazy as _

from django_arcature.db.clock import DatabaseNow, database_now

from .policy import ALL, LATEST, SKIP

__all__ = ["Schedule", "ScheduleQuerySet", "ScheduleSource"]


class ScheduleSource(models.TextChoices):
    """Who owns a schedule row: a worker's sync (code) or an operator (admin)."""

    CODE = "code", _("code (@periodic)")
    ADMIN = "admin", _("admin")


class MissedPolicy(models.TextChoices):
    """What happens to slots that passed while no worker ran (see ``schedules.policy``)."""

    LATEST = LATEST, _("fire the latest missed slot once")
    ALL = ALL, _("fire every missed slot (up to the catch-up bound)")
    SKIP = SKIP, _("skip missed slots")


class ScheduleQuerySet(models.QuerySet["Schedule"]):
    """``enable()`` and ``disable()``: what the admin's actions do, for code and scripts.

    Prefer them to ``update(enabled=True)``: enabling records ``enabled_at`` on
    the database's clock, where the schedule's catch-up window starts again,
    so the slots of the disabled time never fire (a bare ``update`` cannot
    know that the row was disabled).
    """

    def enable(self, *, at: datetime | None = None) -> int:
        """Enable the disabled rows; returns how many. ``at``: for tests (default: DB now)."""
        stamp: Any = at if at is not None else DatabaseNow()
        return self.filter(enabled=False).update(enabled=True, enabled_at=stamp)

    def disable(self) -> int:
        """Disable the enabled rows; returns how many."""
        return self.filter(enabled=True).update(enabled=False)


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
    # The database's clock (issue 19, B14): the window of a new schedule starts here, and
    # an app server whose clock runs behind would otherwise fire slots from before it existed.
    created_at = models.DateTimeField(_("created at"), db_default=DatabaseNow())
    # When the schedule was last enabled again (the database's clock): disabled time is
    # not missed time, so the window of due slots never starts before this instant.
    enabled_at = models.DateTimeField(_("enabled at"), null=True, blank=True)
    last_slot_at = models.DateTimeField(_("last slot"), null=True, blank=True)
    last_fired_at = models.DateTimeField(_("last fired at"), null=True, blank=True)
    last_job_id = models.UUIDField(_("last job"), null=True, blank=True)

    objects = ScheduleQuerySet.as_manager()
    #: ``enabled`` as read from the database (None: not read, or a new row).
    _loaded_enabled: bool | None = None

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

    def save(self, *args: Any, **kwargs: Any) -> None:
        """Saving a disabled row as enabled records ``enabled_at`` (see ``window_start``)."""
        update_fields = kwargs.get("update_fields")
        loaded = getattr(self, "_loaded_enabled", None)
        writes_enabled = update_fields is None or "enabled" in update_fields
        if self.enabled and loaded is False and writes_enabled and not self._state.adding:
            self.enabled_at = database_now(kwargs.get("using") or self._state.db or "default")
            if update_fields is not None:
                kwargs["update_fields"] = {*update_fields, "enabled_at"}
        super().save(*args, **kwargs)
        self._loaded_enabled = self.enabled
        if isinstance(self.__dict__.get("created_at"), DatabaseDefault):
            # Backends that return no columns from an INSERT (MySQL) leave the expression.
            self.refresh_from_db(fields=["created_at"])

    @classmethod
    def from_db(cls, *args: Any, **kwargs: Any) -> Schedule:
        # Passed through: the signature differs between Django versions (``fetch_mode``).
        instance = super().from_db(*args, **kwargs)
        instance._loaded_enabled = instance.__dict__.get("enabled")
        return instance

    def window_start(self) -> datetime:
        """Slots at or before this instant are never due: fired, skipped, before the
        schedule existed, or in time it spent disabled."""
        start = self.last_slot_at or self.created_at
        if self.enabled_at is not None and self.enabled_at > start:
            return self.enabled_at
        return start

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

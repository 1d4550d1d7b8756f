"""App configuration: registers the system checks."""

from __future__ import annotations

import importlib
import importlib.util

from django.apps import AppConfig
from django.conf import settings
from django.utils.translation import gettext_lazy as _


class ArcatureConfig(AppConfig):
    name = "django_arcature"
    verbose_name = _("Background jobs")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks  # noqa: F401  (registers the checks)
        from .managers import set_eager_runner
        from .worker.inline import run_job

        set_eager_runner(run_job)
        _register_task_backend_checks()


def _register_task_backend_checks() -> None:
    """Make ``manage.py check`` run ``ArcatureBackend.check()``.

    Django registers its task-backend checks when ``django.tasks`` is first
    imported. In a project where only task modules import it, nothing has at check
    time, and a wrong ``TASKS[...]["OPTIONS"]`` passed ``manage.py check`` silently,
    to fail later at the first ``enqueue``. On Django 5.2 the backport's own app
    registers them.
    """
    configured = getattr(settings, "TASKS", None) or {}
    ours = any(
        str(alias.get("BACKEND", "")).startswith("django_arcature.")
        for alias in configured.values()
        if isinstance(alias, dict)
    )
    if ours and importlib.util.find_spec("django.tasks") is not None:
        importlib.import_module("django.tasks")

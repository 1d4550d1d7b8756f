"""App configuration: registers the system checks."""

from __future__ import annotations

from django.apps import AppConfig
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

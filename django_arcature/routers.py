"""Keeping the job table on a database of its own (``ARCATURE["DATABASE"]``).

Add ``"django_arcature.routers.JobsRouter"`` to ``DATABASE_ROUTERS`` and name the
alias in ``ARCATURE["DATABASE"]``: every read, write and migration of this app's
tables then goes to that database, and no other app's tables are created there
by this router. The price is atomicity: an enqueue no longer commits with the
app's own writes on ``default`` (docs: "A separate database for jobs").
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from django_arcature.conf import get_settings

APP_LABEL = "django_arcature"


class JobsRouter:
    """Routes this app's models to ``ARCATURE["DATABASE"]``; no opinion on anything else."""

    def _jobs_database(self) -> str | None:
        try:
            return get_settings().database
        except ImproperlyConfigured:
            # Django's model checks ask the routers too: raising here would end
            # `manage.py check` and the worker in a traceback before arcature.E001
            # says what to change. Route by the one key this router reads, if
            # that key itself is usable; the system checks stop start-up anyway.
            raw = getattr(settings, "ARCATURE", None)
            alias = raw.get("DATABASE") if isinstance(raw, dict) else None
            return alias if isinstance(alias, str) and alias in settings.DATABASES else None

    def db_for_read(self, model: type[Any], **hints: Any) -> str | None:
        return self._jobs_database() if model._meta.app_label == APP_LABEL else None

    def db_for_write(self, model: type[Any], **hints: Any) -> str | None:
        return self._jobs_database() if model._meta.app_label == APP_LABEL else None

    def allow_migrate(
        self, db: str, app_label: str, model_name: str | None = None, **hints: Any
    ) -> bool | None:
        jobs = self._jobs_database()
        if jobs is None or app_label != APP_LABEL:
            return None
        return db == jobs

"""System check: every app's ``jobs`` module imports and registers its handlers cleanly.

Running it is what makes ``manage.py check`` (and every command that runs the
checks, the worker included) autodiscover the handlers, so a clash of two job
names or a broken ``jobs.py`` is reported at deploy time, not by a job that
dies ``unknown`` in the night.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from importlib import import_module
from typing import Any

from django.apps import AppConfig, apps
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.utils.module_loading import module_has_submodule
from django.utils.translation import gettext as _

from django_arcature import registry

logger = logging.getLogger(__name__)


@checks.register(checks.Tags.compatibility)
def check_job_registry(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """E010: two handlers under one name. E011: a ``jobs`` module that fails to import."""
    try:
        registry.autodiscover()
    except ImproperlyConfigured as exc:
        return [
            checks.Error(
                str(exc),
                hint=_("Job names are stored in the job table; each must name one function."),
                id="arcature.E010",
            )
        ]
    except Exception as exc:
        logger.debug("autodiscovery of jobs modules failed", exc_info=True)
        module = _failing_jobs_module() or "<app>.jobs"
        subject = _("the installed apps' jobs modules") if module == "<app>.jobs" else module
        return [
            checks.Error(
                _("Importing %(module)s failed: %(error)s")
                % {"module": subject, "error": f"{type(exc).__name__}: {exc}"},
                hint=_(
                    "Fix the error above; run `python manage.py shell -c 'import %(module)s'` "
                    "for a traceback (through manage.py, so settings and apps are loaded first)."
                )
                % {"module": module},
                id="arcature.E011",
            )
        ]
    return []


def _failing_jobs_module() -> str | None:
    """Which app's ``jobs`` module does not import: the error alone may come from
    deep inside it (a missing dependency), naming some other module."""
    for app in apps.get_app_configs():
        if not module_has_submodule(app.module, "jobs"):
            continue
        name = f"{app.name}.jobs"
        try:
            import_module(name)
        except Exception:
            return name
    return None

"""System check: every app's ``jobs`` module imports and registers its handlers cleanly.

Running it is what makes ``manage.py check`` (and every command that runs the
checks, the worker included) autodiscover the handlers, so a clash of two job
names or a broken ``jobs.py`` is reported at deploy time, not by a job that
dies ``unknown`` in the night.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig
from django.core import checks
from django.core.exceptions import ImproperlyConfigured

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
                hint="Job names are stored in the job table; each must name one function.",
                id="arcature.E010",
            )
        ]
    except Exception as exc:
        logger.debug("autodiscovery of jobs modules failed", exc_info=True)
        return [
            checks.Error(
                f"Importing the installed apps' jobs modules failed: {type(exc).__name__}: {exc}",
                hint="Fix the error above; run `python -c 'import <app>.jobs'` for a traceback.",
                id="arcature.E011",
            )
        ]
    return []

"""System checks for schedules and queue settings (registered by ``django_arcature.checks``)."""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Error, Tags, register

from django_arcature import registry

from .cron import EXTRA_HINT, cron_available
from .periodic import declared


@register(Tags.compatibility)
def check_cron_library(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """``@periodic`` without cronsim: say what to install instead of failing in the worker.

    Declarations exist only once the apps' ``jobs`` modules are imported, and
    Django runs checks in no fixed order, so import them here rather than rely
    on the registry check having run first; an import error is that check's
    to report (E011).
    """
    try:
        registry.autodiscover()
    except Exception:
        return []
    specs = declared()
    if not specs or cron_available():
        return []
    names = ", ".join(sorted(specs)[:5])
    return [
        Error(
            f"@periodic schedules are declared ({names}) but the cron library is missing.",
            hint=EXTRA_HINT,
            id="arcature.E030",
        )
    ]

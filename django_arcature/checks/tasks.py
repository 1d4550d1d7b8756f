"""Make sure Django's check of the task backends runs (``arcature.E102``).

Django registers that check when ``django.tasks`` is first imported, and a
project that only names ``ArcatureBackend`` in ``TASKS`` may import it only once
the first task is enqueued: ``manage.py check`` and the worker would then never
ask the backend, and a wrong ``OPTIONS`` key would pass them silently.
"""

from __future__ import annotations

import importlib

from django.conf import settings


def register_task_backend_checks() -> None:
    """Import the tasks framework when ``TASKS`` is configured (its import registers the check)."""
    if not getattr(settings, "TASKS", None):
        return
    for module in ("django.tasks", "django_tasks"):  # Django 6.0+, else the backport
        try:
            importlib.import_module(module)
        except ImportError:
            continue
        return


register_task_backend_checks()

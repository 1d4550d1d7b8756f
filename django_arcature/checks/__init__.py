"""System checks: the ``ARCATURE`` setting and each app's ``jobs`` module (registered on import)."""

from __future__ import annotations

from django_arcature.schedules import checks as schedules  # noqa: F401

from . import registry, settings  # noqa: F401  (each registers its checks)

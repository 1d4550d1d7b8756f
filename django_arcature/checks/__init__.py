"""System checks: the ``ARCATURE`` setting, each app's ``jobs`` module, and (with
``--deploy``) SQLite's transaction mode; each module registers its checks on import."""

from __future__ import annotations

from django_arcature.schedules import checks as schedules  # noqa: F401

from . import registry, settings, writers  # noqa: F401  (each registers its checks)

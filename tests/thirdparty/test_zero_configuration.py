"""The suite proves "zero configuration": the backend is named and nothing else.

Adding ``OPTIONS["MODULES"]`` here would make the Wagtail tests pass while a new
user's project still failed (issue 19 A1); this keeps the settings honest.
"""

from __future__ import annotations

from django.conf import settings


def test_tasks_setting_names_the_backend_and_nothing_else() -> None:
    assert settings.TASKS == {"default": {"BACKEND": "django_arcature.backend.ArcatureBackend"}}

"""The small site that uses Wagtail and django-modelsearch as a project would."""

from __future__ import annotations

from django.apps import AppConfig


class SiteConfig(AppConfig):
    name = "tests.thirdparty.site"
    label = "thirdparty_site"
    default_auto_field = "django.db.models.BigAutoField"

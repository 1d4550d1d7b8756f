"""Add ``"django_arcature.contrib.prometheus"`` to INSTALLED_APPS to count in every process."""

from __future__ import annotations

from django.apps import AppConfig
from django.utils.translation import gettext_lazy as _


class PrometheusConfig(AppConfig):
    name = "django_arcature.contrib.prometheus"
    label = "arcature_prometheus"
    verbose_name = _("django-arcature Prometheus metrics")

    def ready(self) -> None:
        from .receivers import install

        install()

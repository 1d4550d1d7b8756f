"""No views: the suite drives the packages' models, not their pages."""

from __future__ import annotations

from django.urls import URLPattern

urlpatterns: list[URLPattern] = []

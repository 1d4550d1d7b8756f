"""The admin is the operator's window on the queue: jobs, dead letters, actions."""

from __future__ import annotations

from django.contrib import admin
from django.urls import path

urlpatterns = [path("admin/", admin.site.urls)]

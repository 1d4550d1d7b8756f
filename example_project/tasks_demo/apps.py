from __future__ import annotations

from django.apps import AppConfig


class TasksDemoConfig(AppConfig):
    name = "tasks_demo"
    verbose_name = "django.tasks demo"

from __future__ import annotations

from django.contrib import admin

from .models import Subscriber


@admin.register(Subscriber)
class SubscriberAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ("email", "welcomed_at", "crm_synced", "created_at")

"""The example's data: subscribers, which the jobs look up by primary key."""

from __future__ import annotations

from typing import ClassVar

from django.db import models


class Subscriber(models.Model):
    email = models.EmailField(unique=True)
    welcomed_at = models.DateTimeField(null=True, blank=True)
    reminded_at = models.DateTimeField(null=True, blank=True)
    crm_synced = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    # Spelled out so type checkers know it without this app in their settings.
    objects: ClassVar[models.Manager[Subscriber]] = models.Manager()

    class Meta:
        ordering = ("email",)

    def __str__(self) -> str:
        return self.email

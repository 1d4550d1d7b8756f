"""The queue control table: one row per queue an operator or a limit has touched.

It lives in the database so every worker on every host reads the same truth
(DESIGN §10). A queue without a row is running and unlimited.
"""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _

__all__ = ["QueueState"]


class QueueState(models.Model):
    """Pause flag and rate-limit bookkeeping of one queue.

    ``recent_starts`` holds the database-clock instants (epoch seconds) of the
    jobs claimed within the queue's rate period, newest last; it is read and
    rewritten only while this row is locked inside a claim's transaction.
    """

    name = models.CharField(_("queue"), max_length=100, primary_key=True)
    paused = models.BooleanField(_("paused"), default=False)
    paused_at = models.DateTimeField(_("paused at"), null=True, blank=True)
    recent_starts = models.JSONField(_("recent starts"), default=list, blank=True)

    class Meta:
        verbose_name = _("queue")
        verbose_name_plural = _("queues")
        ordering = ("name",)

    def __str__(self) -> str:
        return self.name

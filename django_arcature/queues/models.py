"""The queue control table: one row per queue an operator or a limit has touched.

It lives in the database so every worker on every host reads the same truth
(DESIGN §10). A queue without a row is running and unlimited.
"""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _

__all__ = ["QueueState", "SlotHold"]


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


class SlotHold(models.Model):
    """A concurrency slot still taken by a handler whose job row no longer says ``running``.

    A limited queue's running count comes from ``running`` rows, but a row can
    leave that state while its handler still runs: an operator cancels it, the
    watchdog writes off a timed-out thread that did not stop, a shutdown hands
    a job back after its timeout. Until that handler is gone the slot is not
    free, so the transition writes a hold (in the same transaction for a
    cancel, before the worker's own write otherwise) and the claim counts
    unexpired holds with the running rows. The worker running the handler
    extends the hold like a lease and deletes it when the handler ends; a
    crashed worker's holds simply expire. Keyed by the claim token, which names
    one claim of one job and is never reused.
    """

    claim_token = models.UUIDField(_("claim token"), primary_key=True)
    queue = models.CharField(_("queue"), max_length=100)
    job_id = models.UUIDField(_("job"))
    worker_id = models.CharField(_("worker"), max_length=255, blank=True, default="")
    expires_at = models.DateTimeField(_("expires at"))

    class Meta:
        verbose_name = _("slot hold")
        verbose_name_plural = _("slot holds")
        indexes = [models.Index(fields=["queue", "expires_at"], name="arcature_slothold_idx")]

    def __str__(self) -> str:
        return f"{self.queue}: {self.job_id}"

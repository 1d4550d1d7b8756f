"""Observer events. Each is sent only after the write it reports actually landed.

A fenced write that affected no row (the claim was lost) sends
``job_claim_lost`` instead of its own event: a stale worker's success must not
look like a success to anyone listening.
"""

from __future__ import annotations

from django.dispatch import Signal

#: A job row was inserted. kwargs: ``job``.
job_enqueued = Signal()
#: A worker's fenced success landed. kwargs: ``job_id``, ``completion``.
job_succeeded = Signal()
#: A worker's fenced retry landed; the job is pending again. kwargs: ``job_id``, ``completion``.
job_retried = Signal()
#: A worker's fenced death landed. kwargs: ``job_id``, ``completion`` (with ``error_kind``).
job_dead = Signal()
#: A worker's write was fenced out. kwargs: ``job_id``, ``claim_token``, ``attempted``.
job_claim_lost = Signal()
#: Expired leases were swept. kwargs: ``job_ids``, ``requeued``, ``dead``.
jobs_swept = Signal()
#: A running job was handed back unfinished (graceful shutdown). kwargs: ``job_id``.
job_released = Signal()
#: An operator cancelled a job. kwargs: ``job_id``.
job_cancelled = Signal()
#: An operator requeued a dead job. kwargs: ``job_id``.
job_requeued = Signal()

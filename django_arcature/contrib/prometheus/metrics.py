"""The metric objects. Created once per process, at import.

In multiprocess mode (``PROMETHEUS_MULTIPROC_DIR`` set before this import)
prometheus-client backs each of them by a file per process in that directory,
which :class:`prometheus_client.multiprocess.MultiProcessCollector` sums.
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

#: Queue wait and run time: from a few milliseconds (no-op jobs) to an hour.
BUCKETS = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
    900.0,
    3600.0,
)

ENQUEUED = Counter(
    "arcature_jobs_enqueued",
    "Jobs inserted (counted once the inserting transaction committed).",
    ["queue", "task"],
)
STARTED = Counter(
    "arcature_jobs_started",
    "Attempts started: claims that landed.",
    ["queue", "task"],
)
FINISHED = Counter(
    "arcature_jobs_finished",
    "Attempts whose outcome was written: succeeded, retried, dead, or lost "
    "(the write was fenced out because the claim was lost).",
    ["queue", "task", "outcome", "error_kind"],
)
RELEASED = Counter(
    "arcature_jobs_released",
    "Running jobs handed back to pending unfinished (graceful shutdown).",
    ["queue", "task"],
)
SWEPT = Counter(
    "arcature_jobs_swept",
    "Jobs whose lease expired, recovered by a sweep: requeued or dead.",
    ["outcome"],
)
RUN_SECONDS = Histogram(
    "arcature_job_run_seconds",
    "Time one attempt's handler ran, for attempts whose outcome was written.",
    ["queue", "task"],
    buckets=BUCKETS,
)
QUEUE_WAIT_SECONDS = Histogram(
    "arcature_job_queue_wait_seconds",
    "From when a job became available (available_at) to its claim.",
    ["queue", "task"],
    buckets=BUCKETS,
)

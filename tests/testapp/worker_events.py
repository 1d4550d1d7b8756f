"""Write the worker's observer events to a file, for tests that watch a worker process.

Only active when ``ARCATURE_TEST_EVENTS`` names a file, so it costs nothing elsewhere.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from django_arcature import signals

_path = os.environ.get("ARCATURE_TEST_EVENTS")
_lock = threading.Lock()


def _recorder(name: str) -> Any:
    def record(sender: Any, job_id: Any = None, **kwargs: Any) -> None:
        if job_id is None and "job" in kwargs:  # job_attempt_started carries the job
            job_id = kwargs["job"].id
        with _lock, open(str(_path), "a") as out:
            out.write(f"{name} {job_id}\n")

    return record


_receivers = []
if _path:
    for _name in (
        "job_attempt_started",
        "job_succeeded",
        "job_retried",
        "job_dead",
        "job_claim_lost",
        "job_released",
    ):
        _receiver = _recorder(_name)
        _receivers.append(_receiver)  # signals hold weak references
        getattr(signals, _name).connect(_receiver)

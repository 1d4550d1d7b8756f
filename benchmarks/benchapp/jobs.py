"""The benchmark's job: does nothing, so only the queue's own cost is measured."""

from __future__ import annotations

from benchmarks.peerkit.stamp import stamp as stamp_start
from django_arcature import job


@job(name="bench.noop")
def noop() -> None:
    return None


@job(name="bench.stamp")
def stamp() -> float:
    """Returns when it ran (this host's clock): the wait() latency benchmark's "finished"."""
    import time

    return time.time()


@job(name="bench.batch_done")
def batch_done(batch_id: str) -> None:
    """A batch's callback that does nothing, like ``noop``."""


@job(name="bench.peer_noop")
def peer_noop(key: int) -> None:
    """benchmarks/peers.py's job: stamps its start (as every queue's there does), no more."""
    stamp_start(key)

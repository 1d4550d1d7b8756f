"""The benchmark's job: does nothing, so only the queue's own cost is measured."""

from __future__ import annotations

from benchmarks.peerkit.stamp import stamp
from django_arcature import job


@job(name="bench.noop")
def noop() -> None:
    return None


@job(name="bench.peer_noop")
def peer_noop(key: int) -> None:
    """benchmarks/peers.py's job: stamps its start (as every queue's there does), no more."""
    stamp(key)

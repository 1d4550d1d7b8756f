"""When a worker recycles itself: --max-memory, --max-runtime, and the drain timeout (no DB)."""

from __future__ import annotations

import pytest

from django_arcature.worker.recycling import Drain, Recycler, rss_mb


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_max_runtime() -> None:
    clock = Clock()
    recycler = Recycler(max_runtime=60, clock=clock)
    clock.now += 59.9
    assert recycler.reason() is None
    clock.now += 0.1
    assert "max-runtime 60s" in (recycler.reason() or "")


def test_max_memory_is_read_at_most_once_a_second() -> None:
    clock = Clock()
    readings = iter([100.0, 300.0, 300.0])
    recycler = Recycler(max_memory_mb=256, memory=lambda: next(readings), clock=clock)
    assert recycler.reason() is None  # 100 MB
    assert recycler.reason() is None  # not read again yet
    clock.now += 1.0
    assert "max-memory 256 MB" in (recycler.reason() or "")


def test_no_limits_never_recycles() -> None:
    assert Recycler().reason() is None


def test_bad_limits() -> None:
    with pytest.raises(ValueError, match="above 0"):
        Recycler(max_memory_mb=0)
    with pytest.raises(ValueError, match="above 0"):
        Recycler(max_runtime=-1)


def test_drain_timeout() -> None:
    clock = Clock()
    drain = Drain(5, clock=clock)
    assert not drain.timed_out()
    clock.now += 5
    assert drain.timed_out()
    assert not Drain(None, clock=clock).timed_out()


def test_rss_is_a_plausible_number_of_megabytes() -> None:
    assert 5 < rss_mb() < 10_000

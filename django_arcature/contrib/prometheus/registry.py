"""Which registry a scrape reads: this process's, or every process's on the host."""

from __future__ import annotations

import os

from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector

from .collector import QueueCollector

_MULTIPROC_ENV = ("PROMETHEUS_MULTIPROC_DIR", "prometheus_multiproc_dir")
_collectors: dict[str, QueueCollector] = {}
_default_registered: set[str] = set()


def multiprocess_enabled() -> bool:
    """prometheus-client's multiprocess mode is on when its directory is set."""
    return any(os.environ.get(name) for name in _MULTIPROC_ENV)


def queue_collector(using: str = "default") -> QueueCollector:
    """One sampler per database alias and process, so its cache is shared by all scrapes."""
    collector = _collectors.get(using)
    if collector is None:
        collector = _collectors[using] = QueueCollector(using)
    return collector


def serving_registry(using: str = "default") -> CollectorRegistry:
    """The registry to expose: counters (summed over processes in multiprocess mode)
    plus the database-sampled queue gauges."""
    if multiprocess_enabled():
        registry = CollectorRegistry()
        MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        registry.register(queue_collector(using))
        return registry
    if using not in _default_registered:
        REGISTRY.register(queue_collector(using))
        _default_registered.add(using)
    return REGISTRY

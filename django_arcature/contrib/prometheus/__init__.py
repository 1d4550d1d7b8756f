"""Prometheus metrics for django-arcature (``pip install django-arcature[prometheus]``).

* counters and histograms are updated by receivers of the landed-write events
  (:mod:`.receivers`), in whichever process the write happened: the web process
  counts enqueues, the worker counts claims and outcomes;
* per-queue gauges (ready, scheduled, running, oldest ready job's age) are read
  from the database when a scrape arrives (:mod:`.collector`), at most once per
  ``sample_seconds``, so ten scrapers cost one query;
* ``arcature_worker --metrics-port PORT`` serves them from the worker
  (:mod:`.server`); :func:`.views.metrics` serves them from the web side.

Several worker processes on one host: set ``PROMETHEUS_MULTIPROC_DIR`` (as for
gunicorn) and give them all the same port. Each process writes its counters to
that directory; whichever process holds the port serves the sum of all of them,
and another takes the port over if it exits (see docs/observability.md).
"""

from __future__ import annotations

from .receivers import install, uninstall
from .registry import multiprocess_enabled, serving_registry

__all__ = ["install", "multiprocess_enabled", "serving_registry", "uninstall"]

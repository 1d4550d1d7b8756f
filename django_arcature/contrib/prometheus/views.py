"""``/metrics`` for the web side: ``path("metrics", metrics)`` in your URLconf.

Protect it as you would the admin (a private network, or a wrapper checking a
token): queue names and task names are visible to whoever can read it.
"""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from django_arcature.conf import job_database

from .receivers import install
from .registry import serving_registry


@require_GET
def metrics(request: HttpRequest, using: str | None = None) -> HttpResponse:
    """The Prometheus text exposition: counters of this process (or of all of this
    host's processes in multiprocess mode) and the database-sampled queue gauges,
    read from ``using``, else the job table's database (``ARCATURE["DATABASE"]``)."""
    install()
    body = generate_latest(serving_registry(job_database(using)))
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)

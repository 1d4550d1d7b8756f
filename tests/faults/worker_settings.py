"""Settings for worker processes that reach their database through the fault proxy.

The suite's own settings, with the server's address replaced by the proxy's
(``ARCATURE_PROXY_PORT``) and the ``tests.faults`` app added, whose receivers can
be told to raise (``ARCATURE_FAULT_RAISING_RECEIVERS``).
"""

from __future__ import annotations

import os

from tests.settings import *  # noqa: F403
from tests.settings import DATABASES, INSTALLED_APPS

_port = os.environ.get("ARCATURE_PROXY_PORT")
if _port:
    DATABASES["default"]["HOST"] = "127.0.0.1"
    DATABASES["default"]["PORT"] = _port
    if DATABASES["default"]["ENGINE"].endswith("postgresql"):
        # The proxy reads the wire protocol: no TLS between the worker and it.
        DATABASES["default"].setdefault("OPTIONS", {})["sslmode"] = "disable"

INSTALLED_APPS = [*INSTALLED_APPS, "tests.faults"]

# Lost claims come back quickly: the worker sweeps expired leases twice a second.
ARCATURE = {**ARCATURE, "SWEEP_INTERVAL": 0.5}  # noqa: F405

"""Test settings with the job table on a database of its own (test_jobs_database.py).

``ARCATURE_APP_DB_URL`` and ``ARCATURE_JOBS_DB_URL`` name the two databases;
``ARCATURE_NO_ROUTER=1`` leaves the router out, which the system check must refuse;
``ARCATURE_EXTRA`` (JSON) adds keys to ``ARCATURE``, e.g. a wrong value to be reported.
"""

from __future__ import annotations

import json
import os

from tests.dburl import parse
from tests.settings import *  # noqa: F403
from tests.settings import ARCATURE as BASE_ARCATURE
from tests.settings import BASE_DIR

DATABASES = {
    "default": parse(os.environ["ARCATURE_APP_DB_URL"], BASE_DIR),
    "jobs": parse(os.environ["ARCATURE_JOBS_DB_URL"], BASE_DIR),
}
DATABASE_ROUTERS = (
    [] if os.environ.get("ARCATURE_NO_ROUTER") == "1" else ["django_arcature.routers.JobsRouter"]
)
ARCATURE = {
    **BASE_ARCATURE,
    "DATABASE": "jobs",
    **json.loads(os.environ.get("ARCATURE_EXTRA", "{}")),
}

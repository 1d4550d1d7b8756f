"""The test settings with a project LOGGING that sends django_arcature's log away from
the process's stdout and stderr: to the file ``ARCATURE_TEST_ROUTED_LOG`` names, or
nowhere (a NullHandler) without it. ``arcature_bench`` must work under both."""

import os

from tests.settings import *  # noqa: F403
from tests.settings import LOGGING

_FILE = os.environ.get("ARCATURE_TEST_ROUTED_LOG")

LOGGING.clear()
LOGGING.update(
    {
        "version": 1,
        "disable_existing_loggers": False,
        "handlers": {
            "routed": (
                {"class": "logging.FileHandler", "filename": _FILE}
                if _FILE
                else {"class": "logging.NullHandler"}
            )
        },
        "loggers": {
            "django_arcature": {"handlers": ["routed"], "level": "INFO", "propagate": False}
        },
    }
)

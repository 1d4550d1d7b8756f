"""The test settings with Django's default logging, as in a fresh project (no LOGGING)."""

from tests.settings import *  # noqa: F403
from tests.settings import LOGGING

LOGGING.clear()
LOGGING.update({"version": 1, "disable_existing_loggers": False})

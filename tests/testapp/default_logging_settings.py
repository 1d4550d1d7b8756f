"""The test settings with Django's default logging, as in a fresh project (no LOGGING)."""

from tests.settings import *  # noqa: F403

LOGGING: dict[str, object] = {"version": 1, "disable_existing_loggers": False}

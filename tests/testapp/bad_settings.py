"""The test settings with a broken ARCATURE: the worker must refuse to start."""

from tests.settings import *  # noqa: F403

ARCATURE = {"LEASE_SECONDS": 0, "POLL_INTERVL": 1}

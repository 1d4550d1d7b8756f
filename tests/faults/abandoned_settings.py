"""Test settings for a worker process that may abandon at most one timed-out thread."""

from tests.settings import *  # noqa: F403
from tests.settings import ARCATURE

ARCATURE = {**ARCATURE, "MAX_ABANDONED_THREADS": 1}

"""A worker process that stops itself at its first abandoned handler thread."""

from tests.settings import *  # noqa: F403
from tests.settings import ARCATURE

ARCATURE = {**ARCATURE, "MAX_ABANDONED_THREADS": 0}

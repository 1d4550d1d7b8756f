"""The test settings with a ``TASKS`` alias whose ``OPTIONS`` are wrong (arcature.E102)."""

from tests.settings import *  # noqa: F403

TASKS = {
    "default": {
        "BACKEND": "django_arcature.backend.ArcatureBackend",
        "OPTIONS": {"MAX_ATTEMPTZ": 3},
    }
}

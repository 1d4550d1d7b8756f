"""The test settings in a project that declares ``@periodic`` without cronsim installed.

``sys.modules["cronsim"] = None`` makes ``import cronsim`` fail and ``find_spec``
answer None, exactly as when the ``[schedules]`` extra was not installed.
"""

import sys

from tests.settings import *  # noqa: F403
from tests.settings import INSTALLED_APPS

sys.modules["cronsim"] = None  # type: ignore[assignment]

INSTALLED_APPS = [*INSTALLED_APPS, "tests.periodic_app"]

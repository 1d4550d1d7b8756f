"""The test settings plus an app whose jobs module imports models and then fails."""

from tests.settings import *  # noqa: F403
from tests.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.unit.registry_fixtures.models_broken_app"]

"""The test settings of a project whose admin and commands speak French."""

from tests.settings import *  # noqa: F403

LANGUAGE_CODE = "fr"
